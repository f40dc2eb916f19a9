"""Step time, GPU busy time and utilization: the host and the GPU as two clocks.

The host issues the trace's ops in order, spending :func:`~gpucast.estimate.host.host_times`
on each; an op's kernels join the GPU's single stream when the host has issued them and run
when the GPU is free (``gpu_end = max(gpu_end, launch) + kernel_time``). A sync op (``.item()``
of a GPU tensor) makes the host wait for the GPU. At the end of a step the host waits for the
GPU again (``step_end_sync``) and spends ``step_overhead_s`` (+ ``param_overhead_s`` per
parameter tensor: zero_grad's and the optimizer's loops) before the next step's first launch, while
the GPU idles; an inference step (``Trace.mode`` ``infer``) spends ``infer_step_overhead_s`` instead.

* ``gpu_busy_s`` = the sum of kernel times (one stream: kernels do not overlap) plus the
  exposed part of data-parallel all-reduce, whose NCCL kernels also keep the GPU busy;
* ``step_time_s`` = ``max(host end, GPU end)`` + step overhead + exposed communication, or the
  input pipeline's time per step when that is longer (the loader runs ahead in workers);
* the GPU's idle gaps of a step (``Timeline.gap_lengths``: between kernels, and the one from the
  step's last kernel to the next step's first), from which :mod:`gpucast.estimate.nvml` makes
  the two numbers: the held share ``busy / step`` and what NVML's ``utilization.gpu`` reports
  (gaps shorter than the counter's tick read busy).

The data loader and the loop's habits (``gpucast.estimate.loader``) add host time before the
step's first op (the batch fetched in the loop or received from workers, its copy) and after its
last (extra ``.item()`` calls, a progress bar, logging); an asynchronous copy occupies the stream
before the first kernel; the workers' period bounds the step from below. A kernel that starts on
an idle GPU lasts at least ``Environment.idle_kernel_s``. With inputs already on the GPU
(``data.source == "device"``) and a benchmark loop nothing is added: the step is as before these
terms existed. The legacy ``input_pipeline_s > 0`` is a loader that runs ahead with a pinned copy.

Not modelled: multiple streams, CUDA graphs, launch-queue depth limits, clock boosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.kernels import PHASE_CODES, KernelTimes, OpArrays
from gpucast.estimate.loader import LoaderCost
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
    loader_in_loop_s: float = 0.0  # host seconds the loop spent on the batch (fetch, receive, copy)
    compute_step_s: float = 0.0    # the step without waiting for the loader's workers
    idle_gaps: int = 0             # idle periods of the GPU per step (between kernels, at syncs,
                                   # and the one between steps), what a co-located job can fill
    gap_lengths: np.ndarray = field(default_factory=lambda: np.zeros(0))  # their lengths (s): the
                                   # gaps inside the step, then the one between steps
    syncs: int = 0                 # points per step where the host waits for the GPU (.item() and
                                   # other syncs, the step-end sync, a blocking copy): where a job
                                   # sharing the GPU can be held up by another's time slice


def simulate(trace: Trace, job: Job, gpu: GpuSpec, cfg: EstimatorConfig, kt: KernelTimes,
             host: np.ndarray, kernel_scale: float = 1.0, host_scale: float = 1.0,
             lc: LoaderCost | None = None, idle_kernel_s: float = 0.0) -> Timeline:
    """One steady-state step. ``lc`` is the loader and loop around it (None: inputs on the GPU,
    as before these existed, with ``job.input_pipeline_s``'s pinned copy); ``idle_kernel_s`` is
    the shortest engine-active time of a kernel that starts on an idle GPU."""
    a = OpArrays.of(trace)
    t = kt.time * kernel_scale
    h = host * host_scale
    if lc is None:
        h2d = trace.input_bytes / (gpu.host_link_gbs * 1e9 * cfg.host_link_efficiency) \
            if job.input_pipeline_s > 0 else 0.0
        pre_host, period, blocks, habits, items = 0.0, job.input_pipeline_s, False, 0.0, 1
    else:
        h2d, pre_host, blocks = lc.copy_stream_s, lc.in_loop_s * host_scale, lc.copy_blocks
        period = lc.period_s * host_scale
        habits, items = lc.habits_s * host_scale, lc.item_calls
    cpu_clock, gpu_clock, busy, gaps, inner, first = _run(a, t, h, pre_host, pre_host + h2d, idle_kernel_s)
    comm_exposed = _allreduce_exposed(trace, job, gpu, cfg, kt, kernel_scale)
    if trace.mode == "train":   # the loop, zero_grad's and the optimizer's loops over the parameters
        overhead = (cfg.step_overhead_s + cfg.param_overhead_s * trace.param_tensors) * host_scale + habits
    else:                       # an inference loop reads its outputs
        overhead = cfg.infer_step_overhead_s * host_scale + habits
    end_sync = cfg.step_end_sync and items > 0
    if items == 0 and lc is not None and trace.mode == "train":  # step_overhead_s includes one loss.item()
        overhead = max(0.0, overhead - lc.item_cost_s * host_scale)
    if end_sync or blocks:  # a blocking copy waits for the stream at the next step's start
        compute_step = max(cpu_clock, gpu_clock) + overhead
    else:
        compute_step = max(cpu_clock + overhead, gpu_clock)
    compute_step += comm_exposed
    step = max(compute_step, period)
    between = step - comm_exposed - (gpu_clock - first) if first is not None else step - comm_exposed
    lengths = np.concatenate([inner, [between]]) if between > GAP_MIN_S else inner
    return Timeline(step_time_s=step, gpu_busy_s=busy + comm_exposed, host_time_s=cpu_clock + overhead,
                    gpu_end_s=gpu_clock, comm_exposed_s=comm_exposed,
                    input_wait_s=max(0.0, period - compute_step), h2d_s=h2d,
                    loader_in_loop_s=pre_host, compute_step_s=compute_step,
                    idle_gaps=gaps + (1 if step > gpu_clock + GAP_MIN_S else 0), gap_lengths=lengths,
                    syncs=int(np.count_nonzero(a.sync)) + (1 if end_sync or blocks else 0))


# An idle period shorter than this is not counted as a gap (our choice: well under the few
# microseconds a kernel launch takes, so rounding noise never counts).
GAP_MIN_S = 1e-7


def _run(a: OpArrays, t: np.ndarray, h: np.ndarray, cpu_clock: float, gpu_clock: float,
         idle_kernel_s: float) -> tuple[float, float, float, int, np.ndarray, float | None]:
    """The two clocks over the step's ops: host end, GPU end, GPU busy seconds, the number
    of idle periods of the GPU inside the step (a kernel that starts later than the previous
    one ended), the lengths of those periods after the step's first kernel, and that kernel's
    start (None: no kernel).

    Kernels join one stream when the host has issued them; between syncs this is vectorised
    (``gpu_end = max(gpu_end, launch) + kernel``). A kernel that starts on an idle GPU (its
    launch is later than the previous kernel's end) lasts at least ``idle_kernel_s``: applied by
    one more pass over the segment with those kernels lengthened."""
    busy = 0.0
    gaps = 0
    lengths: list[np.ndarray] = []
    first = None
    sync_idx = np.flatnonzero(a.sync)
    bounds = list(sync_idx + 1) + [len(t)]
    start = 0
    for end in bounds:
        if end <= start:
            continue
        seg_t = t[start:end]
        launch = cpu_clock + np.cumsum(h[start:end])
        ends = _stream(seg_t, launch, gpu_clock)
        if idle_kernel_s > 0:
            prev_end = np.concatenate(([gpu_clock], ends[:-1]))
            idle = (seg_t > 0) & (launch > prev_end) & (seg_t < idle_kernel_s)
            if idle.any():
                seg_t = np.where(idle, idle_kernel_s, seg_t)
                ends = _stream(seg_t, launch, gpu_clock)
        busy += float(seg_t.sum())
        k = seg_t > 0
        if k.any():
            ke = ends[k]
            starts = ke - seg_t[k]
            prev = np.concatenate(([gpu_clock], ke[:-1]))
            idle = starts > prev + GAP_MIN_S
            gaps += int(np.count_nonzero(idle))
            if first is None:
                first = float(starts[0])
                idle[0] = False   # the lead gap joins the one between steps
            lengths.append((starts - prev)[idle])
        gpu_clock = float(ends[-1])
        cpu_clock = float(launch[-1])
        if a.sync[end - 1]:
            cpu_clock = max(cpu_clock, gpu_clock)
        start = end
    inner = np.concatenate(lengths) if lengths else np.zeros(0)
    return cpu_clock, gpu_clock, busy, gaps, inner, first


def _stream(seg_t: np.ndarray, launch: np.ndarray, gpu_clock: float) -> np.ndarray:
    """End time of each op on one stream: ``end_i = max(end_{i-1}, launch_i) + t_i`` (ops that
    launch nothing do not wait for their launch)."""
    cum = np.cumsum(seg_t)
    prev = cum - seg_t
    lead = np.where(seg_t > 0, launch - prev, -np.inf)
    return cum + np.maximum(gpu_clock, np.maximum.accumulate(lead))


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
