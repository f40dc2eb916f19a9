"""Transformer Engine's layers as Megatron-Core builds them (``stack.kernels: transformer-engine``).

A model source written for eager PyTorch (a Hugging Face causal LM) runs each norm, rotary
embedding and gated activation as several elementwise kernels, often through fp32 copies
(transformers' ``LlamaRMSNorm`` upcasts its input). Megatron-Core's GPT layer spec with
Transformer Engine runs each as one fused kernel. At capture, :func:`apply` gives the model's
modules forwards whose aten ops are those kernels' reads and writes, one op each way:

* **norms** (``nn.LayerNorm`` and its subclasses, ``*RMSNorm``): TE's normalisation kernels
  (``transformer_engine/common/normalization``, the ``TENorm``/``LayerNormLinear`` of the layer
  spec): one forward kernel (recorded as ``native_layer_norm`` for both kinds, in the input's
  dtype, the statistics in fp32: :class:`_FusedNorm`) and one backward (both gradients), saving the input and the statistics;
  a zero-centred gamma (Nemotron's ``LayerNorm1P``) is folded into the kernel
  (TE's ``zero_centered_gamma``);
* **gated MLPs** (a module with ``gate_proj``, ``up_proj``, ``down_proj`` and ``act_fn``: SwiGLU):
  Megatron-Core's fused ``bias_swiglu`` (``megatron/core/fusions/fused_bias_swiglu.py``): one
  forward kernel reading the two projections and writing their product, saving its two inputs
  (not the activation's output as well); its backward as two elementwise kernels of the fused one's
  reads and writes;
* **rotary embeddings** (a transformers model file's ``apply_rotary_pos_emb``): Megatron-Core's
  fused RoPE (``apply_rope_fusion``, TE's ``fused_apply_rotary_pos_emb``): one kernel per query and
  per key tensor, forward and backward, instead of the slices, the negation, the concatenation
  and the products of ``rotate_half``;
* **fused attention with sinks**: a model whose transformers file runs attention sinks in eager
  attention (GPT-OSS: its ``s x s`` scores, the sink logit concatenated, softmax, two batched GEMMs)
  runs TE's fused attention instead (cuDNN's, which takes sinks and sliding windows), traced as SDPA
  (the config's ``_attn_implementation`` set to ``sdpa``; the sinks' one extra logit per row is not
  counted); a sliding-window layer's fused kernel computes only its band
  (:mod:`gpucast.graph.windows`);
* **no key/value cache**: a transformers model in training still builds one when its config says
  ``use_cache`` (two concatenations a layer); Megatron's training step has none;
* **FP8 weights**: the FP8 copy of each weight (and its transpose) that TE keeps for the backward
  is cast in the first micro-batch and cached for the step's others (Megatron-Core passes
  ``is_first_microbatch``): filed as ``weight_copies``, not activations, so a parallel plan holds
  them once, two bytes a parameter (the copy and its transpose), not once per micro-batch in flight;
* **FP8 casts**: with precision ``fp8`` the model's weights are bf16 (Megatron's ``Float16Module``;
  TE's FP8 runs over bf16 parameters, the fp32 master in the optimizer) and there is no autocast;
  a tensor that feeds several linear layers (the query, key and value projections, the gate and
  up projections) is cast to FP8 once, as TE's ``LayerNormLinear`` casts the normalised input
  once for the fused QKV and FC1 GEMMs (:func:`gpucast.graph.fp8.shared_casts`);
* **FP8 experts**: with an FP8 recipe, a mixture-of-experts layer's routed experts (transformers'
  ``grouped_mm`` experts) run as TE's ``GroupedLinear`` in FP8 (:func:`gpucast.graph.fp8.grouped_mm`;
  transformers' ``_grouped_mm`` is wrapped once and the wrapper runs the original outside such a capture).

Default: a plan under Megatron (``parallel.framework``, :func:`gpucast.estimate.parallel.framework.framework_of`)
captures with these layers unless ``stack.kernels`` says ``eager``
(:func:`gpucast.api.capture_job`); everything else runs the model source's own modules.

Not modelled: the fused QKV and FC1 GEMMs themselves (the same FLOPs in two or three GEMMs here),
bias-dropout-add fusion (the models here have no dropout or bias there), the FP8 weight casts'
time saved after the first micro-batch (cast at each micro-batch here), Nemotron's squared-ReLU as one kernel.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys

import torch
from torch import nn

aten = torch.ops.aten
_ROPE_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("gpucast_te_rope", default=False)
_FP8_EXPERTS: contextvars.ContextVar[bool] = contextvars.ContextVar("gpucast_te_fp8_experts", default=False)
_WRAPPED = "_gpucast_te_original"


class _FusedNorm(torch.autograd.Function):
    """One norm kernel each way. RMSNorm is recorded as ``native_layer_norm``: TE's RMSNorm and LayerNorm
    kernels read and write the same bytes (the input, the output, fp32 statistics a row), and aten's
    ``_fused_rms_norm`` has no meta kernel (it decomposes into its five elementwise ops there)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        y, mean, rstd = aten.native_layer_norm(x, [x.shape[-1]], weight, bias, 1e-5)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dx, dw, db = aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd, weight, bias,
                                                     [True, weight is not None, bias is not None])
        return dx, dw, db


