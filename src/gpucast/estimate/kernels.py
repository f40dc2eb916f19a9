"""GPU time of each op's kernels: a roofline whose compute side knows the kernel's grid.

For an op with ``F`` FLOPs, ``B`` bytes moved and ``k`` kernels on a GPU (or MIG slice):

* compute time ``F / (peak x a_fam x phi) + ramp``: the peak rate of the op's math (tensor-core
  FP16/BF16/TF32/FP8 or FP32 CUDA cores, see :func:`math_peak`) at the clock the card sustains under
  its power limit (:meth:`GpuSpec.sustained_tflops`: the datasheet peak times the card's clock
  factor for those units); ``a_fam``, what the op's kernel family (GEMM, convolution, attention
  forward or backward, RNN, other) reaches of it in steady state on this architecture with the
  job's stack (:mod:`gpucast.estimate.achieved`, published figures and our measurements; a float32
  GEMM with TF32 off for matmuls, PyTorch's default from 1.12, is cuBLAS SGEMM on the CUDA cores:
  family ``matmul_fp32``, :func:`gpucast.estimate.achieved.matmul_family`); ``phi``, the share of that
  steady state the op's grid reaches on this GPU's SMs: its tiles, their waves, the last wave's
  partial fill, the tile's size, split-K (:mod:`gpucast.estimate.tiles`; 1 for ops the grid model
  does not know); ``ramp``, the fixed time a math kernel loses filling and draining its pipelines;
* memory time ``B / reach + r``: ``reach`` is the GPU's DRAM bandwidth at the streaming efficiency,
  or less when the kernel has too few blocks to keep it busy (its blocks' share of the whole GPU's
  SMs, Little's law; :func:`tiles.memory_fill`), and for reductions (BatchNorm, LayerNorm, softmax) at
  most what their blocks move per SM times the SMs the GPU or slice has
  (:func:`gpucast.estimate.achieved.bandwidth_caps`), or times the channels where a kernel launches a
  block per channel and has fewer (:func:`channel_blocks`); ``r`` a fixed ramp of the *whole* GPU
  (``half_bytes_per_sm`` x its SMs over its bandwidth: a latency, the same on its MIG slices). The
  bandwidth is the datasheet figure, not scaled by the clock factor: the power limit throttles
  the SM clock, while the memory clock stays at its rated speed (nvidia-smi samples of an RTX
  3090 held at its power cap: SM clock down, memory clock at its rated 9,501 MHz in every sample;
  ashalliants/ninfer-3090 PR #72, cited in ``data/gpus.yaml``);
* kernel time ``max(compute, memory, k * floor)``. A cuDNN RNN call runs its time steps' GEMMs one
  after another (:func:`tiles.gemm_problems`): a ramp per GEMM, its weights streamed at one step's
  CTAs, and its pointwise kernels' floors added rather than overlapped.

Which term wins labels the op compute-, memory- or latency-bound. A tensor-parallel rank's ops
(``split``) are costed at their narrower shapes, not as the whole op divided.

Not modelled: L2 cache hits between kernels, clock changes per kernel (one sustained clock for all
compute, whatever power a kernel draws), thermal throttling, concurrent kernels on several streams,
kernel fusion beyond what the trace shows; what the grid model leaves out is listed in
:mod:`gpucast.estimate.tiles`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpucast.estimate import tiles
from gpucast.estimate.achieved import (CHANNEL_BLOCK_FAMILIES, CUDA_CORE_FAMILIES, UNTILED_FAMILIES, attention_kernel,
                                       bandwidth_caps, capability_key, family_of, fractions, matmul_family,
                                       matmul_tf32_by_default, memory_family_of)
from gpucast.estimate.constants import OLD_ARCHITECTURES, EstimatorConfig
from gpucast.formats import GEMM_RATE
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec, get_gpu
from gpucast.mig import SEPARATOR, parent_name

CATEGORIES = ("matmul", "conv", "attention", "rnn", "norm", "softmax", "elementwise", "reduction", "pool",
              "embedding", "loss", "copy", "memory", "optimizer", "view", "host", "other")
PHASE_CODES = {"fwd": 0, "loss": 1, "bwd": 2, "optim": 3}
DISPATCH_CODES = {"python": 0, "engine": 1, "cpp": 2, "none": 3}
# Ops whose kernels are the GPU libraries' (cuDNN convolutions and RNNs, cuBLAS GEMMs, fused
# attention): tensor-core math here, and what an older release's library version slows
# (gpucast.estimate.stack.kernel_scales).
LIBRARY_CATEGORIES = ("matmul", "conv", "attention", "rnn")
_TENSOR_MATH = LIBRARY_CATEGORIES


@dataclass
class OpArrays:
    """The trace as columns, for vectorised estimation."""

    flops: np.ndarray
    bytes: np.ndarray
    kernels: np.ndarray
    category: np.ndarray  # object array of category names
    dtype: np.ndarray
    phase: np.ndarray  # int codes
    dispatch: np.ndarray  # int codes
    sync: np.ndarray
    costed: np.ndarray
    library: np.ndarray  # the op's kernels are cuDNN/cuBLAS ones (LIBRARY_CATEGORIES)
    family: np.ndarray  # object array: the op's kernel family (gpucast.estimate.achieved.family_of)
    memory_family: np.ndarray  # object array: the op's memory-bound family ("" for none; achieved.memory_family_of)

    @classmethod
    def of(cls, trace: Trace) -> "OpArrays":
        cached = getattr(trace, "_arrays", None)
        if cached is not None:
            return cached
        ops = trace.ops
        arr = cls(
            flops=np.fromiter((o.flops for o in ops), dtype=np.float64, count=len(ops)),
            bytes=np.fromiter((o.bytes_read + o.bytes_written for o in ops), dtype=np.float64, count=len(ops)),
            kernels=np.fromiter((o.kernels for o in ops), dtype=np.float64, count=len(ops)),
            category=np.array([o.category for o in ops], dtype=object),
            dtype=np.array([o.dtype for o in ops], dtype=object),
            phase=np.fromiter((PHASE_CODES.get(o.phase, 0) for o in ops), dtype=np.int8, count=len(ops)),
            dispatch=np.fromiter((DISPATCH_CODES.get(o.dispatch, 0) for o in ops), dtype=np.int8, count=len(ops)),
            sync=np.fromiter((o.sync for o in ops), dtype=bool, count=len(ops)),
            costed=np.fromiter((o.costed for o in ops), dtype=bool, count=len(ops)),
            library=np.fromiter((o.category in LIBRARY_CATEGORIES for o in ops), dtype=bool, count=len(ops)),
            family=np.array([family_of(o.category, o.op, o.dtype, o.shapes) for o in ops], dtype=object),
            memory_family=np.array([memory_family_of(o.category, o.op, o.dtype) for o in ops], dtype=object),
        )
        trace._arrays = arr
        return arr


def math_peak(gpu: GpuSpec, category: str, dtype: str, precision: str, cfg: EstimatorConfig,
              family: str = "") -> float:
    """FLOP/s available to an op of this category (and kernel ``family``) and dtype under the job's
    precision.

    The sustained peak (:meth:`GpuSpec.sustained_tflops`): the datasheet peak at the SM clock the
    card holds under its power limit. Families with no tensor-core kernel
    (:data:`gpucast.estimate.achieved.CUDA_CORE_FAMILIES`) get the FP32 vector peak.
    """
    if category not in _TENSOR_MATH or family in CUDA_CORE_FAMILIES:
        return gpu.sustained_tflops("fp32", tensor_cores=False) * 1e12
    if dtype.startswith("float8"):  # torch.float8_e4m3fn / e5m2 operands (torch._scaled_mm): the recipe's
        return gpu.sustained_tflops(GEMM_RATE.get(precision, "fp8")) * 1e12   # rate (gpucast.formats)
    if dtype.startswith("float4"):
        return gpu.sustained_tflops("fp4") * 1e12
    if dtype == "float16":
        return gpu.sustained_tflops("fp16") * 1e12
    if dtype == "bfloat16":
        return gpu.sustained_tflops("bf16") * 1e12
    tf32 = precision == "tf32" or (category in ("conv", "rnn") and cfg.cudnn_fp32_uses_tf32)
    return gpu.sustained_tflops("tf32" if tf32 else "fp32", tensor_cores=tf32) * 1e12


def absent(trace: Trace, gpu: GpuSpec, cfg: EstimatorConfig) -> np.ndarray:
    """Per op: whether it is a kernel the trace records that ``gpu`` does not run. cuDNN's layout
    transposes around a float32 convolution (:mod:`gpucast.graph.layouts`) run where they were measured
    (achieved.yaml's ``transpose_fp32``: Hopper, with TF32 on for convolutions); elsewhere float32
    convolutions run kernels that read NCHW themselves (cuDNN's NCHW TF32 kernels on Ampere, the CUDA
    cores without TF32)."""
    a = OpArrays.of(trace)
    if (cfg.cudnn_fp32_uses_tf32 and gpu.tf32_tflops is not None
            and "transpose_fp32" in bandwidth_caps(gpu.architecture, capability_key(gpu.compute_capability))):
        return np.zeros(len(a.flops), dtype=bool)
    return a.memory_family == "transpose_fp32"


def run_totals(trace: Trace, gpu: GpuSpec, cfg: EstimatorConfig) -> tuple[int, int, int]:
    """(ops, kernels, bytes) of a step of ``trace`` on ``gpu``: the trace's, less those :func:`absent` there."""
    a, gone = OpArrays.of(trace), absent(trace, gpu, cfg)
    return (len(trace.ops) - int(gone.sum()), int(trace.kernels - a.kernels[gone].sum()),
            int(trace.bytes - a.bytes[gone].sum()))


def launched(trace: Trace, gpu: GpuSpec, cfg: EstimatorConfig) -> int:
    """The kernels a step of ``trace`` launches on ``gpu`` (:func:`run_totals`)."""
    return run_totals(trace, gpu, cfg)[1]


@dataclass
class KernelTimes:
    time: np.ndarray  # seconds per op on the GPU (0 for ops that launch nothing)
    compute: np.ndarray
    memory: np.ndarray
    floor: np.ndarray


def whole_gpu(gpu: GpuSpec) -> GpuSpec:
    """The whole GPU a MIG slice is cut from (the GPU itself otherwise): the SMs and bandwidth that
    a kernel's fixed memory ramp and its blocks' share of the bandwidth are counted against."""
    if SEPARATOR not in gpu.name:
        return gpu
    try:
        return get_gpu(parent_name(gpu.name))
    except KeyError:
        return gpu


def _fills(trace: Trace, gpu: GpuSpec, whole: GpuSpec, arch_rate: np.ndarray, cfg: EstimatorConfig,
           split, families: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op: ``phi``, the share of its family's steady rate its grid reaches on ``gpu`` (a slice of
    ``whole``, or ``whole`` itself) (:mod:`gpucast.estimate.tiles`; 1 for ops the grid model does
    not know), the share of the DRAM bandwidth its blocks reach, and the GEMM kernels it runs one
    after another (an RNN's per time step; 1 for any other op)."""
    sms, sms_whole = gpu.sm_count, whole.sm_count
    reduce_s = 1.0 / (gpu.memory_bandwidth_gbs * 1e9 * cfg.bandwidth_efficiency)
    n = len(trace.ops)
    phi = np.ones(n)
    mfill = np.ones(n)
    serial = np.ones(n)
    cache: dict = {}
    for i, o in enumerate(trace.ops):
        t = int(split[i]) if split is not None else 1
        key = (o.op, o.shapes, o.out_shapes, o.category, t, arch_rate[i])
        got = cache.get(key)
        if got is None:
            f, ctas, g = 1.0, 0, 1
            if o.flops > 0 and o.category in LIBRARY_CATEGORIES and families[i] not in UNTILED_FAMILIES:
                probs = tiles.gemm_problems(o.op, o.shapes, o.out_shapes)
                if probs:
                    if t > 1:
                        probs = tiles.split_problem(probs, t)
                    f = tiles.gemm_fill(probs, gpu.architecture, sms, cfg.tile_reuse_half, arch_rate[i] / sms,
                                       reduce_s)
                    ctas = tiles.gemm_ctas(probs)
                    if o.category == "rnn":   # its time steps' GEMMs stream the weights one after another
                        g = len(probs)
                        ctas = tiles.gemm_ctas([Counter(probs).most_common(1)[0][0]])
                else:
                    att = tiles.attention_grid(o.op, o.shapes)
                    if att is not None:
                        ctas = max(1, att[0] // t)
                        f = tiles.attention_fill(ctas, sms)
            if ctas:
                m = tiles.tiled_memory_fill(ctas, sms_whole)
            else:
                m = tiles.memory_fill(tiles.largest_numel(o.shapes, o.out_shapes) // t, sms_whole)
            got = cache[key] = (f, m, g)
        phi[i], mfill[i], serial[i] = got
    return phi, mfill, serial


def channel_blocks(trace: Trace) -> np.ndarray:
    """Per op, the blocks a kernel of :data:`~gpucast.estimate.achieved.CHANNEL_BLOCK_FAMILIES` launches:
    its input's channels (dim 1 of an N x C (x ...) tensor, which PyTorch views as N x C x rest; one block
    per channel); inf for every other op."""
    a = OpArrays.of(trace)
    out = np.full(len(a.memory_family), np.inf)
    for i in np.flatnonzero(np.isin(a.memory_family, CHANNEL_BLOCK_FAMILIES)):
        shape = trace.ops[i].shapes[0] if trace.ops[i].shapes else ()
        if len(shape) >= 2 and all(isinstance(d, int) for d in shape):
            out[i] = shape[1]
    return out


def kernel_times(trace: Trace, gpu: GpuSpec, precision: str, cfg: EstimatorConfig, stack=None,
                 scales: dict[str, float] | None = None, split: np.ndarray | None = None) -> KernelTimes:
    """Per-op kernel times on ``gpu`` (module docstring). ``stack``: the job's software stack
    (which attention kernel runs; None: the default); ``scales``: family -> multiplier of its
    achieved fraction (cuDNN's heuristic choice without benchmark mode); ``split``: per-op
    tensor-parallel degree (a rank runs ``1 / t`` of each split op, its GEMMs narrowed)."""
    a = OpArrays.of(trace)
    n = len(a.flops)
    peak = np.empty(n)
    eff = np.empty(n)
    capability = capability_key(gpu.compute_capability)
    frac = fractions(gpu.architecture, attention_kernel(stack, gpu.architecture), capability)
    # float32 GEMMs: TF32 tensor cores where the job or its release turns TF32 on for matmuls, else SGEMM
    mm_tf32 = (precision == "tf32" or matmul_tf32_by_default(stack)) and gpu.tf32_tflops is not None
    scales = scales or {}
    cache: dict[tuple, tuple[float, float]] = {}
    for i, (cat, dt, fam) in enumerate(zip(a.category, a.dtype, a.family)):
        key = (cat, dt, fam)
        val = cache.get(key)
        if val is None:
            fam = matmul_family(fam, dt, mm_tf32)
            prec = "tf32" if (fam == "matmul" and dt == "float32") else precision
            val = cache[key] = (math_peak(gpu, cat, dt, prec, cfg, fam), frac[fam] * scales.get(fam, 1.0))
        peak[i], eff[i] = val
    div = np.ones(n) if split is None else np.asarray(split, dtype=np.float64)
    flops, nbytes = a.flops / div, a.bytes / div
    whole = whole_gpu(gpu)
    phi, mfill, serial = _fills(trace, gpu, whole, peak * eff, cfg, None if split is None else div, a.family)
    # each of an RNN's dependent GEMM kernels fills and drains its SMs (one ramp a kernel)
    compute = np.where(flops > 0, flops / (peak * eff * phi) + serial * cfg.compute_ramp_s, 0.0)
    bw = gpu.memory_bandwidth_gbs * 1e9 * cfg.bandwidth_efficiency
    bw_whole = whole.memory_bandwidth_gbs * 1e9 * cfg.bandwidth_efficiency
    reach = np.minimum(bw, bw_whole * mfill)
    # reductions' loads in flight per SM (Little's law): their rate grows with the SMs they have
    caps = bandwidth_caps(gpu.architecture, capability)
    if caps:
        per_sm = np.fromiter((caps.get(f, np.inf) for f in a.memory_family), dtype=np.float64, count=n)
        sms = (np.minimum(gpu.sm_count, channel_blocks(trace)) if any(f in caps for f in CHANNEL_BLOCK_FAMILIES)
               else gpu.sm_count)
        reach = np.minimum(reach, per_sm * sms)
    ramp = cfg.half_bytes_per_sm * whole.sm_count / bw_whole
    memory = np.where(nbytes > 0, nbytes / reach + ramp, 0.0)
    floor_s = cfg.kernel_floor_old_s if gpu.architecture in OLD_ARCHITECTURES else cfg.kernel_floor_s
    launches = (a.kernels > 0) & ~absent(trace, gpu, cfg)
    floor = np.where(launches, a.kernels * floor_s, 0.0)
    time = np.where(launches, np.maximum(np.maximum(compute, memory), floor), 0.0)
    # an RNN's pointwise kernel a time step waits for that step's GEMM and the next GEMM for it: their
    # floors add to the GEMMs' time rather than overlap it
    rnn = launches & (serial > 1)
    time = np.where(rnn, np.maximum(np.maximum(compute, memory), serial * floor_s) + (a.kernels - serial) * floor_s,
                    time)
    return KernelTimes(time=time, compute=np.where(launches, compute, 0.0),
                       memory=np.where(launches, memory, 0.0), floor=floor)
