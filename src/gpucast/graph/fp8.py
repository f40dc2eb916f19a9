"""FP8 as Transformer Engine's delayed-scaling recipe runs it (precision ``fp8``).

A job at precision ``fp8`` runs under bf16 autocast, as TE's recipe is used (``te.fp8_autocast``
around a bf16 model), and its linear layers' GEMMs in FP8: at capture, :func:`apply` gives every
``nn.Linear`` (and transformers' ``Conv1D``, GPT-2's linear layer) whose two sizes are multiples of
16 (TE's requirement for FP8 GEMMs) a forward that does what TE's ``Linear`` does, as aten ops whose
FLOPs, bytes and kernels are its kernels':

* forward: the input cast to E4M3 (TE fuses the amax into the cast: one kernel) and transposed in
  FP8 (TE's ``cast_transpose``: the wgrad operand, saved for the backward instead of the bf16
  input: 1 byte per element, not 2); the weight cast to E4M3 and transposed (TE's FP8 weight and
  its transpose, both kept for the backward: 2 bytes per parameter beside the master weights);
  ``torch._scaled_mm`` (cuBLASLt's FP8 GEMM, bf16 out, bias fused);
* backward: the output gradient cast to E5M2 and transposed; the data gradient and the weight
  gradient as two FP8 GEMMs (a frozen weight, an adapter's base, has no weight gradient: no
  transpose, one GEMM); the bias gradient as a reduction.

The language-model head stays in bf16 (TE's recipes and Megatron-LM's ``--fp8`` leave the output
layer out), as do attention's own GEMMs (FlashAttention in bf16), normalisations and everything
else. FP8 GEMMs run at the GPU's FP8 peak (:func:`gpucast.estimate.kernels.math_peak`); a GPU
without FP8 tensor cores costs them at its FP16 rate (TE itself refuses to run there; the
prediction says so).

Under Megatron-Core (``stack.kernels: transformer-engine``, :mod:`gpucast.graph.te`) the weights are
bf16 with no autocast, and a tensor feeding several linear layers is cast once (:func:`shared_casts`);
a mixture-of-experts layer's routed experts run as TE's ``GroupedLinear`` in FP8
(:func:`grouped_mm`): the tokens and each expert's weight cast to FP8, ``torch._scaled_grouped_mm``
(one grouped FP8 GEMM) forward, and two backward (the data gradient; the weight gradients over the
groups' rows). Their gradient is cast to E4M3 rather than TE's E5M2 (PyTorch's grouped FP8 GEMM
takes E4M3 operands only; the same byte an element).

Scaling recipes (``stack.fp8_recipe``, :func:`recipe`): ``delayed`` (TE's ``DelayedScaling``, the
default: each cast's kernel records the amax it will scale the next step with, one pass),
``current`` (``Float8CurrentScaling``: the tensor's amax is reduced first and the cast reads it
again: one more read of every tensor cast, recorded as an ``amax`` reduction before each cast) and
``blockwise`` (``Float8BlockScaling``, DeepSeek-V3's 1x128 and 128x128 scales, computed inside the
cast kernel: one pass, as delayed; its scales are 1/128 of an element's bytes or less, not counted,
and its GEMMs are costed at the FP8 rate as per-tensor ones: DeepGEMM's 1,550 TFLOPS on an H800 is
the same share of the FP8 peak as per-tensor cuBLAS reaches).

FP8 weight caching across micro-batches: the trace casts and transposes each weight in every forward
(as with ``is_first_microbatch`` unset); under Megatron-Core those ops are recorded inside
:func:`shared_casts`' ``weight_work`` (the tracer tags them ``fp8_weight``) and a parallel plan counts
them once a step (:mod:`gpucast.estimate.parallel.fp8_params`).

The recipe's layers kept in bf16 (``stack.bf16_layers``, :func:`bf16_blocks`): the linear layers of the
first and last transformer blocks keep bf16 GEMMs, and so do their routed experts
(:func:`gpucast.graph.te.apply`).

Not modelled: the per-step amax-history and scale update (one small fused kernel for all tensors),
the per-tensor scale buffers (bytes), MXFP8/NVFP4 block scaling (Blackwell recipes), FP8 attention,
FP8 all-gathers of sharded weights.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref

import torch
from torch import nn

E4M3 = torch.float8_e4m3fn  # forward operands (TE's Format.HYBRID)
# The scaling recipe of the capture (stack.fp8_recipe; module docstring).
_RECIPE: contextvars.ContextVar[str] = contextvars.ContextVar("gpucast_fp8_recipe", default="delayed")


@contextlib.contextmanager
def recipe(name: str | None):
    """Cast as the scaling recipe ``name`` does while the step is recorded (module docstring)."""
    token = _RECIPE.set(name or "delayed")
    try:
        yield
    finally:
        _RECIPE.reset(token)


def _cast(t: torch.Tensor, dtype, **kwargs) -> torch.Tensor:
    """``t`` cast to FP8, after current scaling's amax pass over it (module docstring)."""
    if _RECIPE.get() == "current":
        t.amax()
    return t.to(dtype, **kwargs)
