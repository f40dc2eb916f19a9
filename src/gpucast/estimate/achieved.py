"""What each kernel family reaches of a GPU's sustained peak, per architecture and software.

``data/achieved.yaml`` holds, per kernel family (``matmul``, ``matmul_fp32``, ``matmul_fp8``: the
scaled GEMMs on FP8 operands, ``matmul_fp4``: those on FP4 operands (``matmul_fp8``'s entry where no level
lists one: :data:`FALLBACK`), ``conv``, ``conv_depthwise`` and its backward, ``attention`` and
``attention_backward``, ``rnn``, ``other``), the fraction of the sustained peak (:meth:`GpuSpec.sustained_tflops
<gpucast.hardware.GpuSpec.sustained_tflops>`: the datasheet peak at the clock the card holds
under its power limit) that the family's kernels reach in steady state: a large problem, every SM
busy with the architecture's largest tile. What a smaller grid loses on top is
:mod:`gpucast.estimate.tiles`'s. A GPU takes each family's entry from the most specific level that
lists it (:data:`LEVELS`): its compute capability (``compute_capabilities``: chips whose SMs differ
from the rest of their architecture, e.g. GA10x's FP32 lanes), its architecture (``architectures``),
else ``reference``. Every entry names where it comes from (our measurements with the GPUs and stack,
a published figure with its GPUs, or the reasoning it is derived by); a ``reference`` entry taken on
particular GPUs says why other architectures may use it (:mod:`gpucast.estimate.achieved_sources`
lists, per GPU, which entry applies). Attention also depends on the kernel the job's stack runs
(``stack.attention``: ``flash2``, PyTorch's own SDPA flash kernel, ``flash3``, the Hopper kernels of
the flash-attn 3 package, or ``cudnn``, cuDNN's fused attention); unset, the one PyTorch's SDPA picks
by default for the stack's release on the GPU (:func:`attention_kernel`).

FP32 GEMMs: a float32 matmul runs on the CUDA cores (cuBLAS SGEMM, family ``matmul_fp32``, a share of
the FP32 vector peak) unless TF32 is on for matmuls: the job's ``tf32`` precision, or a PyTorch
release from 1.7 to 1.11 on a GPU with TF32 (``torch.backends.cuda.matmul.allow_tf32`` defaulted to
True there and to False from 1.12; :func:`matmul_family`). cuDNN keeps TF32 on for convolutions
and RNNs (``EstimatorConfig.cudnn_fp32_uses_tf32``). SGEMM's share differs by how many FP32 lanes
share a warp scheduler: 16 on Volta, Turing and GA100 (near peak), 32 on GA10x, Ada, Hopper and
Blackwell.

``bandwidth_per_sm`` at each level holds, per memory-bound family whose kernels are reductions
(``batchnorm``, ``batchnorm_bf16``: BatchNorm on bf16 inputs with fp32 parameters, as autocast runs
it; ``layernorm``; ``softmax``; ``transpose``: cuDNN's NCHW/NHWC transposes, :mod:`gpucast.graph.layouts`),
what one SM's blocks move per second: such kernels keep a fixed number of loads in flight per SM, so
(Little's law) their rate is this figure times the SMs of the GPU or slice, capped by the DRAM
roofline; plain elementwise kernels, and families a GPU's levels do not list, reach the roofline.
Measured on our H200; data-center Blackwell takes them by an argument the file states; other
architectures have no cap. The families of :data:`CHANNEL_BLOCK_FAMILIES` run PyTorch's own training-mode
BatchNorm kernels on NCHW tensors, whose reductions launch one block per channel (``dim3
blocks(input.size(1))`` for ``batch_norm_collect_statistics_kernel`` and
``batch_norm_backward_reduce_kernel``, aten/src/ATen/native/cuda/Normalization.cuh): a layer of *C*
channels keeps at most ``min(SMs, C)`` SMs busy, so its rate is the figure times that
(:func:`gpucast.estimate.kernels.kernel_times`). PyTorch sends bf16 inputs there (cuDNN's BatchNorm
takes fp32 and fp16 ones, whose kernels our H200 rows show less bound by the channels: ``batchnorm``
keeps its whole-GPU figure).

Depthwise convolutions on NCHW tensors run PyTorch's own kernels (``conv_depthwise2d`` in
aten/src/ATen/native/cuda/DepthwiseConv2d.cu: one thread per output, the window read from global
memory, no tensor cores); their fraction is of the FP32 vector peak (:data:`CUDA_CORE_FAMILIES`),
measured on our H200 and carried to other architectures at the same rate per SM and clock (the
kernel is bound by instruction issue, four warp instructions per SM clock since Volta).

A network's first convolution, over an image's 3 channels (:func:`is_stem`), runs far below the
tensor cores' rate whatever the dtype (cuDNN wants input channels in multiples of 8 or 4); its
fraction (``conv_stem`` and its backward) is of the FP32 vector peak, measured on our H200 and
carried to other architectures as the depthwise kernels' are (the same rate per SM and clock).

Not modelled: channels-last depthwise convolutions (cuDNN's kernels, several times faster on the
H200: traces do not know the layout), fp16 workloads that PyTorch sends to cuDNN's depthwise
kernels; differences between cuBLAS/cuDNN releases within an architecture (one figure per
level and family, for the stacks the sources measured), per-dtype differences beyond the
datasheet peaks other than FP8's and FP32's (FP16, BF16 and TF32 GEMMs share the matmul fraction);
fp32 attention and RNN kernels on the CUDA cores (they take their tensor-core families' shares of the
FP32 peak).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

import yaml

from gpucast.graph.batchnorm import BATCH_NORM_EVAL
from gpucast.graph.layouts import is_depthwise as _depthwise_shapes
from gpucast.graph.layouts import is_stem as _stem_shapes

FAMILIES = ("matmul", "matmul_fp32", "matmul_fp8", "matmul_fp4", "conv", "conv_depthwise", "conv_depthwise_backward",
            "conv_stem", "conv_stem_backward", "attention", "attention_backward", "rnn", "other")
# Families whose kernels run on the CUDA cores (no tensor cores): their fraction is of the FP32 vector peak.
CUDA_CORE_FAMILIES = frozenset({"matmul_fp32", "conv_depthwise", "conv_depthwise_backward",
                                "conv_stem", "conv_stem_backward"})
# Families whose kernels are not tiled GEMMs on the tensor cores, so the grid model
# (gpucast.estimate.tiles) does not apply: their fraction was measured at the whole problem.
UNTILED_FAMILIES = frozenset({"conv_depthwise", "conv_depthwise_backward", "conv_stem", "conv_stem_backward"})
# achieved.yaml's levels, most specific first: a GPU takes a family from the first that lists it.
LEVELS = ("compute_capability", "architecture", "reference")
# A family no level of a GPU lists takes this family's entry instead: FP4 GEMMs where only FP8's share is
# known (GPUs without FP4 tensor cores run FP4 at the FP8 row's rate, gpucast.hardware).
FALLBACK = {"matmul_fp4": "matmul_fp8"}
# PyTorch releases whose torch.backends.cuda.matmul.allow_tf32 defaulted to True (TF32 came in 1.7;
# 1.12 turned it off for matmuls: the 1.12 release notes, pytorch/pytorch#76440); cuDNN's flag stays on.
MATMUL_TF32_DEFAULT = ((1, 7), (1, 12))
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


def capability_key(compute_capability) -> str | None:
    """``achieved.yaml``'s key for a compute capability (``(8, 6)`` -> ``"8.6"``); None when unknown."""
    try:
        major, minor = compute_capability
        return f"{int(major)}.{int(minor)}"
    except (TypeError, ValueError):
        return None


