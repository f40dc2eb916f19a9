"""One training (or inference) step of a job on a real device, as the predictor traces it: the
model, inputs, optimizer and scaler of :class:`Step`, the emulated data loader
(:class:`Pipeline`), and the per-step timer (:class:`Timer`). :func:`gpucast.profile.runner.run_job`
drives them through the warm-up and the window.

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
  ``fp32`` keeps torch's defaults (cuDNN convolutions and RNNs on TF32, matmuls not), as the estimator
  assumes (``EstimatorConfig.cudnn_fp32_uses_tf32``).

Input pipeline (``job.input_pipeline_s > 0``): a data loader is emulated by one producer thread
that spends ``input_pipeline_s`` of wall time per batch building it in pinned host memory (a
copy of the synthetic batch; the rest of the time is ``time.sleep``, standing for decode and
augmentation done by DataLoader *worker processes*, which do not hold this process's GIL), a
queue of depth 2 (the loader's prefetch), and each step copies its batch to the device with
``non_blocking=True`` before the forward. The loader runs ahead, so a step takes
``max(compute, input_pipeline_s)`` in steady state, as the predictor assumes. The batches it
prefetched while the model was built and warmed up (up to the queue's depth plus the one it
holds) are not steady state: after the warm-up the runner keeps stepping until a step has had to
wait for its batch (:meth:`Step.settle`, bounded by ``SETTLE_MAX_STEPS``/``SETTLE_MAX_S``;
a job faster than its loader then runs at the loader's pace), so the window never times steps
that only drained that backlog.

Test seams (no effect on what a run measures): ``Pipeline(pace=...)`` replaces the producer's
sleep for batch ``i`` with ``pace(i, rest_s)`` (default: ``time.sleep(rest_s)``), so a test can
hold the loader at a gate; ``Pipeline.starved`` is the event a ``get()`` sets when it found no batch
ready (``waited``), which such a gate can wait on; ``Step(pace=..., clock=...)`` passes ``pace``
on and takes ``settle()``'s ``SETTLE_MAX_S`` bound from ``clock`` (default ``time.perf_counter``).

Real data (``job.data.dataset`` set, a ``FILE.py:FUNCTION`` factory): batches come from a real
``DataLoader`` over the job's own dataset (:mod:`gpucast.profile.dataset_feed`: its workers,
collate function and epochs; each batch copied to the device before the forward) instead of
the resident synthetic batch or the emulated pipeline; after the warm-up the runner steps
through the loader's prefetched backlog (``DatasetFeed.settle_steps``) before the window.

The first step raises the test fault set for the run's slot, if any
(:func:`gpucast.profile.faults.raise_step_fault`).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from gpucast.job import Job
from gpucast.profile.faults import raise_step_fault

__all__ = ["Step", "Pipeline", "Timer", "PIPELINE_QUEUE_DEPTH", "SETTLE_MAX_STEPS", "SETTLE_MAX_S"]

AMP_DTYPE_NAMES = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}
PIPELINE_QUEUE_DEPTH = 2  # DataLoader's default prefetch (2 batches per worker)
# Bounds on the steps run after the warm-up until the emulated loader's backlog is drained (our
# choice: a backlog of depth + 1 batches drains within 30 steps unless compute is within ~10 % of
# the loader's period, where the step is the loader's period either way).
SETTLE_MAX_STEPS = 30
SETTLE_MAX_S = 2.0


def _sleep_rest(i: int, rest_s: float) -> None:
    """The real loader's pace: the rest of the batch's ``input_pipeline_s`` is spent asleep."""
    if rest_s > 0:
        time.sleep(rest_s)


class Pipeline:
    """The emulated data loader (see the module docstring): one producer thread, queue depth 2."""

    def __init__(self, template: tuple, seconds: float, pin: bool,
                 pace: Callable[[int, float], None] | None = None):
        self.template = tuple(t.detach().to("cpu") if hasattr(t, "detach") else t for t in template)
        self.seconds = seconds
        self.pin = pin
        self.pace = pace if pace is not None else _sleep_rest
        self.queue: queue.Queue = queue.Queue(maxsize=PIPELINE_QUEUE_DEPTH)
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.starved = threading.Event()  # a get() found no batch ready since the last reset
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

    @property
    def waited(self) -> bool:
        """A ``get()`` found no batch ready since the last :meth:`reset_waited`."""
        return self.starved.is_set()

    def reset_waited(self) -> None:
        self.starved.clear()

    def _produce(self) -> None:
        try:
            i = 0
            while not self.stopped.is_set():
                deadline = time.perf_counter() + self.seconds
                batch = self._batch()
                self.pace(i, deadline - time.perf_counter())
                i += 1
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
            self.starved.set()
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


class Step:
    """The model, inputs, optimizer and scaler of one job on one device; ``__call__`` runs a step."""

    def __init__(self, job: Job, device, slot: int = 0, *,
                 pace: Callable[[int, float], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
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
            self.pipeline = Pipeline(self.inputs, job.input_pipeline_s, pin=device.type == "cuda", pace=pace)
            self.inputs = None
        self.first = True
        self.slot = slot
        self.clock = clock

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
            raise_step_fault(self.slot)
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
        self.pipeline.reset_waited()
        t0, n = self.clock(), 0
        while not self.pipeline.waited and n < SETTLE_MAX_STEPS and self.clock() - t0 < SETTLE_MAX_S:
            self()
            n += 1
        return n

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        if self.feed is not None:
            self.feed.close()


class Timer:
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
