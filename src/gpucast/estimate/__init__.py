"""The analytic model: from a Trace and a GPU spec to times, utilization, memory and a bottleneck.

``estimate(trace, job, gpu, config)`` combines the kernel model (``kernels``), the host
dispatch model (``host``), the two-clock step simulation (``step``) and device memory
(``memory``). Intervals come from re-running the step simulation at the corners of the
constants' plausible ranges (``kernel_time_range`` x ``host_time_range``); they are rough
sensitivity bands, not calibrated quantiles (``gpucast.learn`` will fit those).

Bottleneck labels:

* ``input-bound``: the input pipeline takes longer than the GPU step;
* ``launch-bound``: the GPU idles waiting for the host to issue work (low utilization with the
  host's dispatch time >= the GPU's busy time), or its busy time is mostly per-kernel floor
  (many tiny kernels);
* ``compute-bound`` / ``memory-bound``: whichever roofline term dominates the busy time.

Fits nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucast.estimate.constants import DEFAULT, EstimatorConfig
from gpucast.estimate.host import host_times
from gpucast.estimate.kernels import PHASE_CODES, KernelTimes, OpArrays, kernel_times
from gpucast.estimate.memory import MemoryEstimate, device_memory
from gpucast.estimate.step import Timeline, simulate
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job

# Below this utilization, a GPU waiting on its host is called launch-bound.
LAUNCH_BOUND_UTIL = 0.6


@dataclass
class Estimate:
    step_time_s: float
    gpu_busy_s: float
    gpu_util_pct: float
    host_time_s: float
    memory: MemoryEstimate
    bottleneck: str
    bottleneck_reason: str
    step_time_interval: tuple[float, float]
    gpu_util_interval: tuple[float, float]
    memory_interval: tuple[int, int]
    time_by_phase: dict[str, float] = field(default_factory=dict)
    time_by_category: dict[str, float] = field(default_factory=dict)
    costed_time_share: float = 1.0
    timeline: Timeline | None = None
    kernel_times: KernelTimes | None = None  # per-op GPU seconds, aligned with the trace's ops


def estimate(trace: Trace, job: Job, gpu: GpuSpec, config: EstimatorConfig | None = None) -> Estimate:
    cfg = config or DEFAULT
    kt = kernel_times(trace, gpu, job.precision, cfg)
    host = host_times(trace, cfg)
    tl = simulate(trace, job, gpu, cfg, kt, host)
    util = min(1.0, tl.gpu_busy_s / tl.step_time_s) if tl.step_time_s > 0 else 0.0
    corners = [simulate(trace, job, gpu, cfg, kt, host, k, hs)
               for k in cfg.kernel_time_range for hs in cfg.host_time_range]
    steps = [c.step_time_s for c in corners] + [tl.step_time_s]
    utils = [min(1.0, c.gpu_busy_s / c.step_time_s) for c in corners] + [util]
    mem = device_memory(trace, job, gpu, cfg)
    lo, hi = cfg.memory_range
    a = OpArrays.of(trace)
    by_phase = {p: float(kt.time[a.phase == code].sum()) for p, code in PHASE_CODES.items()
                if (a.phase == code).any()}
    by_cat = {c: float(kt.time[a.category == c].sum()) for c in dict.fromkeys(a.category)}
    total = float(kt.time.sum())
    costed_share = float(kt.time[a.costed].sum() / total) if total > 0 else 1.0
    label, reason = _bottleneck(job, tl, util, kt)
    return Estimate(
        step_time_s=tl.step_time_s, gpu_busy_s=tl.gpu_busy_s, gpu_util_pct=100.0 * util,
        host_time_s=tl.host_time_s, memory=mem, bottleneck=label, bottleneck_reason=reason,
        step_time_interval=(min(steps), max(steps)),
        gpu_util_interval=(100.0 * min(utils), 100.0 * max(utils)),
        memory_interval=(int(mem.total_bytes * lo), int(mem.total_bytes * hi)),
        time_by_phase=by_phase, time_by_category=dict(sorted(by_cat.items(), key=lambda kv: -kv[1])),
        costed_time_share=costed_share, timeline=tl, kernel_times=kt,
    )


def _bottleneck(job: Job, tl: Timeline, util: float, kt) -> tuple[str, str]:
    if tl.input_wait_s > 0:
        return "input-bound", (f"the input pipeline needs {job.input_pipeline_s * 1e3:.2f} ms per step, "
                               f"the GPU step {tl.step_time_s * 1e3 - tl.input_wait_s * 1e3:.2f} ms")
    busy = float(kt.time.sum())
    if util < LAUNCH_BOUND_UTIL and tl.host_time_s >= busy:
        return "launch-bound", (f"the host spends {tl.host_time_s * 1e3:.2f} ms issuing ops per step, "
                                f"the GPU is busy {tl.gpu_busy_s * 1e3:.2f} ms")
    launched = kt.time > 0
    dom_floor = float(kt.time[launched & (kt.floor >= np.maximum(kt.compute, kt.memory))].sum())
    dom_compute = float(kt.time[launched & (kt.compute > np.maximum(kt.memory, kt.floor))].sum())
    dom_memory = float(kt.time[launched & (kt.memory > np.maximum(kt.compute, kt.floor))].sum())
    if busy > 0 and dom_floor / busy > 0.5:
        return "launch-bound", (f"{dom_floor / busy:.0%} of GPU time is kernels too small to leave the "
                                f"per-kernel floor")
    if dom_compute >= dom_memory:
        return "compute-bound", f"{dom_compute / busy:.0%} of GPU time is in math-limited kernels"
    return "memory-bound", f"{dom_memory / busy:.0%} of GPU time is in bandwidth-limited kernels"


__all__ = ["Estimate", "EstimatorConfig", "estimate"]