def levels(architecture: str, capability: str | None = None) -> list[tuple[str, dict]]:
    """(level name, its table) a GPU of ``architecture`` and ``capability`` reads, most specific first:
    ``"sm 8.6"``, ``"ampere"``, ``"reference"`` (the ones the file lists)."""
    t = _table()
    out = []
    if capability and capability in (t.get("compute_capabilities") or {}):
        out.append((f"sm {capability}", t["compute_capabilities"][capability] or {}))
    if architecture in (t.get("architectures") or {}):
        out.append((architecture, t["architectures"][architecture] or {}))
    out.append(("reference", t["reference"]))
    return out


def lookup(family: str, architecture: str, capability: str | None = None,
           attention: str | None = None, memory: bool = False) -> tuple[str, dict] | None:
    """(level, entry) of ``family`` for a GPU: the most specific level listing it (for attention
    families, listing the ``attention`` kernel or a default; ``memory``: a ``bandwidth_per_sm``
    family); else its :data:`FALLBACK` family's; None when no level lists either (a memory family then
    has no cap)."""
    att = attention or DEFAULT_ATTENTION
    for name, table in levels(architecture, capability):
        own = (table.get("bandwidth_per_sm") or {}) if memory else table
        entry = own.get(family)
        if isinstance(entry, dict) and "value" not in entry:  # per attention kernel
            entry = entry.get(att) or entry.get(DEFAULT_ATTENTION)
        if entry is not None:
            return name, entry
    if family in FALLBACK and not memory:
        return lookup(FALLBACK[family], architecture, capability, attention)
    return None


@lru_cache(maxsize=64)
def fractions(architecture: str, attention: str | None = None, capability: str | None = None) -> dict[str, float]:
    """Family -> steady-state fraction of the sustained peak on ``architecture`` (and compute
    ``capability``, e.g. ``"8.6"``) with the ``attention`` kernel (``None``: :data:`DEFAULT_ATTENTION`)."""
    return {f: float(lookup(f, architecture, capability, attention)[1]["value"]) for f in FAMILIES}


MEMORY_FAMILIES = ("batchnorm", "batchnorm_bf16", "layernorm", "softmax", "transpose", "transpose_fp32")
# Families whose reductions launch one block per channel (module docstring): the SMs they fill.
CHANNEL_BLOCK_FAMILIES = ("batchnorm_bf16",)


