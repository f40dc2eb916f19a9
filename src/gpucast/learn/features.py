"""Features for the learned models, from what gpucast already computes for every job it reads.

* :func:`reference_features`: the reference work's graph features (total FLOPs of a step,
  parameters, the forward pass's counts of convolution, linear, activation and other layers, batch
  size), taken from gpucast's trace, so they exist for every input gpucast reads (zoo, ONNX, HF,
  modules). The reference trained on one GPU type; to predict across types the GPU's datasheet
  peak FP32 rate and memory bandwidth are added (the regressor has nothing else to tell a K80
  from a V100).
* :func:`physics_features`: gpucast's own outputs for the row under an Environment: log step time,
  GPU busy time, host dispatch time, loader time, utilization, memory terms, the bottleneck label
  one-hot, for the hybrid's learned residual.

"Layer" counts are op counts of the forward phase: a linear layer is one matmul-category op, an
activation one of the activation ops below, "other" every other forward op that launches a kernel on
the GPU (:func:`gpucast.estimate.kernels.absent`).
"""

from __future__ import annotations

import math

import numpy as np

from gpucast.estimate.constants import DEFAULT
from gpucast.estimate.kernels import absent, launched

ACTIVATIONS = frozenset("relu relu_ gelu silu sigmoid tanh hardtanh hardswish hardsigmoid leaky_relu elu "
                        "softplus mish prelu glu".split())
REFERENCE_NAMES = ("log_flops", "log_parameters", "conv_layers", "linear_layers", "activation_layers",
                   "other_layers", "log_batch_size", "gpu_log_fp32_tflops", "gpu_log_bandwidth")
BOTTLENECKS = ("compute-bound", "memory-bound", "launch-bound", "input-bound")
PHYSICS_NAMES = ("log_step_s", "log_busy_s", "log_host_s", "log_loader_s", "util_frac", "log_memory_mib",
                 "log_context_mib", "log_kernels") + tuple(f"is_{b}" for b in BOTTLENECKS)


def _op_name(op: str) -> str:
    return op.split(".")[0].removeprefix("aten::")


def reference_features(trace, job, gpu) -> np.ndarray:
    gone = absent(trace, gpu, DEFAULT)   # kernels the trace records that this GPU does not run
    fwd = [o for o, skip in zip(trace.ops, gone) if o.phase == "fwd" and not skip]
    conv = sum(1 for o in fwd if o.category == "conv")
    linear = sum(1 for o in fwd if o.category == "matmul")
    act = sum(1 for o in fwd if _op_name(o.op) in ACTIVATIONS)
    other = sum(1 for o in fwd if o.kernels > 0) - conv - linear - act
    return np.array([math.log1p(trace.flops), math.log1p(trace.parameters), conv, linear, act, max(0, other),
                     math.log(job.batch_size), math.log(gpu.fp32_tflops), math.log(gpu.memory_bandwidth_gbs)])


def physics_features(prepared, env) -> np.ndarray:
    from gpucast.estimate import _bottleneck, reported_util

    tl, lc = prepared.run(env)
    mem = prepared.memory(env)
    util = reported_util(tl, env)
    label, _ = _bottleneck(prepared.job, tl, util, prepared.kt, lc)
    ctx = mem.breakdown.get("cuda_context", 0)
    eps = 1e-9
    return np.array([math.log(tl.step_time_s + eps), math.log(tl.gpu_busy_s + eps), math.log(tl.host_time_s + eps),
                     math.log(lc.loader_s + 1e-7), util, math.log(mem.total_bytes / 2**20),
                     math.log(ctx / 2**20 + 1),
                     math.log1p(launched(prepared.trace, prepared.gpu, prepared.cfg))]
                    + [float(label == b) for b in BOTTLENECKS])


def reference_matrix(fitter) -> np.ndarray:
    from gpucast.hardware import get_gpu

    return np.array([reference_features(t, p.job, get_gpu(r.gpu))
                     for t, p, r in zip(fitter.traces, fitter.prepared, fitter.rows)])


def physics_matrix(fitter, env, idx=None) -> np.ndarray:
    idx = np.arange(len(fitter.rows)) if idx is None else idx
    return np.array([physics_features(fitter.prepared[i], env) for i in idx])