class _FusedSwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return gate * up   # one kernel: the two inputs read, the product written

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        return grad * up, grad * gate


class _FusedRope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        return q.mul(1.0), k.mul(1.0)   # one kernel each: the tensor read and written (the tables are small)

    @staticmethod
    def backward(ctx, gq, gk):
        return gq.mul(1.0), gk.mul(1.0)


def _is_norm(m: nn.Module) -> bool:
    return isinstance(m, nn.LayerNorm) or (type(m).__name__.endswith("RMSNorm") and isinstance(
        getattr(m, "weight", None), torch.Tensor))


def _norm_forward(m: nn.Module):
    def forward(x: torch.Tensor) -> torch.Tensor:
        w = m.weight if m.weight is None or m.weight.dtype == x.dtype else m.weight.to(x.dtype)
        b = getattr(m, "bias", None)
        b = b if b is None or b.dtype == x.dtype else b.to(x.dtype)
        return _FusedNorm.apply(x, w, b)

    return forward


def _is_gated_mlp(m: nn.Module) -> bool:
    act = getattr(m, "act_fn", None)
    silu = isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation"  # transformers' ACT2FN["silu"]
    return all(isinstance(getattr(m, n, None), nn.Module) for n in ("gate_proj", "up_proj", "down_proj")) and silu


def _swiglu_forward(m: nn.Module):
    def forward(x: torch.Tensor) -> torch.Tensor:
        return m.down_proj(_FusedSwiGLU.apply(m.gate_proj(x), m.up_proj(x)))

    return forward


def _fused_rope(original):
    def apply_rotary_pos_emb(q, k, *args, **kwargs):
        if not _ROPE_ACTIVE.get():
            return original(q, k, *args, **kwargs)
        return _FusedRope.apply(q, k)

    setattr(apply_rotary_pos_emb, _WRAPPED, original)
    return apply_rotary_pos_emb


def _install_rope(model: nn.Module) -> int:
    """Wrap ``apply_rotary_pos_emb`` in the model's transformers modules (once; the wrapper runs the
    original except inside :func:`active`, so other captures in other threads are unchanged)."""
    from gpucast import imports

    n = 0
    with imports.LOCK:
        for name in {type(m).__module__ for m in model.modules()}:
            mod = sys.modules.get(name)
            fn = getattr(mod, "apply_rotary_pos_emb", None)
            if mod is None or not callable(fn) or not name.startswith("transformers."):
                continue
            if not hasattr(fn, _WRAPPED):
                mod.apply_rotary_pos_emb = _fused_rope(fn)
            n += 1
    return n