E5M2 = torch.float8_e5m2    # gradients
ALIGN = 16  # FP8 GEMM sizes must be multiples of 16 (TE asserts it; cuBLASLt's FP8 kernels need it)
# Inside shared_casts(): input tensor id -> (a weak reference to the tensor, its FP8 cast, the cast's
# transpose); an entry goes when its tensor does, so the casts live no longer than their input.
_CASTS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("gpucast_fp8_casts", default=None)
# Inside shared_casts(): called with each FP8 weight copy kept for the backward.
_ON_WEIGHT_COPY: contextvars.ContextVar = contextvars.ContextVar("gpucast_fp8_weight_copy", default=None)
# Inside shared_casts(): a context manager factory the weight's cast and transpose are recorded in.
_WEIGHT_WORK: contextvars.ContextVar = contextvars.ContextVar("gpucast_fp8_weight_work", default=None)


@contextlib.contextmanager
def shared_casts(on_weight_copy=None, weight_work=None):
    """Cast a tensor that feeds several FP8 linear layers once (Transformer Engine's ``LayerNormLinear``
    under Megatron-Core, whose QKV and FC1 are one GEMM each: :mod:`gpucast.graph.te`); call
    ``on_weight_copy`` with each FP8 weight copy saved for the backward (the tracer files it apart from
    the activations); record each weight's cast and transpose inside ``weight_work()`` (the tracer tags
    them: TE does that work once a step, given ``is_first_microbatch``)."""
    token, hook, work = _CASTS.set({}), _ON_WEIGHT_COPY.set(on_weight_copy), _WEIGHT_WORK.set(weight_work)
    try:
        yield
    finally:
        _CASTS.reset(token)
        _ON_WEIGHT_COPY.reset(hook)
        _WEIGHT_WORK.reset(work)


def _weight_work():
    """The context a weight's FP8 cast and transpose are recorded in (:func:`shared_casts`)."""
    factory = _WEIGHT_WORK.get()
    return factory() if factory is not None else contextlib.nullcontext()


def _linear_weight(module: nn.Module) -> tuple[torch.Tensor, bool] | None:
    """(weight, stored as (in, out)) of a linear layer TE would run in FP8, or None."""
    if isinstance(module, nn.Linear):
        w, in_out = module.weight, False
    elif type(module).__name__ == "Conv1D" and hasattr(module, "nf"):  # transformers.pytorch_utils.Conv1D
        w, in_out = module.weight, True
    else:
        return None
    if w.dim() != 2 or w.shape[0] % ALIGN or w.shape[1] % ALIGN:
        return None
    return w, in_out


def bf16_blocks(blocks: list[nn.Module], counts: tuple[int, int] | None) -> list[nn.Module]:
    """The first and last of ``blocks`` a recipe keeps in bf16 (``stack.bf16_layers``: Megatron-Core's
    ``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16`` under ``--first-last-layers-bf16``)."""
    if not counts or not blocks:
        return []
    first, last = counts
    n = len(blocks)
    return [b for i, b in enumerate(blocks) if i < first or i >= n - last]


def apply(model: nn.Module, head: nn.Module | None, keep: list[nn.Module] = ()) -> int:
    """Give each eligible linear layer of ``model`` but ``head`` and those inside the blocks ``keep``
    (:func:`bf16_blocks`) TE's FP8 forward (module docstring); returns how many layers run in FP8."""
    kept = {id(m) for b in keep for m in b.modules()}
    n = 0
    for module in model.modules():
        if module is head or id(module) in kept:
            continue
        found = _linear_weight(module)
        if found is None:
            continue
        weight, in_out = found
        scale = torch.ones((), device=weight.device)  # TE's per-tensor scale (a buffer, made once)
        module.forward = _forward(module, in_out, scale)
        n += 1
    return n


