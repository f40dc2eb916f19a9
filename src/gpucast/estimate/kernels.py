"""GPU time of each op's kernels: a roofline with size-dependent efficiency and a floor.

For an op with ``F`` FLOPs, ``B`` bytes moved and ``k`` kernels on a GPU with ``S`` SMs:

* compute time ``F / (peak * e_cat) + ramp``: the peak rate of the op's math (tensor-core
  FP16/BF16/TF32 or FP32 CUDA cores, see :func:`math_peak`) at the clock the card sustains under
  its power limit (:meth:`GpuSpec.sustained_tflops`: the datasheet peak times
  :attr:`GpuSpec.clock_factor`, below 1 on power-capped cards such as the 70 W T4 and 72 W L4,
  1 elsewhere), a per-category efficiency ``e_cat``, and a fixed ``ramp`` (filling and draining
  the SMs) that makes small GEMMs reach only part of peak;
* memory time ``(B + h_B * S) / (bandwidth * e_bw)``, the same form for bandwidth. The
  bandwidth is the datasheet figure, not scaled by the clock factor: the power limit throttles
  the SM clock, while the memory clock stays at its rated speed (nvidia-smi samples of an RTX
  3090 held at its power cap: SM clock down, memory clock at its rated 9,501 MHz in every sample;
  ashalliants/ninfer-3090 PR #72, cited in ``data/gpus.yaml``);
* kernel time ``max(compute, memory, k * floor)``.

Which term wins labels the op compute-, memory- or latency-bound.

Not modelled: L2 cache hits between kernels, wave quantisation, clock changes per kernel (one
sustained clock for all compute, whatever power a kernel draws), thermal throttling, concurrent
kernels on several streams, kernel fusion beyond what the trace shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucast.estimate.constants import OLD_ARCHITECTURES, EstimatorConfig
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec

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
        )
        trace._arrays = arr
        return arr


def math_peak(gpu: GpuSpec, category: str, dtype: str, precision: str, cfg: EstimatorConfig) -> float:
    """FLOP/s available to an op of this category and dtype under the job's precision.

    The sustained peak (:meth:`GpuSpec.sustained_tflops`): the datasheet peak at the SM clock the
    card holds under its power limit.
    """
    if category not in _TENSOR_MATH:
        return gpu.sustained_tflops("fp32", tensor_cores=False) * 1e12
    if dtype.startswith("float8"):  # torch.float8_e4m3fn / e5m2 operands (torch._scaled_mm)
        return gpu.sustained_tflops("fp8") * 1e12
    if dtype.startswith("float4"):
        return gpu.sustained_tflops("fp4") * 1e12
    if dtype == "float16":
        return gpu.sustained_tflops("fp16") * 1e12
    if dtype == "bfloat16":
        return gpu.sustained_tflops("bf16") * 1e12
    tf32 = precision == "tf32" or (category == "conv" and cfg.conv_fp32_uses_tf32)
    return gpu.sustained_tflops("tf32" if tf32 else "fp32", tensor_cores=tf32) * 1e12


def efficiency(category: str, cfg: EstimatorConfig) -> float:
    return {"matmul": cfg.matmul_efficiency, "conv": cfg.conv_efficiency,
            "attention": cfg.attention_efficiency, "rnn": cfg.rnn_efficiency}.get(category, cfg.other_efficiency)


@dataclass
class KernelTimes:
    time: np.ndarray  # seconds per op on the GPU (0 for ops that launch nothing)
    compute: np.ndarray
    memory: np.ndarray
    floor: np.ndarray


def kernel_times(trace: Trace, gpu: GpuSpec, precision: str, cfg: EstimatorConfig) -> KernelTimes:
    a = OpArrays.of(trace)
    peak = np.empty(len(a.flops))
    eff = np.empty(len(a.flops))
    cache: dict[tuple, tuple[float, float]] = {}
    for i, (cat, dt) in enumerate(zip(a.category, a.dtype)):
        key = (cat, dt)
        val = cache.get(key)
        if val is None:
            val = cache[key] = (math_peak(gpu, cat, dt, precision, cfg), efficiency(cat, cfg))
        peak[i], eff[i] = val
    sms = gpu.sm_count
    compute = np.where(a.flops > 0, a.flops / (peak * eff) + cfg.compute_ramp_s, 0.0)
    bw = gpu.memory_bandwidth_gbs * 1e9 * cfg.bandwidth_efficiency
    memory = np.where(a.bytes > 0, (a.bytes + cfg.half_bytes_per_sm * sms) / bw, 0.0)
    floor_s = cfg.kernel_floor_old_s if gpu.architecture in OLD_ARCHITECTURES else cfg.kernel_floor_s
    floor = a.kernels * floor_s
    launches = a.kernels > 0
    time = np.where(launches, np.maximum(np.maximum(compute, memory), floor), 0.0)
    return KernelTimes(time=time, compute=np.where(launches, compute, 0.0),
                       memory=np.where(launches, memory, 0.0), floor=floor)
