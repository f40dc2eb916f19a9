"""One job for real on one device: build it, warm it up, time a steady window, sample NVML.

``run_job(RunSpec(job))`` returns one row of :mod:`gpucast.profile.schema` (status ``ok``) for a
solo run in *this* process; :mod:`gpucast.profile.worker` runs it in a child process so that an
OOM or a crash ends only the child.

The step is the one the predictor traces (:mod:`gpucast.graph.tracer`), built from the same
factories (:func:`gpucast.zoo.factories`) on the run's device with real random weights and
synthetic inputs already on the device:

* ``train``: forward and loss under ``torch.autocast`` for ``amp-fp16``/``amp-bf16``; backward
  (through ``torch.amp.GradScaler`` for ``amp-fp16``: scale, unscale, ``found_inf`` check,
  update); ``optimizer.step()`` with the tracer's optimizer (SGD momentum 0.9 / Adam / AdamW,
  ``foreach``; :func:`gpucast.optim.make_optimizer` is the one definition for both);
  ``zero_grad(set_to_none=True)``; then ``loss.item()``, as training loops do to log the loss.
  That read is a host-GPU sync every step, which the predictor assumes
  (``EstimatorConfig.step_end_sync``).
* ``infer``: the forward under ``torch.inference_mode()`` (and autocast for amp; the tracer
  uses ``no_grad``, which dispatches the same kernels); the host then waits for the step's end
  (the predictor's ``step_end_sync`` holds for every mode: a server reads its outputs).
* ``tf32`` sets ``torch.backends.cuda.matmul.allow_tf32`` for the run and restores it;
  ``fp32`` keeps torch's defaults (cuDNN convolutions on TF32, matmuls not), as the estimator
  assumes (``EstimatorConfig.conv_fp32_uses_tf32``).

Input pipeline (``job.input_pipeline_s > 0``): a data loader is emulated by one producer thread
that spends ``input_pipeline_s`` of wall time per batch building it in pinned host memory (a
copy of the synthetic batch; the rest of the time is ``time.sleep``, standing for decode and
augmentation done by DataLoader *worker processes*, which do not hold this process's GIL), a
queue of depth 2 (the loader's prefetch), and each step copies its batch to the device with
``non_blocking=True`` before the forward. The loader runs ahead, so a step takes
``max(compute, input_pipeline_s)`` in steady state, as the predictor assumes. The batches it
prefetched while the model was built and warmed up (up to the queue's depth plus the one it
holds) are not steady state: after the warm-up the runner keeps stepping until a step has had to
wait for its batch (:meth:`_Step.settle`, bounded by ``SETTLE_MAX_STEPS``/``SETTLE_MAX_S``;
a job faster than its loader then runs at the loader's pace), so the window never times steps
that only drained that backlog.

Real data (``job.data.dataset`` set, a ``FILE.py:FUNCTION`` factory): batches come from a real
``DataLoader`` over the job's own dataset (:mod:`gpucast.profile.dataset_feed`: its workers,
collate function and epochs; each batch copied to the device before the forward) instead of
the resident synthetic batch or the emulated pipeline; after the warm-up the runner steps
through the loader's prefetched backlog (``DatasetFeed.settle_steps``) before the window.

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

Test hook (the no-GPU test boundary): ``GPUCAST_PROFILE_TEST_FAULT=oom`` raises
``torch.cuda.OutOfMemoryError`` at the first step, ``oom-message`` a ``RuntimeError`` whose
message says "CUDA out of memory", ``error`` a ``ValueError`` with a two-line message;
``KIND@N`` (e.g. ``oom@1``) applies only to the run with ``slot`` ``N`` (a co-location slot, or
any spec with that slot in a pool worker). Unset in production; the worker's ``sigkill``,
``hang`` and ``leak`` faults are described there.

Not measured here: multi-GPU (``job.gpus > 1`` runs one replica, without all-reduce), CUDA
graphs, real data other than a job's own ``data.dataset``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import queue
import threading
import time
import uuid
from dataclasses import dataclass, fields

from gpucast.job import Job, JobError
from gpucast.profile.schema import empty_row

__all__ = ["RunSpec", "run_job", "base_row", "FAULT_ENV", "fault_for_slot"]

FAULT_ENV = "GPUCAST_PROFILE_TEST_FAULT"
AMP_DTYPE_NAMES = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}
PIPELINE_QUEUE_DEPTH = 2  # DataLoader's default prefetch (2 batches per worker)
# Bounds on the steps run after the warm-up until the emulated loader's backlog is drained (our
# choice: a backlog of depth + 1 batches drains within 30 steps unless compute is within ~10 % of
# the loader's period, where the step is the loader's period either way).
SETTLE_MAX_STEPS = 30
SETTLE_MAX_S = 2.0


@dataclass(frozen=True)
class RunSpec:
    """How to measure ``job``: warm-up, window, device and sampling.

    ``start_file`` / ``start_at``: start barrier (wait after set-up until the file exists /
    until ``time.time() >= start_at``). ``sync_dir``, ``slot``, ``hold_s``: co-location
    rendezvous (see :mod:`gpucast.profile.colocate`); ``None`` for a solo run.
    """

    job: Job
    warmup_steps: int = 5
    window_s: float = 3.0
    min_window_steps: int = 5
    max_window_steps: int = 500
    device: str = "cuda"
    sampler_hz: float = 50.0
    start_file: str | None = None
    start_at: float | None = None
    sync_dir: str | None = None
    slot: int = 0
    hold_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.job, Job):
            raise TypeError(f"RunSpec.job must be a gpucast Job, got {type(self.job).__name__}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not isinstance(self.min_window_steps, int) or self.min_window_steps < 1:
            raise ValueError(f"min_window_steps must be an integer >= 1, got {self.min_window_steps!r}")
        if not isinstance(self.max_window_steps, int) or self.max_window_steps < self.min_window_steps:
            raise ValueError(f"max_window_steps must be an integer >= min_window_steps, got {self.max_window_steps!r}")
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s!r}")
        if not self.sampler_hz > 0:
            raise ValueError(f"sampler_hz must be > 0, got {self.sampler_hz!r}")
        if not isinstance(self.device, str) or not self.device.split(":")[0] in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda', 'cuda:N' or 'cpu', got {self.device!r}")

    def to_dict(self) -> dict:
        """JSON-ready; a module job is refused (its factories are code and cannot cross a process)."""
        if self.job.is_module:
            raise JobError("field 'model': a module job cannot run in an isolated worker (its factories "
                           "are code, not data); run it in-process with run_job or add it to the zoo")
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["job"] = self.job.to_dict()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        data = dict(data)
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"unknown RunSpec field {unknown[0]!r}")
        data["job"] = Job.from_dict(data["job"])
        return cls(**data)


# ------------------------------------------------------------------------------- provenance
def host_cpu() -> str:
    """The host CPU's model name (/proc/cpuinfo), for provenance and benchmark machine lines."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def base_row(spec: RunSpec) -> dict:
    """A row with the job's columns and the software provenance filled; no measurement."""
    import gpucast

    job = spec.job
    row = empty_row()
    row.update(
        run_id=uuid.uuid4().hex, suite="adhoc", kind="solo", slot=spec.slot,
        gpucast_version=gpucast.__version__, host_cpu=host_cpu(),
        job_key=job.key, job_json=job.to_json(),
        model=job.model, batch_size=job.batch_size, seq_len=job.seq_len,
        input_shape=",".join(map(str, job.input_shape)) if job.input_shape else None,
        precision=job.precision, mode=job.mode, optimizer=job.optimizer,
        input_pipeline_s=job.input_pipeline_s, warmup_steps=spec.warmup_steps,
    )
    try:
        import torch

        row["torch_version"] = str(torch.__version__)
        row["cuda_version"] = torch.version.cuda
    except ImportError:  # pragma: no cover - torch is always there where jobs run
        pass
    return row