@lru_cache(maxsize=64)
def bandwidth_caps(architecture: str, capability: str | None = None) -> dict[str, float]:
    """Memory family -> bytes per second one SM's blocks of it move on a GPU of ``architecture``
    (``bandwidth_per_sm``, GB/s in the file); families no level of the GPU lists have no cap."""
    out = {}
    for f in MEMORY_FAMILIES:
        got = lookup(f, architecture, capability, memory=True)
        if got is not None:
            out[f] = float(got[1]["value"]) * 1e9
    return out


def matmul_tf32_by_default(stack) -> bool:
    """Whether the job's PyTorch release runs float32 matmuls in TF32 unless told otherwise
    (:data:`MATMUL_TF32_DEFAULT`; an unnamed release: no, as every release from 1.12)."""
    got = re.match(r"(\d+)\.(\d+)", str(getattr(stack, "torch", None) or ""))
    if not got:
        return False
    return MATMUL_TF32_DEFAULT[0] <= (int(got[1]), int(got[2])) < MATMUL_TF32_DEFAULT[1]


def matmul_family(family: str, dtype: str, tf32: bool) -> str:
    """``matmul_fp32`` for a float32 GEMM that runs on the CUDA cores (``tf32`` False: TF32 is off for
    matmuls), else ``family`` unchanged."""
    return "matmul_fp32" if family == "matmul" and dtype == "float32" and not tf32 else family


def memory_family_of(category: str, op: str = "", dtype: str = "") -> str:
    """The memory-bound family of an op (:data:`MEMORY_FAMILIES`), or ``""`` for the rest."""
    if op == BATCH_NORM_EVAL:
        # eval mode (gpucast.graph.batchnorm): one elementwise pass with the running statistics
        # (PyTorch's batch_norm_elementwise; no reduction over the batch), at the elementwise roofline, not
        # the training-mode caps measured below
        return ""
    if category == "norm" and "batch_norm" in op:
        # measured: bf16 inputs (autocast's mixed-dtype BatchNorm) run far slower than fp32 ones on the H200;
        # fp16 inputs (cuDNN's mixed-precision BatchNorm) were not measured and take fp32's cap
        return "batchnorm_bf16" if dtype == "bfloat16" else "batchnorm"
    if category == "norm" and ("layer_norm" in op or "group_norm" in op):
        return "layernorm"
    if category == "softmax":
        return "softmax"
    if category == "copy" and op in ("cudnn_nchw_to_nhwc", "cudnn_nhwc_to_nchw"):
        # cuDNN's layout transposes around a tensor-core NCHW convolution; float32's at their own rate
        return "transpose_fp32" if dtype == "float32" else "transpose"
    return ""


def _input_and_weight(op: str, shapes: tuple) -> tuple:
    """A convolution op's input and weight shapes (its backward's come after the output gradient)."""
    return (shapes[1], shapes[2]) if op.endswith("backward") else (shapes[0], shapes[1])


def is_depthwise(op: str, shapes: tuple) -> bool:
    """A depthwise convolution: one input channel per group, more than one group (the weight's
    second dimension is 1 and the input has several channels)."""
    try:
        return _depthwise_shapes(*_input_and_weight(op, shapes))
    except (IndexError, TypeError):
        return False


def is_stem(op: str, shapes: tuple) -> bool:
    """A convolution over at most :data:`gpucast.graph.layouts.STEM_MAX_CHANNELS` input channels in one
    group (an image network's first layer: the input's and the weight's channels agree)."""
    try:
        return _stem_shapes(*_input_and_weight(op, shapes))
    except (IndexError, TypeError):
        return False


def family_of(category: str, op: str = "", dtype: str = "", shapes: tuple = ()) -> str:
    """The kernel family of an op (anything not a library family is ``other``; a fused attention
    op's backward is ``attention_backward``, a GEMM on FP8 operands ``matmul_fp8`` and one on FP4 operands
    ``matmul_fp4`` (scaled GEMMs, each format's published share of its own peak), a depthwise
    convolution ``conv_depthwise`` or ``conv_depthwise_backward``: PyTorch's own CUDA-core kernels
    for NCHW tensors, not cuDNN's implicit GEMMs; a convolution over an image's few channels
    ``conv_stem`` or ``conv_stem_backward``)."""
    if category == "conv" and is_depthwise(op, shapes):
        return "conv_depthwise_backward" if op.endswith("backward") else "conv_depthwise"
    if category == "conv" and is_stem(op, shapes):
        return "conv_stem_backward" if op.endswith("backward") else "conv_stem"
    if category == "attention" and op.endswith("backward"):
        return "attention_backward"
    if category == "matmul" and dtype.startswith("float8"):
        return "matmul_fp8"
    if category == "matmul" and dtype.startswith("float4"):
        return "matmul_fp4"
    return category if category in FAMILIES else "other"
