"""Step time, GPU busy time and utilization: the host and the GPU as two clocks.

The host issues the trace's ops in order, spending :func:`~gpucast.estimate.host.host_times`
on each; an op's kernels join the GPU's single stream when the host has issued them and run
when the GPU is free (``gpu_end = max(gpu_end, launch) + kernel_time``). A sync op (``.item()``
of a GPU tensor) makes the host wait for the GPU. At the end of a step the host waits for the
GPU again (``step_end_sync``) and spends ``step_overhead_s`` (+ ``param_overhead_s`` per
parameter tensor) before the next step's first launch, while the GPU idles.

* ``gpu_busy_s`` = the sum of kernel times (one stream: kernels do not overlap) plus the
  exposed part of data-parallel all-reduce, whose NCCL kernels also keep the GPU busy;
* ``step_time_s`` = ``max(host end, GPU end)`` + step overhead + exposed communication, or the
  input pipeline's time per step when that is longer (the loader runs ahead in workers);
* utilization = busy / step: NVML's ``utilization.gpu`` is the share of sample periods in which
  a kernel ran, which on a steady loop equals the busy share of a step.

With an input pipeline (``input_pipeline_s > 0``) the batch also crosses the host link
(pinned, on the compute stream, which idles meanwhile). Without one, inputs are on the GPU.

Not modelled: multiple streams, CUDA graphs, launch-queue depth limits, clock boosts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.host import host_times
from gpucast.estimate.kernels import PHASE_CODES, KernelTimes, OpArrays, kernel_times
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job


@dataclass
class Timeline:
    step_time_s: float
    gpu_busy_s: float
    host_time_s: float
    gpu_end_s: float
    comm_exposed_s: float
    input_wait_s: float
    h2d_s: float


def simulate(trace: Trace, job: Job, gpu: GpuSpec, cfg: EstimatorConfig, kt: KernelTimes,
             host: np.ndarray, kernel_scale: float = 1.0, host_scale: float = 1.0) -> Timeline:
    a = OpArrays.of(trace)
    t = kt.time * kernel_scale
    h = host * host_scale
    h2d = 0.0
    if job.input_pipeline_s > 0:
        h2d = trace.input_bytes / (gpu.host_link_gbs * 1e9 * cfg.host_link_efficiency)
    cpu_clock = 0.0
    gpu_clock = h2d
    sync_idx = np.flatnonzero(a.sync)
    bounds = list(sync_idx + 1) + [len(t)]
    start = 0
    for end in bounds:
        if end <= start:
            continue
        seg_t = t[start:end]
        launch = cpu_clock + np.cumsum(h[start:end])
        cum = np.cumsum(seg_t)
        prev = cum - seg_t
        lead = np.where(seg_t > 0, launch - prev, -np.inf)
        gpu_ends = cum + np.maximum(gpu_clock, np.maximum.accumulate(lead))
        gpu_clock = float(gpu_ends[-1])
        cpu_clock = float(launch[-1])
        if a.sync[end - 1]:
            cpu_clock = max(cpu_clock, gpu_clock)
        start = end
    busy = float(t.sum())
    comm_exposed = _allreduce_exposed(trace, job, gpu, cfg, kt, kernel_scale)
    overhead = (cfg.step_overhead_s + cfg.param_overhead_s * trace.param_tensors) * host_scale
    if cfg.step_end_sync:
        compute_step = max(cpu_clock, gpu_clock) + overhead
    else:
        compute_step = max(cpu_clock + overhead, gpu_clock)
    compute_step += comm_exposed
    step = max(compute_step, job.input_pipeline_s)
    return Timeline(step_time_s=step, gpu_busy_s=busy + comm_exposed, host_time_s=cpu_clock + overhead,
                    gpu_end_s=gpu_clock, comm_exposed_s=comm_exposed,
                    input_wait_s=max(0.0, job.input_pipeline_s - compute_step), h2d_s=h2d)


def _allreduce_exposed(trace: Trace, job: Job, gpu: GpuSpec, cfg: EstimatorConfig, kt: KernelTimes,
                       kernel_scale: float) -> float:
    """Data-parallel gradient all-reduce time not hidden behind the backward pass.

    Ring all-reduce moves ``2 (n-1)/n`` times the gradient bytes over each GPU's link. DDP
    overlaps bucket all-reduces with the rest of backward, except the last bucket's, which
    starts only when backward ends."""
    if job.gpus <= 1 or job.mode != "train" or not trace.gradient_bytes:
        return 0.0
    n = job.gpus
    link = gpu.nvlink_gbs if gpu.nvlink_gbs > 0 else gpu.host_link_gbs
    comm = 2 * (n - 1) / n * trace.gradient_bytes / (link * 1e9 * cfg.nccl_efficiency)
    a = OpArrays.of(trace)
    bwd = float((kt.time * kernel_scale)[a.phase == PHASE_CODES["bwd"]].sum())
    last_bucket = comm * min(1.0, cfg.ddp_bucket_bytes / trace.gradient_bytes)
    return max(last_bucket, comm - cfg.comm_overlap * bwd)
