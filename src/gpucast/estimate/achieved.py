"""What each kernel family reaches of a GPU's sustained peak, per architecture and software.

``data/achieved.yaml`` holds, per kernel family (``matmul`` and ``matmul_fp8``, ``conv``,
``conv_depthwise`` and its backward, ``attention`` and ``attention_backward``, ``rnn``, ``other``), the fraction of the sustained peak (:meth:`GpuSpec.sustained_tflops
<gpucast.hardware.GpuSpec.sustained_tflops>`: the datasheet peak at the clock the card holds
under its power limit) that the family's kernels reach in steady state: a large problem, every SM
busy with the architecture's largest tile. What a smaller grid loses on top is
:mod:`gpucast.estimate.tiles`'s. The ``reference`` row is the one the constants were built on
(Volta to Ada, and the older SIMT GPUs); an architecture lists only the families whose kernels
reach a different share there, each with the published figures it comes from. Attention also
depends on the kernel the job's stack runs (``stack.attention``: ``flash2``, PyTorch's own SDPA
flash kernel, ``flash3``, the Hopper kernels of the flash-attn 3 package, or ``cudnn``, cuDNN's fused
attention); unset, the one PyTorch's SDPA picks by default for the stack's release on the GPU
(:func:`attention_kernel`).

``bandwidth_per_sm`` in the same file holds, per memory-bound family whose kernels are reductions
(``batchnorm``, ``batchnorm_bf16``: BatchNorm on bf16 inputs with fp32 parameters, as autocast runs
it; ``layernorm``; ``softmax``; ``transpose``: cuDNN's NCHW/NHWC transposes, :mod:`gpucast.graph.layouts`), what one SM's blocks move per second: such kernels keep a fixed number
of loads in flight per SM, so (Little's law) their rate is this figure times the SMs of the GPU or
slice, capped by the DRAM roofline; plain elementwise kernels reach the roofline. Measured on our
H200 (the sources say where), an extrapolation elsewhere.

Depthwise convolutions on NCHW tensors run PyTorch's own kernels (``conv_depthwise2d`` in
aten/src/ATen/native/cuda/DepthwiseConv2d.cu: one thread per output, the window read from global
memory, no tensor cores); their fraction is of the FP32 vector peak (:data:`CUDA_CORE_FAMILIES`),
measured on our H200 and assumed elsewhere (the kernel is the same code on every architecture).

Not modelled: channels-last depthwise convolutions (cuDNN's kernels, several times faster on the
H200: traces do not know the layout), fp16 workloads that PyTorch sends to cuDNN's depthwise
kernels; differences between cuBLAS/cuDNN releases within an architecture (one figure per
architecture and family, for the stacks the sources measured), per-dtype differences beyond the
datasheet peaks other than FP8's (FP16, BF16 and TF32 GEMMs share the matmul fraction).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

from gpucast.graph.layouts import is_depthwise as _depthwise_shapes

FAMILIES = ("matmul", "matmul_fp8", "conv", "conv_depthwise", "conv_depthwise_backward", "attention",
            "attention_backward", "rnn", "other")
# Families whose kernels run on the CUDA cores whatever the dtype (no tensor-core form): their
# fraction is of the FP32 vector peak.
CUDA_CORE_FAMILIES = frozenset({"conv_depthwise", "conv_depthwise_backward"})
DEFAULT_ATTENTION = "flash2"
# The first PyTorch release whose SDPA prefers cuDNN's attention on Hopper by default: aten's
# sdp_utils.cpp check_prefer_cudnn_attention() orders cuDNN first on sm90/sm100 when the bundled cuDNN
# is newer than 9.15.0 (the guard pytorch/pytorch#138522 set after 2.5.0's cuDNN-first default was
# withdrawn in 2.5.1); the code is in 2.10, and 2.11's wheels are the first to bundle such a cuDNN
# (transformers PR #48163's review; our H200 on 2.11 + cuDNN 9.19: its default SDPA rows equal its
# cuDNN rows, benchmarks/h200_kernels.py).
CUDNN_ATTENTION_FROM = (2, 11)
# Architectures where that preference holds and a cuDNN figure is known (Blackwell's sm100 prefers
# cuDNN too; achieved.yaml has no Blackwell cuDNN figure, so it keeps FlashAttention-2's there).
CUDNN_ATTENTION_ARCHITECTURES = frozenset({"hopper"})


def attention_kernel(stack, architecture: str) -> str:
    """The fused attention kernel a job runs: its ``stack.attention``, else PyTorch SDPA's default for
    the stack's release on ``architecture`` (cuDNN on Hopper from :data:`CUDNN_ATTENTION_FROM`; an
    unset release keeps :data:`DEFAULT_ATTENTION`, the kernel of the stacks the constants were built on)."""
    from gpucast.surroundings import version_tuple

    own = getattr(stack, "attention", None)
    if own:
        return own
    torch = getattr(stack, "torch", None)
    if (torch and architecture in CUDNN_ATTENTION_ARCHITECTURES
            and version_tuple(torch)[:2] >= CUDNN_ATTENTION_FROM):
        return "cudnn"
    return DEFAULT_ATTENTION


@lru_cache(maxsize=1)
def _table() -> dict:
    return yaml.safe_load(resources.files("gpucast").joinpath("data/achieved.yaml").read_text())


def _value(entry, attention: str) -> float:
    if isinstance(entry, dict) and "value" not in entry:  # per attention kernel
        entry = entry.get(attention) or entry[DEFAULT_ATTENTION]
    return float(entry["value"])


@lru_cache(maxsize=64)
def fractions(architecture: str, attention: str | None = None) -> dict[str, float]:
    """Family -> steady-state fraction of the sustained peak on ``architecture`` with the
    ``attention`` kernel (``None``: :data:`DEFAULT_ATTENTION`)."""
    t = _table()
    att = attention or DEFAULT_ATTENTION
    own = t.get("architectures", {}).get(architecture, {}) or {}
    return {f: _value(own.get(f, t["reference"][f]), att) for f in FAMILIES}


MEMORY_FAMILIES = ("batchnorm", "batchnorm_bf16", "layernorm", "softmax", "transpose")


@lru_cache(maxsize=1)
def bandwidth_caps() -> dict[str, float]:
    """Memory family -> bytes per second one SM's blocks of it move (``achieved.yaml``'s
    ``bandwidth_per_sm``, GB/s there); families it does not list have no cap."""
    own = _table().get("bandwidth_per_sm", {}) or {}
    return {f: float(own[f]["value"]) * 1e9 for f in MEMORY_FAMILIES if f in own}


def memory_family_of(category: str, op: str = "", dtype: str = "") -> str:
    """The memory-bound family of an op (:data:`MEMORY_FAMILIES`), or ``""`` for the rest."""
    if category == "norm" and "batch_norm" in op:
        # measured: bf16 inputs (autocast's mixed-dtype BatchNorm) run far slower than fp32 ones on the H200;
        # fp16 inputs (cuDNN's mixed-precision BatchNorm) were not measured and take fp32's cap
        return "batchnorm_bf16" if dtype == "bfloat16" else "batchnorm"
    if category == "norm" and ("layer_norm" in op or "group_norm" in op):
        return "layernorm"
    if category == "softmax":
        return "softmax"
    if category == "copy" and op in ("cudnn_nchw_to_nhwc", "cudnn_nhwc_to_nchw"):
        return "transpose"  # cuDNN's layout transposes around a half-precision NCHW convolution
    return ""


def is_depthwise(op: str, shapes: tuple) -> bool:
    """A depthwise convolution: one input channel per group, more than one group (the weight's
    second dimension is 1 and the input has several channels)."""
    try:
        x, w = (shapes[1], shapes[2]) if op.endswith("backward") else (shapes[0], shapes[1])
        return _depthwise_shapes(x, w)
    except (IndexError, TypeError):
        return False


def family_of(category: str, op: str = "", dtype: str = "", shapes: tuple = ()) -> str:
    """The kernel family of an op (anything not a library family is ``other``; a fused attention
    op's backward is ``attention_backward``, a GEMM on FP8 operands ``matmul_fp8``, a depthwise
    convolution ``conv_depthwise`` or ``conv_depthwise_backward``: PyTorch's own CUDA-core kernels
    for NCHW tensors, not cuDNN's implicit GEMMs)."""
    if category == "conv" and is_depthwise(op, shapes):
        return "conv_depthwise_backward" if op.endswith("backward") else "conv_depthwise"
    if category == "attention" and op.endswith("backward"):
        return "attention_backward"
    if category == "matmul" and dtype.startswith("float8"):
        return "matmul_fp8"
    return category if category in FAMILIES else "other"
