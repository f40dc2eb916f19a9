"""Batches from a job's own dataset through a real ``torch.utils.data.DataLoader``, for the runner.

A job whose ``data.dataset`` names a ``FILE.py:FUNCTION`` factory (:class:`gpucast.surroundings.Data`)
is fed, in :mod:`gpucast.profile.runner`, by ::

    DataLoader(dataset, batch_size=job.batch_size, shuffle=True, num_workers=data.num_workers or 0,
               collate_fn=data.collate or default_collate, pin_memory=<data.pin_memory, on CUDA only>,
               drop_last=True)

with the factories imported by :func:`gpucast.graph.usercode.load_callable` (the ``--module``
loader; relative paths against the current directory). Epochs follow one another: when the
iterator is exhausted a new one starts (with ``num_workers > 0`` new worker processes, as
``persistent_workers=False``, PyTorch's default, does), so the epoch boundary is part of what is
timed. ``drop_last=True`` keeps every step at the job's batch size.

Each step takes the next batch and moves every tensor in it to the device
(``non_blocking=data.non_blocking`` when the batch is pinned); the model gets the batch's first
``n_inputs`` entries (a tensor batch is one entry; a tuple or list is its elements in order; a
dict its values in order), ``n_inputs`` being the number of inputs the job's own input factory
makes: a dataset of ``(x, y)`` pairs feeds ``model(x)`` and copies ``y`` too, as a training loop
does. The loss is the job's (the zoo's or the module's), not one against ``y``.

Steady state: a DataLoader with ``w`` workers has ``prefetch_factor * w`` batches (2w by default)
in flight when it starts; :attr:`DatasetFeed.settle_steps` more steps after the warm-up drain that
backlog, so the window does not time steps that only consumed batches made during set-up.

Not here: ``persistent_workers``, samplers other than shuffling, ``IterableDataset`` (refused
as in :mod:`gpucast.probe.dataset`).
"""

from __future__ import annotations

from gpucast.job import Job


class DatasetFeed:
    """The job's DataLoader on ``device``; ``next()`` is the model's inputs for one step."""

    def __init__(self, job: Job, device, n_inputs: int):
        import torch
        from torch.utils.data import DataLoader, IterableDataset

        from gpucast.graph.usercode import load_callable

        d = job.data
        dataset = load_callable(d.dataset, f"data.dataset {d.dataset}")()
        if isinstance(dataset, IterableDataset):
            raise ValueError(f"data.dataset {d.dataset}: returned an IterableDataset; only map-style datasets "
                             f"are fed")
        collate = load_callable(d.collate, f"data.collate {d.collate}") if d.collate else None
        self.torch = torch
        self.device = device
        self.n_inputs = max(1, n_inputs)
        self.workers = d.num_workers or 0
        self.pin = device.type == "cuda" and bool(d.pin_memory)
        self.non_blocking = self.pin and bool(d.non_blocking)
        self.loader = DataLoader(dataset, batch_size=job.batch_size, shuffle=True, num_workers=self.workers,
                                 collate_fn=collate, pin_memory=self.pin, drop_last=True)
        if len(self.loader) < 1:
            raise ValueError(f"data.dataset {d.dataset}: fewer samples ({len(dataset)}) than one batch "
                             f"({job.batch_size})")
        prefetch = self.loader.prefetch_factor if self.workers else 0
        self.settle_steps = (prefetch or 0) * self.workers + (1 if self.workers else 0)
        self._it = None
        self.epochs = 0

    def _batch(self):
        if self._it is None:
            self._it = iter(self.loader)
            self.epochs += 1
        try:
            return next(self._it)
        except StopIteration:
            self._it = None
            return self._batch()

    def next(self) -> tuple:
        batch = self._batch()
        if isinstance(batch, self.torch.Tensor):
            parts = [batch]
        elif isinstance(batch, dict):
            parts = list(batch.values())
        else:
            parts = list(batch)
        moved = [p.to(self.device, non_blocking=self.non_blocking) if isinstance(p, self.torch.Tensor) else p
                 for p in parts]
        return tuple(moved[:self.n_inputs])

    def close(self) -> None:
        it, self._it = self._it, None
        shutdown = getattr(it, "_shutdown_workers", None)  # ends the worker processes now, not at GC
        if callable(shutdown):
            shutdown()