def _forward(module: nn.Module, in_out: bool, scale: torch.Tensor):
    def forward(x: torch.Tensor) -> torch.Tensor:
        out = _Fp8Linear.apply(x, module.weight, module.bias, in_out, scale)   # (tokens, out)
        # reshaped out here: a view made inside the Function could not be modified in place after it
        # (Llama-4's MoE adds into its shared expert's output)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, in_out, scale):
        shape = x.shape
        casts = _CASTS.get()
        seen = casts.get(id(x)) if casts is not None else None
        seen = seen if seen is not None and seen[0]() is x else None
        xq, xt = (seen[1], seen[2]) if seen is not None else (_cast(x.reshape(-1, shape[-1]), E4M3), None)
        w = weight.t() if in_out else weight  # (out, in)
        with _weight_work():
            wq = _cast(w, E4M3, memory_format=torch.contiguous_format)
        b = bias.to(torch.bfloat16) if bias is not None else None
        out = torch._scaled_mm(xq, wq.t(), scale, scale, bias=b, out_dtype=torch.bfloat16)
        if any(ctx.needs_input_grad):  # training: what the backward reads
            if xt is None and ctx.needs_input_grad[1]:
                xt = xq.t().contiguous()  # cast_transpose's second output: the weight gradient's operand
            with _weight_work():
                wt = wq.t().contiguous()  # the FP8 weight's transpose: the data gradient's operand
            if _ON_WEIGHT_COPY.get() is not None:
                _ON_WEIGHT_COPY.get()(wt)
            ctx.save_for_backward(xt, wt, scale)
        if casts is not None and seen is None:
            casts[id(x)] = (weakref.ref(x), xq, xt)
            weakref.finalize(x, casts.pop, id(x), None)
        ctx.in_out, ctx.shape, ctx.has_bias = in_out, shape, bias is not None
        ctx.weight_dtype = weight.dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        xt, wt, scale = ctx.saved_tensors
        g2 = grad
        gq = _cast(g2, E5M2)
        dx = torch._scaled_mm(gq, wt.t(), scale, scale, out_dtype=torch.bfloat16)
        dw = None
        if ctx.needs_input_grad[1]:  # a frozen weight (an adapter's base) has no weight-gradient GEMM
            gt = gq.t().contiguous()
            dw = torch._scaled_mm(gt, xt.t(), scale, scale, out_dtype=torch.bfloat16).to(ctx.weight_dtype)
            if ctx.in_out:
                dw = dw.t()
        db = g2.sum(0).to(ctx.weight_dtype) if ctx.has_bias else None
        return dx.reshape(ctx.shape), dw, db, None, None


def _col_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its last two dimensions column-major (the second operand's layout FP8 GEMMs take)."""
    return t.transpose(-2, -1).contiguous().transpose(-2, -1)


def grouped_mm(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The routed experts' ``(tokens, K) x (experts, K, N)`` grouped GEMM as TE's FP8 ``GroupedLinear``
    runs it (module docstring)."""
    return _Fp8GroupedMM.apply(x, weight, offs)


class _Fp8GroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, offs):
        xq = _cast(x, E4M3)
        with _weight_work():
            wq = _col_major(_cast(weight, E4M3))
        rows = torch.ones(x.shape[0], device=x.device)                 # TE's scales (one per row / column)
        cols = torch.ones(weight.shape[0], weight.shape[-1], device=x.device)
        out = torch._scaled_grouped_mm(xq, wq, rows, cols, offs=offs, out_dtype=torch.bfloat16)
        if any(ctx.needs_input_grad):
            xt = _col_major(xq) if ctx.needs_input_grad[1] else None   # the weight gradient's operand
            with _weight_work():
                wt = _col_major(wq.transpose(-2, -1))                   # the data gradient's operand
            if _ON_WEIGHT_COPY.get() is not None:
                _ON_WEIGHT_COPY.get()(wt)
            ctx.save_for_backward(xt, wt, offs)
        ctx.weight_dtype, ctx.k = weight.dtype, x.shape[-1]
        return out

    @staticmethod
    def backward(ctx, grad):
        xt, wt, offs = ctx.saved_tensors
        gq = _cast(grad, E4M3)
        groups = wt.shape[0]
        dx = torch._scaled_grouped_mm(gq, wt, torch.ones(grad.shape[0], device=grad.device),
                                      torch.ones(groups, ctx.k, device=grad.device), offs=offs,
                                      out_dtype=torch.bfloat16)
        dw = None
        if ctx.needs_input_grad[1]:
            gt = gq.t().contiguous()
            dw = torch._scaled_grouped_mm(gt, xt, torch.ones(groups * grad.shape[1], device=grad.device),
                                          torch.ones(groups * ctx.k, device=grad.device), offs=offs,
                                          out_dtype=torch.bfloat16)
            dw = dw.transpose(-2, -1).to(ctx.weight_dtype)
        return dx, dw, None
