"""One job for real on one device: build it, warm it up, time a steady window, sample NVML.

``run_job(RunSpec(job))`` returns one row of :mod:`gpucast.profile.schema` (status ``ok``) for a
solo run in *this* process; :mod:`gpucast.profile.worker` runs it in a child process so that an
OOM or a crash ends only the child.

The step (:mod:`gpucast.profile.step`) is the one the predictor traces, built from the same
factories on the run's device with real random weights; its modes, precisions, emulated input
pipeline and real-data loader are described there.

Method. ``warmup_steps`` steps first (cuDNN autotuning, allocator growth, optimizer state),
then steps until ``window_s`` has elapsed (at least ``min_window_steps``, at most
``max_window_steps``). On CUDA each window step is bracketed by two CUDA events and the events
are read after one synchronize at the end of the window; on the CPU (tests) each step is timed
with ``time.perf_counter``. An NVML :class:`~gpucast.profile.sampler.Sampler` (wall clock,
``time.time``) runs over the whole run: utilization, clocks and power are summarized over the
window, memory over the whole run. The sampler is a thread of this process (a few Python
lines per reading, 50 times a second); its cost on a dispatch-bound job is not measured here.
The co-location parent samples the shared GPU from its own process.

Co-location (:mod:`gpucast.profile.colocate`) uses the other RunSpec fields: a start barrier
(``start_file`` / ``start_at``, waited for after set-up, so that set-up time does not
de-synchronise the group), and ``sync_dir`` / ``slot`` / ``hold_s``, a rendezvous directory
through which the group agrees on one common wall-clock window (see ``colocate``).

Test hook (the no-GPU test boundary): ``GPUCAST_PROFILE_TEST_FAULT`` (``oom``, ``oom-message``,
``error``, ``KIND@N`` for one slot) makes the first step fail (:mod:`gpucast.profile.faults`).
Unset in production.

The spec, the provenance and the faults live in :mod:`~gpucast.profile.spec`,
:mod:`~gpucast.profile.provenance` and :mod:`~gpucast.profile.faults`; their names used from here
before (``RunSpec``, ``base_row``, ``host_cpu``, ``FAULT_ENV``, ``fault_for_slot``,
``PIPELINE_QUEUE_DEPTH``) are importable from here too.

Not measured here: multi-GPU (``job.gpus > 1`` runs one replica, without all-reduce), CUDA
graphs, real data other than a job's own ``data.dataset``.
"""

from __future__ import annotations

import os
import time

from gpucast.profile.faults import FAULT_ENV, fault_for_slot  # noqa: F401  (re-exported)
from gpucast.profile.provenance import base_row, gpu_provenance, host_cpu, now_iso  # noqa: F401
from gpucast.profile.spec import RunSpec
from gpucast.profile.step import PIPELINE_QUEUE_DEPTH, Step, Timer  # noqa: F401
from gpucast.profile.sync import WorkerSync

__all__ = ["RunSpec", "run_job", "base_row", "FAULT_ENV", "fault_for_slot"]


def _wait_barrier(spec: RunSpec) -> None:
    deadline = time.time() + spec.hold_s
    if spec.start_file:
        while not os.path.exists(spec.start_file):
            if time.time() > deadline:
                raise TimeoutError(f"start barrier {spec.start_file!r} did not appear within {spec.hold_s} s")
            time.sleep(0.002)
    if spec.start_at is not None:
        while (rest := spec.start_at - time.time()) > 0:
            time.sleep(min(rest, 0.05))


def run_job(spec: RunSpec, backend=None) -> dict:
    """Run ``spec`` in this process and return its schema row (status ``ok``).

    ``backend``: an :class:`~gpucast.profile.nvml.NvmlBackend`; ``None`` opens the real one for a
    CUDA device (and closes it after) and samples nothing on the CPU. Raises
    :class:`~gpucast.profile.nvml.GpuUnavailable` (one line) when CUDA is asked for and absent;
    a job's own failure (OOM included) propagates: the worker turns it into a status.
    """
    import torch

    from gpucast.profile.nvml import GpuUnavailable, nvml_index, open_backend
    from gpucast.profile.sampler import Sampler, step_stats, summarize

    started_at, t_start = now_iso(), time.perf_counter()
    device = torch.device(spec.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise GpuUnavailable(f"device {spec.device!r} asked for, but torch {torch.__version__} sees no CUDA GPU")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.index >= torch.cuda.device_count():
            raise GpuUnavailable(f"device {spec.device!r} asked for, but torch sees {torch.cuda.device_count()} GPU(s)")
        torch.cuda.set_device(device)
    own_backend = backend is None and device.type == "cuda"
    if own_backend:
        backend = open_backend(nvml_index(device.index))

    row = base_row(spec)
    row["started_at"] = started_at
    sync = None
    if spec.sync_dir:
        sync = WorkerSync(spec.sync_dir, spec.slot)
    sampler = None
    step = None
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    try:
        if backend is not None:
            row.update(gpu_provenance(backend))
            sampler = Sampler(backend, rate_hz=spec.sampler_hz, pids=(os.getpid(),), clock=time.time)
            sampler.start()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        if spec.job.precision == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
        step = Step(spec.job, device, spec.slot)
        timer = Timer(device)
        if sync is not None:
            sync.ready()
        _wait_barrier(spec)
        for _ in range(spec.warmup_steps):
            step()
        step.settle()
        if sync is not None:
            sync.warm()
            bounds = None
            hold_until = time.time() + spec.hold_s
            while bounds is None or time.time() < bounds[0]:  # keep the GPU busy until the window
                step()
                bounds = bounds or sync.window()
                if time.time() > hold_until:
                    raise TimeoutError("co-location window was never announced")
        timer.sync()
        t0 = time.time()
        w0 = time.perf_counter()
        while True:
            timer.timed(step)
            n = len(timer)
            if n >= spec.max_window_steps:
                break
            if n >= spec.min_window_steps:
                if sync is not None:
                    if time.time() >= bounds[1]:
                        break
                elif time.perf_counter() - w0 >= spec.window_s:
                    break
        timer.sync()
        t1 = time.time()
        times, span = timer.results()
        if sync is not None:  # keep contending until every partner's window is over
            sync.done(t0, t1)
            hold_until = time.time() + spec.hold_s
            while not sync.released() and time.time() < hold_until:
                step()
            timer.sync()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
        if step is not None:
            step.close()
        if sampler is not None:
            sampler.stop()
        if own_backend:
            backend.close()

    row.update(step_stats(times))
    row.update(status="ok", window_steps=len(times), window_s=span)
    if sampler is not None:
        window = summarize(sampler.window(t0, t1))
        whole = summarize(sampler.samples)
        for k in ("util_mean_pct", "util_p5_pct", "util_p50_pct", "util_p95_pct", "util_samples",
                  "sm_clock_mean_mhz", "power_mean_w"):
            row[k] = window[k]
        row["mem_used_max_bytes"] = whole["mem_used_max_bytes"]
        row["proc_mem_max_bytes"] = whole["proc_mem_max_bytes"]
        row["sampler_hz"] = float(sampler.achieved_hz)
    if device.type == "cuda":
        row["torch_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        row["torch_max_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    row["duration_s"] = time.perf_counter() - t_start
    return row
