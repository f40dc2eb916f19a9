"""PyTorch's CUDA caching allocator replayed over a step's allocations: the reserved memory.

``torch.cuda.max_memory_reserved`` is the largest sum of the segments the caching allocator has
taken from the driver with ``cudaMalloc``; it never gives one back during a training loop (only
``empty_cache()`` or an out-of-memory retry do). Which segments it needs depends on the order and
sizes of the step's allocations and frees, so it is replayed here block by block, as
``c10/cuda/CUDACachingAllocator.cpp`` (PyTorch 1.10 .. 2.11, default configuration) does it:

* a request is rounded to a multiple of 512 bytes (``round_size``, ``kMinBlockSize``);
* requests up to 1 MiB (``kSmallSize``) are served from the small pool, larger ones from the
  large pool; each pool hands out the smallest free block that fits, the lowest address first
  among equals (``get_free_block``, ``BlockComparatorSize``);
* when none fits, a new segment is taken: 2 MiB (``kSmallBuffer``) for a small request, 20 MiB
  (``kLargeBuffer``) for one under 10 MiB (``kMinLargeAlloc``), else the request rounded up to
  2 MiB (``kRoundLarge``; ``get_allocation_size``);
* the block handed out is split when what is left is at least 512 bytes (small pool) or more
  than 1 MiB (large pool; ``should_split``), and a freed block merges with free neighbours of
  its own segment (``try_merge_blocks``); blocks of different segments never merge, which is the
  fragmentation this replay measures;
* ``allocated`` counts whole blocks (an unsplit block's tail included), as the allocator's stats do.

With ``expandable_segments:True`` (``PYTORCH_CUDA_ALLOC_CONF``, PyTorch >= 2.1; off by default;
``Stack.expandable_segments``) each pool is one segment that grows: when no free block fits, pages
are mapped at the segment's end (2 MiB pages for the small pool, 20 MiB for the large one), and a
free block at the end grows into them (the allocator's ``Note [Expandable Segments]`` and
``ExpandableSegment``). Blocks of the one segment merge, so the slivers between segments are gone:
what stays reserved is the pages mapped, which only an out-of-memory retry or ``empty_cache`` unmaps.

Not modelled: the other ``PYTORCH_CUDA_ALLOC_CONF`` options (``max_split_size_mb``, ``roundup_power2_divisions``, garbage collection), several streams, the
real addresses ``cudaMalloc`` returns (segments are ordered by when they were made), CUDA graphs'
private pools.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field

K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_LARGE_BUFFER = 20 << 20
K_ROUND_LARGE = 2 << 20
# Page sizes of an expandable segment ("2MB for small pool, 20MB for large pool": ExpandableSegment).
EXPANDABLE_PAGE = {True: K_SMALL_BUFFER, False: K_LARGE_BUFFER}
# Replays remembered per log (one per set of library blocks: a GPU's cuBLAS workspace, a cuDNN ratio).
CACHED_REPLAYS = 32


def round_size(nbytes: int) -> int:
    """The allocator's block size for a request (``round_size``); an empty tensor gets no block."""
    if nbytes <= 0:
        return 0
    if nbytes < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * ((nbytes + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def segment_size(block: int) -> int:
    """The segment ``cudaMalloc`` is asked for when no cached block holds ``block`` bytes."""
    if block <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if block < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((block + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class _Block:
    __slots__ = ("seg", "offset", "size", "free", "prev", "next", "small")

    def __init__(self, seg: int, offset: int, size: int, small: bool) -> None:
        self.seg, self.offset, self.size, self.small = seg, offset, size, small
        self.free = True
        self.prev: _Block | None = None
        self.next: _Block | None = None

    def key(self) -> tuple[int, int, int]:
        return (self.size, self.seg, self.offset)


class CachingAllocator:
    """Blocks, segments and free pools of one device and stream; ``malloc(key, nbytes)`` and
    ``free(key)``; ``reserved``/``allocated`` now and their peaks. ``expandable``: one growing
    segment per pool (``expandable_segments:True``)."""

    def __init__(self, expandable: bool = False) -> None:
        self._pools: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}
        self._free: dict[tuple[int, int, int], _Block] = {}
        self._live: dict[object, _Block] = {}
        self._segments = 0
        self.expandable = expandable
        self._last: dict[bool, _Block | None] = {True: None, False: None}  # each expandable segment's last block
        self.reserved = self.allocated = 0
        self.peak_reserved = self.peak_allocated = 0

    def _add_free(self, b: _Block) -> None:
        k = (b.size, b.seg, b.offset)
        insort(self._pools[b.small], k)
        self._free[k] = b

    def _take_free(self, b: _Block) -> None:
        k = (b.size, b.seg, b.offset)
        pool = self._pools[b.small]
        del pool[bisect_left(pool, k)]
        del self._free[k]

    def malloc(self, key, nbytes: int) -> None:
        size = round_size(nbytes)
        if size == 0 or key in self._live:
            return
        small = size <= K_SMALL_SIZE
        pool = self._pools[small]
        i = bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            block = self._free[pool[i]]
            self._take_free(block)
        elif self.expandable:
            block = self._grow(small, size)
        else:
            seg = segment_size(size)
            block = _Block(self._segments, 0, seg, small)
            self._segments += 1
            self.reserved += seg
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        if (small and rest >= K_MIN_BLOCK_SIZE) or (not small and rest > K_SMALL_SIZE):
            tail = _Block(block.seg, block.offset + size, rest, small)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next = tail
            block.size = size
            if self._last[small] is block:
                self._last[small] = tail
            self._add_free(tail)
        block.free = False
        self._live[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def _grow(self, small: bool, size: int) -> _Block:
        """Map pages at the end of the pool's expandable segment until a block of ``size`` fits: the
        free block at the end grows, or a new block starts there."""
        last = self._last[small]
        have = last.size if last is not None and last.free else 0
        page = EXPANDABLE_PAGE[small]
        mapped = page * (-(-(size - have) // page))
        self.reserved += mapped
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        if have:
            self._take_free(last)
            last.size += mapped
            return last
        block = _Block(0 if small else 1, 0 if last is None else last.offset + last.size, mapped, small)
        block.prev = last
        if last is not None:
            last.next = block
        self._last[small] = block
        return block

    def free(self, key) -> None:
        block = self._live.pop(key, None)
        if block is None:
            return
        self.allocated -= block.size
        block.free = True
        prev, nxt = block.prev, block.next
        if prev is not None and prev.free:
            self._take_free(prev)
            prev.size += block.size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            if self._last[block.small] is block:
                self._last[block.small] = prev
            block = prev
        if nxt is not None and nxt.free:
            self._take_free(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
            if self._last[block.small] is nxt:
                self._last[block.small] = block
        self._add_free(block)


@dataclass
class AllocationLog:
    """A step's allocations in the order the capture saw them (:class:`gpucast.graph.memory.
    MemoryTracker`), what the allocator replay needs.

    ``sizes[i]``: allocation ``i``'s bytes; ``starts[i]``: the op that made it (-1: before the step);
    ``ends[i]``: the op count when it was freed (-1: live at the end). ``events``: the step's
    allocations and frees in order, ``i + 1`` when ``i`` is made and ``-(i + 1)`` when it is freed.
    ``before``: what lives before the first step, in order (parameters, buffers, inputs); ``late``:
    what lives from the first step on but is made during it (the optimizer's state, at its first
    ``step()``), before the step's event ``late_at``."""

    sizes: list[int]
    starts: list[int]
    ends: list[int]
    events: list[int]
    before: list[int]
    late: list[int] = field(default_factory=list)
    late_at: int = 0
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def times(self) -> list[float]:
        """Each event's place on the op clock: an allocation at its op, a free half an op after
        the op that preceded it (so a block inserted at op ``k`` goes after op ``k``'s outputs and
        before what is freed once op ``k`` is done)."""
        return [self.starts[e - 1] if e > 0 else self.ends[-e - 1] - 0.5 for e in self.events]


@dataclass(frozen=True)
class LibraryBlock:
    """An allocation a library makes through the caching allocator at op ``op`` (not a tensor the
    capture saw): ``persistent`` blocks are made once, at the first step, and kept (cuBLAS
    workspaces); the others are made and freed around the op at every step (cuDNN workspaces)."""

    op: int
    nbytes: int
    persistent: bool = False


def replay(log: AllocationLog, library: tuple[LibraryBlock, ...] = (), steps: int = 3,
           expandable: bool = False) -> tuple[int, int]:
    """Peak (reserved, allocated) bytes of the caching allocator over ``steps`` replays of the
    step in ``log``, with the ``library`` blocks inserted at their ops (``expandable``: with
    ``expandable_segments:True``). What a step leaves allocated is freed before the next one makes
    its own again. Remembered per ``library`` and mode."""
    key = (tuple(library), steps, expandable)
    hit = log._cache.get(key)
    if hit is not None:
        return hit
    times = log.times()
    placed = sorted(library, key=lambda b: b.op)
    at = [bisect_right(times, b.op) for b in placed]  # insert before the first event later than the op
    alloc = CachingAllocator(expandable)
    for i in log.before:
        alloc.malloc(i, log.sizes[i])
    events = log.events
    for n in range(steps):
        k = 0
        for j in range(len(events) + 1):
            if n == 0 and j == log.late_at:
                for i in log.late:
                    alloc.malloc(i, log.sizes[i])
            while k < len(placed) and at[k] == j:
                b = placed[k]
                if not b.persistent:
                    alloc.malloc(("lib", n, k), b.nbytes)
                    alloc.free(("lib", n, k))
                elif n == 0:
                    alloc.malloc(("persistent", k), b.nbytes)
                k += 1
            if j == len(events):
                break
            e = events[j]
            if e > 0:
                alloc.malloc((n, e - 1), log.sizes[e - 1])
            else:
                alloc.free((n, -e - 1))
        for key_ in [k_ for k_ in alloc._live if isinstance(k_, tuple) and k_[0] == n]:
            alloc.free(key_)
    out = (alloc.peak_reserved, alloc.peak_allocated)
    if len(log._cache) >= CACHED_REPLAYS:  # a fit that tries many workspace sizes: keep the latest
        log._cache.clear()
    log._cache[key] = out
    return out
