"""The data loader and the loop's habits as host work around the captured step.

The loader is a pipeline stage. Producing one batch takes ``B * per_sample + collate`` seconds
of one reference core (per-sample costs by source, :class:`~gpucast.estimate.environment.Environment`;
the step simulation divides every host cost, these included, by the stack's ``cpu_speed``):

* ``num_workers = 0``: the training loop produces the batch itself, serially, before the step's
  first op (the GPU idles meanwhile);
* ``num_workers = w > 0``: ``min(w, cpu_cores - 1)`` worker processes produce batches in parallel,
  so the loader sustains one batch per ``(produce + worker_batch_s) / workers`` seconds (or per pinning time, when
  ``pin_memory`` copies the batch in the pin thread); the loop pays only receiving the batch.

The batch then crosses the host link: pinned + ``non_blocking`` is an asynchronous copy on the
compute stream (the host pays the call; the stream, not the host, pays the transfer);
``non_blocking=False`` blocks the host until the copy is done (``Tensor.to`` synchronises the
stream), and a pageable source is staged by the driver at ``pageable_copy_efficiency`` of the
link while the host waits either way. Copies are not kernels: they do not count as GPU busy.

Loop habits add host time after the step: ``.item()`` calls beyond the first (the first is part
of ``EstimatorConfig.step_overhead_s``, and with none the host does not wait for the GPU at the
end of a step), a progress bar, a log line every N steps, the epoch boundary amortised over the
epoch's steps (worker start-up or a new in-loop iterator).

Not modelled: workers slowing the main process when they outnumber the cores, the GIL shared
with the pin thread, storage reads, prefetch depth (the loader either keeps up or sets the pace).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucast.estimate.environment import Environment
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec
from gpucast.surroundings import Surroundings

@dataclass
class LoaderCost:
    per_sample_s: float     # one core's host seconds per sample
    produce_s: float        # one core's host seconds per batch (samples + collate)
    workers: int            # effective parallel workers (0: in the loop)
    period_s: float         # seconds per batch the workers sustain (0 without workers)
    in_loop_s: float        # host seconds per step the loop spends on the batch before the step's ops
    copy_stream_s: float    # stream seconds of an asynchronous copy before the step's kernels
    copy_blocks: bool       # the copy made the host wait for the stream (a sync)
    habits_s: float         # host seconds of the loop's habits after the step
    item_calls: int
    item_cost_s: float = 0.0  # one .item() on this host

    @property
    def loader_s(self) -> float:
        """Host time the loader costs per step, wherever it runs."""
        return self.in_loop_s + (self.period_s * self.workers if self.workers else 0.0)


def _sample_bytes(s: Surroundings, trace: Trace) -> float:
    if s.data.sample_bytes is not None:
        return float(s.data.sample_bytes)
    return trace.input_bytes / max(1, trace.batch_size)


def per_sample_cost(s: Surroundings, trace: Trace, env: Environment) -> float:
    d = s.data
    if d.per_sample_s is not None:
        return d.per_sample_s
    src = d.source
    sample_bytes = _sample_bytes(s, trace)
    if src == "device":
        return 0.0
    if src == "memory":
        base = env.memory_sample_s
    elif src == "images":
        w, h = d.image_size
        base = env.image_sample_s + w * h * env.jpeg_decode_s_per_px
    elif src == "small-images":
        base = env.small_image_sample_s
    elif src == "tokens":
        base = env.token_sample_s
    elif src == "environment":
        base = env.env_step_s
    else:  # custom always has per_sample_s
        base = 0.0
    return base + sample_bytes / env.collate_bytes_per_s


def loader_cost(s: Surroundings, trace: Trace, gpu: GpuSpec, env: Environment, host_link_efficiency: float,
                legacy_pipeline_s: float = 0.0) -> LoaderCost:
    d, loop, stack = s.data, s.loop, s.stack
    b = trace.batch_size
    per_sample = per_sample_cost(s, trace, env)
    feeds = d.source != "device"
    produce = (b * per_sample + env.collate_batch_s) if feeds else 0.0
    workers = min(d.num_workers, max(1, stack.cpu_cores - 1)) if feeds and d.num_workers else 0
    link = gpu.host_link_gbs * 1e9
    nbytes = _sample_bytes(s, trace) * b
    in_loop = 0.0
    period = 0.0
    copy_stream = 0.0
    blocks = False
    if feeds:
        if workers:
            period = (produce + env.worker_batch_s) / workers
            if d.pin_memory:
                period = max(period, nbytes / env.pin_bytes_per_s)
            in_loop += env.worker_batch_recv_s
        else:
            in_loop += produce
        tensors = max(1, trace.input_tensors) + 1  # the inputs and the labels
        in_loop += tensors * env.copy_call_s
        if d.pin_memory and d.non_blocking:
            copy_stream = nbytes / (link * host_link_efficiency)
        else:
            eff = host_link_efficiency if d.pin_memory else host_link_efficiency * env.pageable_copy_efficiency
            in_loop += nbytes / (link * eff)
            blocks = not d.non_blocking
        if d.dataset_samples:
            steps_per_epoch = max(1, math.ceil(d.dataset_samples / b))
            boundary = workers * env.worker_start_s if workers else env.epoch_s
            in_loop += boundary / steps_per_epoch
    if legacy_pipeline_s > 0:  # Job.input_pipeline_s: a loader that runs ahead at this pace
        period = max(period, legacy_pipeline_s)
        if not feeds:  # inputs "on the GPU" but produced by a loader: a pinned copy, as before
            copy_stream = nbytes / (link * host_link_efficiency)
    habits = 0.0
    if loop.item_calls > 1:
        habits += (loop.item_calls - 1) * env.item_s
    if loop.progress_bar:
        habits += env.progress_bar_s
    if loop.log_every:
        habits += env.log_line_s / loop.log_every
    return LoaderCost(per_sample_s=per_sample, produce_s=produce, workers=workers, period_s=period,
                      in_loop_s=in_loop, copy_stream_s=copy_stream, copy_blocks=blocks,
                      habits_s=habits, item_calls=loop.item_calls, item_cost_s=env.item_s)
