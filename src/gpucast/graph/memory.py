"""Live-tensor memory timeline of a captured step, and PyTorch's caching-allocator rounding.

Model, term by term:

* Every tensor storage the step creates is one allocation, live from the op that created it
  (during that op, beside its inputs: the allocator hands out the output before the kernel
  reads the inputs) until Python and autograd release its last reference (a weakref callback
  on the storage, so the timing is exactly eager PyTorch's reference counting, including when
  backward frees saved activations).
* Each allocation is rounded up as ``CUDACachingAllocator::round_size`` does: to a multiple
  of 512 bytes (``kMinBlockSize``). The sum of live rounded sizes is what
  ``torch.cuda.memory_allocated`` reports; its maximum is ``max_memory_allocated``.
* Reserved memory (``max_memory_reserved``, what the process holds from the driver): the step's
  allocations and frees, in the order the capture saw them, replayed through the caching
  allocator's pools, block splitting and segment sizes (:mod:`gpucast.graph.allocator`) over
  :data:`REPLAYED_STEPS` steps, the optimizer's state made at the first step's optimizer phase
  (where its first ``step()`` makes it, between the blocks backward freed). Freed blocks of
  different segments never merge, so reserved exceeds the allocated peak by the segments a
  later, larger request could not reuse (the report's ``allocations`` keeps the log, so that
  ``gpucast.estimate.memory`` replays it again with the libraries' workspaces).
* Classes: storages live before the step are parameters, optimizer state or inputs;
  storages created in the forward/loss phases are activations; storages that end up as
  ``.grad`` are gradients; everything else created in backward/optimizer is temporaries.

Not modelled here: the CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers (they belong to
a GPU and a library version; ``gpucast.estimate.memory`` adds them), the allocator's
``expandable_segments`` mode, and memory of other processes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from gpucast.graph.allocator import (  # noqa: F401  (round_size and the constants are re-exported)
    K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE, K_SMALL_BUFFER, K_SMALL_SIZE,
    AllocationLog, replay, round_size, segment_size)
from gpucast.graph.trace import MEMORY_CLASSES, MemoryReport

# The allocator's constants (c10/cuda/CUDACachingAllocator.cpp) live in gpucast.graph.allocator.
# Steps the allocator is replayed over: the first (the optimizer's state appears) and two more,
# by which the segments a step needs are all cached (a training loop's reserved memory is flat
# after its first steps).
REPLAYED_STEPS = 3
# Share of the allocated peak lost to blocks that cannot be split or coalesced, for estimates that
# have no allocation log to replay (gpucast.estimate.parallel's per-stage memory): typical
# max_memory_reserved / max_memory_allocated ratios of 1.02-1.10 in training loops.
FRAGMENTATION = 0.05


@dataclass(slots=True)
class _Alloc:
    nbytes: int
    cls: str
    start: int
    end: int = -1  # op index at which it was freed; -1 = still live at the end


class MemoryTracker:
    """Follows storages through a captured step.

    ``clock`` is a zero-argument callable giving the number of ops recorded so far. A storage
    an op creates is tracked right after that op is recorded, so it was made by op
    ``clock() - 1`` and is live during it (beside the op's inputs, even those freed right after);
    a storage freed between ops (autograd releasing saved tensors) was last live during the
    op recorded last, ``clock() - 1``, too.
    """

    def __init__(self, clock) -> None:
        self._clock = clock
        self._allocs: dict[int, _Alloc] = {}  # storage id -> its current allocation
        self._all: list[_Alloc] = []  # every allocation, in order (storage ids are reused)
        self._refs: list[weakref.ref] = []
        # Allocations and frees in the order they happened: i + 1 when allocation i is made,
        # -(i + 1) when it is freed (what the caching allocator replay needs).
        self._events: list[int] = []

    def _key(self, t: torch.Tensor) -> int:
        return t.untyped_storage()._cdata

    def seen(self, t: torch.Tensor) -> bool:
        return self._key(t) in self._allocs

    def track(self, t: torch.Tensor, cls: str, before_step: bool = False) -> None:
        """Start following ``t``'s storage if it is new (views of known storages are free).

        ``before_step`` marks storages that exist when the step starts (parameters,
        optimizer state, the input batch)."""
        if not isinstance(t, torch.Tensor) or t.device.type == "cpu":
            return
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._allocs and self._allocs[key].end < 0:
            return
        rec = _Alloc(storage.nbytes(), cls, -1 if before_step else max(self._clock() - 1, 0))  # the op that made it
        self._allocs[key] = rec
        self._all.append(rec)
        index = len(self._all)
        self._events.append(index)

        def _freed(_ref, rec=rec, index=index):
            rec.end = self._clock()
            self._events.append(-index)

        self._refs.append(weakref.ref(storage, _freed))

    def live_by_class(self) -> dict[str, int]:
        """Bytes (rounded as the allocator rounds them) of the storages live now, by class."""
        live = dict.fromkeys(MEMORY_CLASSES, 0)
        for a in self._all:
            if a.end < 0:
                live[a.cls] = live.get(a.cls, 0) + round_size(a.nbytes)
        return live

    def live(self, cls: str) -> list[tuple[int, int]]:
        """(rounded bytes, index of the op that made it) of the storages of ``cls`` live now."""
        return [(round_size(a.nbytes), a.start) for a in self._all if a.end < 0 and a.cls == cls]

    def reclassify(self, t: torch.Tensor, cls: str) -> None:
        rec = self._allocs.get(self._key(t))
        if rec is not None:
            rec.cls = cls

    def report(self, n_ops: int, phases: list[str], at_backward_start: dict[str, int] | None = None) -> MemoryReport:
        """The timeline over ``n_ops`` ops, its peak, and what is live at the peak.

        ``at_backward_start``: :meth:`live_by_class` taken when backward began (training)."""
        import numpy as np

        allocs = self._all
        delta = np.zeros(n_ops + 2, dtype=np.int64)
        for a in allocs:
            size = round_size(a.nbytes)
            start, end = _slots(a, n_ops)
            delta[start] += size
            delta[end] -= size
        live = np.cumsum(delta)[: n_ops + 1]  # live[0]: before any op; live[i+1]: during op i
        peak_slot = int(np.argmax(live)) if len(live) else 0
        peak_op = max(peak_slot - 1, 0)
        at_peak = dict.fromkeys(MEMORY_CLASSES, 0)
        totals = dict.fromkeys(MEMORY_CLASSES, 0)
        for a in allocs:
            size = round_size(a.nbytes)
            totals[a.cls] = totals.get(a.cls, 0) + size
            start, end = _slots(a, n_ops)
            if start <= peak_slot < end:
                at_peak[a.cls] = at_peak.get(a.cls, 0) + size
        peak = int(live[peak_slot]) if len(live) else 0
        log = self.log(phases)
        reserved = max(peak, replay(log, steps=REPLAYED_STEPS)[0])
        return MemoryReport(
            peak_allocated_bytes=peak,
            peak_reserved_bytes=reserved,
            peak_op_index=peak_op,
            peak_phase=phases[peak_op] if phases else "fwd",
            at_peak=at_peak,
            totals=totals,
            timeline=live[1:].tolist(),
            at_backward_start=dict(at_backward_start or {}),
            allocations=log,
        )

    def log(self, phases: list[str]) -> AllocationLog:
        """The step's allocations for the caching allocator's replay (:mod:`gpucast.graph.allocator`):
        the storages live before the step first, the optimizer's state made at the first step's
        optimizer phase (its first ``step()`` creates it), then the step's allocations and frees in
        the order the capture saw them."""
        allocs = self._all
        before = [i for i, a in enumerate(allocs) if a.start < 0 and a.cls != "optimizer_state"]
        late = [i for i, a in enumerate(allocs) if a.start < 0 and a.cls == "optimizer_state"]
        step = [e for e in self._events if allocs[abs(e) - 1].start >= 0]
        late_at = next((j for j, e in enumerate(step) if e > 0 and allocs[e - 1].start < len(phases)
                        and phases[allocs[e - 1].start] == "optim"), len(step))
        return AllocationLog(sizes=[a.nbytes for a in allocs], starts=[a.start for a in allocs],
                             ends=[a.end for a in allocs], events=step, before=before, late=late, late_at=late_at)


def _slots(a: _Alloc, n_ops: int) -> tuple[int, int]:
    """Timeline slots [start, end) an allocation is live in; slot 0 is before the first op,
    slot i+1 is during op i."""
    start = a.start + 1
    end = a.end + 1 if a.end >= 0 else n_ops + 1
    return start, min(max(end, start + 1), n_ops + 1)
