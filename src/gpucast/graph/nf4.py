"""4-bit NF4 base weights as bitsandbytes stores and multiplies them (QLoRA's frozen base).

:class:`Linear4bit` stands for ``bitsandbytes.nn.Linear4bit`` with ``quant_type="nf4"``, as
transformers builds it for ``BitsAndBytesConfig(load_in_4bit=True)``:

* **Storage** (``Params4bit``): the weight's ``out x in`` values as 4-bit codes, two per byte, in
  a ``uint8`` tensor of ``ceil(n / 2)`` x 1; one absmax scale per block of :data:`BLOCKSIZE`
  values. With double quantisation (:data:`DOUBLE_QUANT`, QLoRA, Dettmers et al. 2023, sec. 3)
  the scales are themselves quantised to 8 bits, with one fp32 scale per :data:`NESTED_BLOCKSIZE`
  blocks and one fp32 offset per tensor: 8/64 + 32/(64 x 256) = 0.127 bits per parameter of
  constants (0.5 bits without it, fp32 per block). The bias, if any, stays dense.
* **Forward** (``MatMul4Bit.forward``): the weight is dequantised to the dense compute dtype
  (``bitsandbytes.functional.dequantize_4bit``: first, with double quantisation, the 8-bit scales
  back to fp32 (``dequantize_blockwise``) plus the offset (an in-place add), then the 4-bit
  kernel), then one ``linear``. The dense weight is freed after the matmul: only the packed
  weight is kept for backward, not the input.
* **Backward**: the input gradient dequantises the weight again and multiplies,
  ``grad_output @ W``; the frozen weight gets no gradient.

The dequantize kernels are the custom ops ``gpucast::dequantize_nf4`` and
``gpucast::dequantize_blockwise`` (meta kernels only: gpucast never runs them), so the tracer
records them like aten ops. Their cost rules (registered here, as :mod:`gpucast.graph.rnn`
registers its own): category ``elementwise`` (memory-bound), one kernel each, bytes by the
default rule (read the packed codes and their scales, write the dense tensor), and
:data:`DEQUANT_FLOPS_PER_ELEMENT` FLOPs per value written.

Not modelled: the 16-entry NF4 and 256-entry 8-bit code tables (under 2 KB a layer); bitsandbytes'
``gemv_4bit`` inference path for single-token inputs (training never takes it); FP4
(``quant_type="fp4"``) costs the same bytes and is not told apart.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import register_flop_formula

from gpucast.graph import rules

# bitsandbytes' defaults for 4-bit weights: Linear4bit blocksize 64; quantize_4bit with
# compress_statistics quantises the absmax in blocks of 256 (QLoRA paper, sec. 3: "blocksize of
# 64 for W and 256 for c2"). transformers' BitsAndBytesConfig leaves double quantisation off by
# default; QLoRA's recipe (and most fine-tuning scripts) turn it on, which is modelled here.
BLOCKSIZE = 64
NESTED_BLOCKSIZE = 256
DOUBLE_QUANT = True
# FLOPs charged per dequantised value: the scale multiply and the table lookup (counted as one
# operation). A choice, not a measurement; the kernels are memory-bound either way.
DEQUANT_FLOPS_PER_ELEMENT = 2

_LIB = torch.library.Library("gpucast", "DEF")
_LIB.define("dequantize_nf4(Tensor packed, Tensor absmax, SymInt[] shape, ScalarType dtype) -> Tensor")
_LIB.define("dequantize_blockwise(Tensor codes, Tensor absmax, int blocksize) -> Tensor")


@torch.library.register_fake("gpucast::dequantize_nf4")
def _dequantize_nf4_fake(packed, absmax, shape, dtype):
    return packed.new_empty(shape, dtype=dtype)


@torch.library.register_fake("gpucast::dequantize_blockwise")
def _dequantize_blockwise_fake(codes, absmax, blocksize):
    return codes.new_empty(codes.shape, dtype=torch.float32)


dequantize_nf4 = torch.ops.gpucast.dequantize_nf4
dequantize_blockwise = torch.ops.gpucast.dequantize_blockwise


@register_flop_formula([dequantize_nf4, dequantize_blockwise])
def _dequantize_flop(*args, out_shape=None, **kwargs) -> int:
    return DEQUANT_FLOPS_PER_ELEMENT * math.prod(out_shape)


rules.category_rule("elementwise", dequantize_nf4, dequantize_blockwise)


class _MatMul4Bit(torch.autograd.Function):
    """``bitsandbytes.autograd._functions.MatMul4Bit``: dequantise, ``linear``; in backward,
    dequantise again for the input gradient."""

    @staticmethod
    def forward(ctx, x, bias, layer):
        ctx.layer = layer
        return F.linear(x, layer.dequantize().to(x.dtype), bias)

    @staticmethod
    def backward(ctx, grad):
        grad_x = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.matmul(grad, ctx.layer.dequantize().to(grad.dtype))
        if ctx.needs_input_grad[1]:
            grad_bias = grad.sum(tuple(range(grad.dim() - 1)))
        return grad_x, grad_bias, None


class Linear4bit(nn.Module):
    """A frozen ``nn.Linear`` (or GPT-2 ``Conv1D``) with NF4 weights (module docstring).

    ``dtype`` is the compute dtype (``bnb_4bit_compute_dtype``, which is also the dtype the
    weights are dequantised to); ``bias`` is the original bias (kept dense, frozen) or None."""

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None, dtype: torch.dtype,
                 device=None, double_quant: bool = DOUBLE_QUANT) -> None:
        super().__init__()
        self.in_features, self.out_features, self.dtype = in_features, out_features, dtype
        self.double_quant = double_quant
        n = in_features * out_features
        blocks = math.ceil(n / BLOCKSIZE)
        self.weight = nn.Parameter(torch.empty(math.ceil(n / 2), 1, dtype=torch.uint8, device=device),
                                   requires_grad=False)
        if double_quant:
            self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=device))
            self.register_buffer("absmax2", torch.empty(math.ceil(blocks / NESTED_BLOCKSIZE), device=device,
                                                        dtype=torch.float32))
            self.register_buffer("offset", torch.empty((), dtype=torch.float32, device=device))
        else:
            self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32, device=device))
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    @classmethod
    def from_dense(cls, module: nn.Module, dtype: torch.dtype, double_quant: bool = DOUBLE_QUANT) -> "Linear4bit":
        """The 4-bit stand-in for ``module`` (``nn.Linear``, or ``Conv1D`` with its (in, out) weight)."""
        w = module.weight
        out_f, in_f = (w.shape[1], w.shape[0]) if not isinstance(module, nn.Linear) else tuple(w.shape)
        bias = None if module.bias is None else module.bias.to(dtype)
        return cls(in_f, out_f, bias, dtype, device=w.device, double_quant=double_quant)

    def dequantize(self) -> torch.Tensor:
        """The dense ``out x in`` weight in the compute dtype (``dequantize_4bit``)."""
        absmax = self.absmax
        if self.double_quant:
            absmax = dequantize_blockwise(self.absmax, self.absmax2, NESTED_BLOCKSIZE)
            absmax += self.offset
        return dequantize_nf4(self.weight, absmax, [self.out_features, self.in_features], self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # bitsandbytes.nn.Linear4bit.forward: input and bias in the compute dtype, output back in
        # the input's dtype.
        in_dtype = x.dtype
        out = _MatMul4Bit.apply(x.to(self.dtype), self.bias, self)
        return out.to(in_dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, nf4, compute={self.dtype}"