def _fp8_grouped(original):
    def _grouped_mm(input, weight, offs):
        if not _FP8_EXPERTS.get():
            return original(input, weight, offs)
        from gpucast.graph import fp8

        return fp8.grouped_mm(input.to(weight.dtype), weight, offs)

    setattr(_grouped_mm, _WRAPPED, original)
    return _grouped_mm


def _install_grouped() -> bool:
    """Wrap transformers' ``_grouped_mm`` (once; the wrapper runs the original outside :func:`active`
    with FP8 experts); False where this transformers has none."""
    from gpucast import imports

    mod = sys.modules.get("transformers.integrations.moe")
    fn = getattr(mod, "_grouped_mm", None)
    if mod is None or not callable(fn) or not hasattr(torch, "_scaled_grouped_mm"):
        return False
    with imports.LOCK:
        if not hasattr(mod._grouped_mm, _WRAPPED):
            mod._grouped_mm = _fp8_grouped(mod._grouped_mm)
    return True


def _experts_bf16(module, args):
    module._gpucast_fp8_experts = _FP8_EXPERTS.set(False)


def _experts_back(module, args, out):
    token = module.__dict__.pop("_gpucast_fp8_experts", None)
    if token is not None:
        _FP8_EXPERTS.reset(token)


def apply(model: nn.Module, fp8_experts: bool = False, bf16_blocks=()) -> dict[str, int]:
    """Give ``model``'s norms and gated MLPs TE's fused forwards and its rotary embedding the fused
    kernel, and with ``fp8_experts`` its routed experts FP8 grouped GEMMs but in ``bf16_blocks`` (the
    recipe's layers kept in bf16: :func:`gpucast.graph.fp8.bf16_blocks`) (module docstring); returns
    how many of each."""
    counts = {"norms": 0, "gated_mlps": 0, "rope_modules": 0,
              "fp8_experts": int(fp8_experts and any(type(m).__name__.endswith("Experts") for m in model.modules())
                                 and _install_grouped())}
    for m in model.modules():
        if _is_norm(m):
            m.forward = _norm_forward(m)
            counts["norms"] += 1
        elif _is_gated_mlp(m):
            m.forward = _swiglu_forward(m)
            counts["gated_mlps"] += 1
    for b in bf16_blocks if counts["fp8_experts"] else ():   # their experts' GEMMs in bf16
        b.register_forward_pre_hook(_experts_bf16)
        b.register_forward_hook(_experts_back)
    counts["rope_modules"] = _install_rope(model)
    counts["fused_sink_attention"] = 0
    if any(isinstance(getattr(m, "sinks", None), nn.Parameter) for m in model.modules()):
        for m in model.modules():   # eager attention with sinks -> TE's fused attention (module docstring)
            config = getattr(m, "config", None)
            if getattr(config, "_attn_implementation", None) == "eager":
                config._attn_implementation = "sdpa"
                counts["fused_sink_attention"] = 1
    for m in model.modules():   # no key/value cache in Megatron's training step (HF's concatenates into one)
        config = getattr(m, "config", None)
        if getattr(config, "use_cache", False):
            config.use_cache = False
    return counts


@contextlib.contextmanager
def active(on_weight_copy=None, fp8_experts: bool = False, weight_work=None):
    """While the step is recorded: the fused rotary embedding, FP8 casts shared between layers and,
    with ``fp8_experts``, the experts' FP8 grouped GEMMs; ``on_weight_copy`` is called with each FP8
    weight copy kept for the backward, and each weight's FP8 cast and transpose are recorded inside
    ``weight_work()`` (:func:`gpucast.graph.fp8.shared_casts`)."""
    from gpucast.graph import fp8

    token, experts = _ROPE_ACTIVE.set(True), _FP8_EXPERTS.set(fp8_experts)
    try:
        with fp8.shared_casts(on_weight_copy, weight_work):
            yield
    finally:
        _FP8_EXPERTS.reset(experts)
        _ROPE_ACTIVE.reset(token)