def _gpu_provenance(backend) -> dict:
    from gpucast.hardware import from_nvml_name

    name = backend.device_name()
    spec = from_nvml_name(name)
    return dict(gpu_model=name, gpu_name=spec.name if spec is not None else None,
                gpu_memory_total_bytes=int(backend.memory_total()), driver_version=backend.driver_version())


def _nvml_index(torch_index: int) -> int:
    """NVML numbers devices ignoring ``CUDA_VISIBLE_DEVICES``; map torch's index through it.
    (UUID or MIG entries are not mapped: the torch index is used.)"""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        entries = [e.strip() for e in visible.split(",")]
        if torch_index < len(entries) and entries[torch_index].isdigit():
            return int(entries[torch_index])
    return torch_index


def fault_for_slot(slot: int) -> str:
    """The test fault set for ``slot`` by ``GPUCAST_PROFILE_TEST_FAULT`` (``KIND`` or ``KIND@SLOT``),
    or "" (always, in production: the variable is unset)."""
    kind, _, target = os.environ.get(FAULT_ENV, "").partition("@")
    if target and target.strip() != str(slot):
        return ""
    return kind.strip()


def _raise_test_fault(slot: int) -> None:
    """The first-step test faults (see the module docstring)."""
    fault = fault_for_slot(slot)
    if fault == "oom":
        import torch

        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (test fault)")
    if fault == "oom-message":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (test fault)")
    if fault == "error":
        raise ValueError("test fault: the job raised\nsecond line that must not reach the row")


# ------------------------------------------------------------------------------- the step
class _Pipeline:
    """The emulated data loader (see the module docstring): one producer thread, queue depth 2."""

    def __init__(self, template: tuple, seconds: float, pin: bool):
        self.template = tuple(t.detach().to("cpu") if hasattr(t, "detach") else t for t in template)
        self.seconds = seconds
        self.pin = pin
        self.queue: queue.Queue = queue.Queue(maxsize=PIPELINE_QUEUE_DEPTH)
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.waited = False  # a get() found no batch ready since the last reset
        self.thread = threading.Thread(target=self._produce, name="gpucast-input-pipeline", daemon=True)
        self.thread.start()

    def _batch(self) -> tuple:
        import torch

        out = []
        for t in self.template:
            if isinstance(t, torch.Tensor):
                out.append(torch.empty(t.shape, dtype=t.dtype, pin_memory=self.pin).copy_(t))
            else:
                out.append(t)
        return tuple(out)

    def _produce(self) -> None:
        try:
            while not self.stopped.is_set():
                deadline = time.perf_counter() + self.seconds
                batch = self._batch()
                rest = deadline - time.perf_counter()
                if rest > 0:
                    time.sleep(rest)
                while not self.stopped.is_set():
                    try:
                        self.queue.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # surfaced by get()
            self.error = exc

    def get(self) -> tuple:
        try:
            return self.queue.get_nowait()
        except queue.Empty:
            self.waited = True
        while True:
            if self.error is not None:
                raise self.error
            try:
                return self.queue.get(timeout=0.1)
            except queue.Empty:
                continue

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5.0)


class _Step:
    """The model, inputs, optimizer and scaler of one job on one device; ``__call__`` runs a step."""

    def __init__(self, job: Job, device, slot: int = 0):
        import torch

        # the predictor's own optimizer choices: one definition for both
        from gpucast.optim import make_optimizer
        from gpucast.zoo import factories

        self.torch = torch
        self.job = job
        self.device = device
        built = factories(job)
        with torch.device(device):
            model = built.model_fn()
            inputs = built.input_fn(job.batch_size)
        if isinstance(inputs, torch.Tensor):
            inputs = (inputs,)
        self.model = model.to(device)
        self.inputs = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs)
        self.loss_fn = built.loss_fn
        self.train = job.mode == "train"
        self.model.train(self.train)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        from gpucast.surroundings import DEFAULT_STACK, Stack

        foreach = (job.stack or Stack()).merged(DEFAULT_STACK).foreach_optimizers
        self.optimizer = (make_optimizer(job.optimizer, self.params, foreach=foreach)
                          if self.train and self.params else None)
        self.amp = getattr(torch, AMP_DTYPE_NAMES[job.precision]) if job.precision in AMP_DTYPE_NAMES else None
        self.scaler = torch.amp.GradScaler(device.type) if job.precision == "amp-fp16" and self.train else None
        self.pipeline = self.feed = None
        if job.data is not None and job.data.dataset is not None:  # the job's own dataset, a real DataLoader
            from gpucast.profile.dataset_feed import DatasetFeed

            self.feed, self.inputs = DatasetFeed(job, device, len(self.inputs)), None
        elif job.input_pipeline_s > 0:  # batches come from the loader: no resident device batch
            self.pipeline = _Pipeline(self.inputs, job.input_pipeline_s, pin=device.type == "cuda")
            self.inputs = None
        self.first = True
        self.slot = slot

    def _autocast(self):
        import contextlib

        if self.amp is None:
            return contextlib.nullcontext()
        return self.torch.autocast(device_type=self.device.type, dtype=self.amp)

    def _next_inputs(self) -> tuple:
        if self.feed is not None:
            return self.feed.next()
        if self.pipeline is None:
            return self.inputs
        batch = self.pipeline.get()
        return tuple(t.to(self.device, non_blocking=True) if isinstance(t, self.torch.Tensor) else t
                     for t in batch)

    def __call__(self) -> None:
        if self.first:
            self.first = False
            _raise_test_fault(self.slot)
        torch = self.torch
        inputs = self._next_inputs()
        if not self.train:
            with torch.inference_mode(), self._autocast():
                self.model(*inputs)
            if self.device.type == "cuda":  # the step-end host sync (a server reads its outputs)
                torch.cuda.current_stream(self.device).synchronize()
            return
        with self._autocast():
            out = self.model(*inputs)
            loss = self.loss_fn(out, inputs)
        del out
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if self.optimizer is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
        else:
            loss.backward()
            if self.optimizer is not None:
                self.optimizer.step()
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            for p in self.params:
                p.grad = None
        loss.item()  # the per-step host sync of a training loop that logs its loss

    def settle(self) -> int:
        """Steps until the emulated loader's prefetched backlog is gone (a step waited for its
        batch), at most ``SETTLE_MAX_STEPS`` steps or ``SETTLE_MAX_S`` seconds; the number run.
        A real DataLoader (``feed``) steps through its prefetched backlog instead."""
        if self.feed is not None:
            for _ in range(self.feed.settle_steps):
                self()
            return self.feed.settle_steps
        if self.pipeline is None:
            return 0
        self.pipeline.waited = False
        t0, n = time.perf_counter(), 0
        while not self.pipeline.waited and n < SETTLE_MAX_STEPS and time.perf_counter() - t0 < SETTLE_MAX_S:
            self()
            n += 1
        return n

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        if self.feed is not None:
            self.feed.close()


class _Timer:
    """Per-step times: CUDA events read after one synchronize, or perf_counter on the CPU."""

    def __init__(self, device):
        import torch

        self.torch = torch
        self.cuda = device.type == "cuda"
        self.pairs: list = []
        self.cpu_times: list[float] = []
        self.cpu_span: tuple[float, float] | None = None

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def timed(self, step) -> None:
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            self.pairs.append((start, end))
        else:
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            self.cpu_times.append(t1 - t0)
            self.cpu_span = (self.cpu_span[0] if self.cpu_span else t0, t1)

    def __len__(self) -> int:
        return len(self.pairs) if self.cuda else len(self.cpu_times)

    def results(self) -> tuple[list[float], float]:
        """(step times in s, window length in s); call after ``sync()``."""
        if self.cuda:
            times = [s.elapsed_time(e) / 1e3 for s, e in self.pairs]
            span = self.pairs[0][0].elapsed_time(self.pairs[-1][1]) / 1e3 if self.pairs else 0.0
            return times, span
        return list(self.cpu_times), (self.cpu_span[1] - self.cpu_span[0]) if self.cpu_span else 0.0


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


# ------------------------------------------------------------------------------- the run
def run_job(spec: RunSpec, backend=None) -> dict:
    """Run ``spec`` in this process and return its schema row (status ``ok``).

    ``backend``: an :class:`~gpucast.profile.nvml.NvmlBackend`; ``None`` opens the real one for a
    CUDA device (and closes it after) and samples nothing on the CPU. Raises
    :class:`~gpucast.profile.nvml.GpuUnavailable` (one line) when CUDA is asked for and absent;
    a job's own failure (OOM included) propagates: the worker turns it into a status.
    """
    import torch

    from gpucast.profile.nvml import GpuUnavailable, open_backend
    from gpucast.profile.sampler import Sampler, step_stats, summarize

    started_at, t_start = _now_iso(), time.perf_counter()
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
        backend = open_backend(_nvml_index(device.index))

    row = base_row(spec)
    row["started_at"] = started_at
    sync = None
    if spec.sync_dir:
        from gpucast.profile.colocate import WorkerSync

        sync = WorkerSync(spec.sync_dir, spec.slot)
    sampler = None
    step = None
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    try:
        if backend is not None:
            row.update(_gpu_provenance(backend))
            sampler = Sampler(backend, rate_hz=spec.sampler_hz, pids=(os.getpid(),), clock=time.time)
            sampler.start()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        if spec.job.precision == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
        step = _Step(spec.job, device, spec.slot)
        timer = _Timer(device)
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
