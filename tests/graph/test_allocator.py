"""The caching allocator replay (gpucast.graph.allocator) against the rules of
c10/cuda/CUDACachingAllocator.cpp, each expectation with its reason:

* a freed block is cached and handed out again: the same request twice costs one segment;
* requests up to 1 MiB come from 2 MiB segments, those under 10 MiB from 20 MiB segments, larger
  ones get a segment of their own rounded to 2 MiB (``get_allocation_size``);
* a large block is split only when more than 1 MiB would be left (``should_split``), and the
  allocated figure counts the whole block handed out;
* freed neighbours of one segment merge, blocks of two segments never do: two freed 20 MiB
  segments cannot hold a 30 MiB request, one freed 40 MiB segment can;
* a persistent library block (a cuBLAS workspace) is made once, a transient one (a convolution's
  workspace) at every step, and the latter grows the reserved memory only where it does not fit in
  what the allocator holds.
"""

from __future__ import annotations

from gpucast.graph.allocator import AllocationLog, CachingAllocator, LibraryBlock, replay, round_size, segment_size

MIB = 2**20


def test_a_freed_block_is_handed_out_again():
    a = CachingAllocator()
    a.malloc("x", 30 * MIB)
    a.free("x")
    a.malloc("y", 30 * MIB)
    assert a.reserved == 30 * MIB and a.peak_reserved == 30 * MIB


def test_segment_sizes_follow_the_request_size():
    assert segment_size(round_size(100)) == 2 * MIB
    assert segment_size(round_size(3 * MIB)) == 20 * MIB
    assert segment_size(round_size(30 * MIB + 1)) == 32 * MIB
    a = CachingAllocator()
    for i in range(4):  # four 512 KiB blocks share one 2 MiB segment
        a.malloc(("small", i), 512 * 1024)
    assert a.reserved == 2 * MIB
    a.malloc("mid", 3 * MIB)
    a.malloc("mid2", 3 * MIB)  # the 20 MiB segment's remainder holds the second
    assert a.reserved == 22 * MIB


def test_a_large_block_keeps_a_tail_of_a_mebibyte_or_less():
    a = CachingAllocator()
    a.malloc("x", 20 * MIB)
    a.free("x")
    a.malloc("y", 19 * MIB + 512 * 1024)  # 512 KiB left: not split, the whole block counts
    assert a.allocated == 20 * MIB
    a.free("y")
    a.malloc("z", 10 * MIB)  # 10 MiB left: split, the tail stays free for another request
    assert a.allocated == 10 * MIB
    a.malloc("w", 10 * MIB)
    assert a.reserved == 20 * MIB


def test_blocks_of_different_segments_never_merge():
    a = CachingAllocator()
    a.malloc("x", 20 * MIB)
    a.malloc("y", 20 * MIB)
    a.free("x")
    a.free("y")
    a.malloc("z", 30 * MIB)  # 40 MiB free, but in two segments
    assert a.reserved == 70 * MIB
    b = CachingAllocator()
    b.malloc("big", 40 * MIB)
    b.free("big")
    b.malloc("x", 20 * MIB)
    b.malloc("y", 20 * MIB)
    b.free("x")
    b.free("y")  # the two halves of one segment merge again
    b.malloc("z", 30 * MIB)
    assert b.reserved == 40 * MIB


def _log(sizes, events, before=()):
    """A synthetic log: allocation i made at op i (its start), freed at the op count its free names."""
    starts, ends, clock = [-1] * len(sizes), [-1] * len(sizes), 0
    for e in events:
        if e > 0:
            starts[e - 1] = clock
            clock += 1
        else:
            ends[-e - 1] = clock
    return AllocationLog(sizes=list(sizes), starts=starts, ends=ends, events=list(events), before=list(before))


def test_a_persistent_block_is_made_once_and_a_transient_one_fits_where_it_can():
    # a step that makes and frees one 100 MiB activation
    log = _log([100 * MIB], [1, -1])
    assert replay(log) == (100 * MIB, 100 * MIB)
    # a 32 MiB workspace kept from the first step on: one more segment, whatever the steps
    kept = replay(log, (LibraryBlock(0, 32 * MIB, persistent=True),))
    assert kept == (132 * MIB, 132 * MIB) == replay(log, (LibraryBlock(0, 32 * MIB, persistent=True),), steps=5)
    # a transient 10 MiB workspace beside the activation needs a segment; after the activation is
    # freed (op 1) it fits in the cached 100 MiB block
    assert replay(log, (LibraryBlock(0, 10 * MIB),))[0] == 110 * MIB
    late = _log([100 * MIB, 1 * MIB], [1, -1, 2, -2])
    assert replay(late, (LibraryBlock(1, 10 * MIB),))[0] == 100 * MIB + 2 * MIB


def test_a_captured_step_reserves_at_least_what_it_allocates():
    from gpucast import Job
    from gpucast.graph import capture
    from gpucast.surroundings import Data, Loop

    tr = capture(Job("resnet18-cifar", batch_size=8, data=Data(source="device"), loop=Loop.benchmark()))
    m = tr.memory
    assert m.allocations is not None and m.peak_reserved_bytes >= m.peak_allocated_bytes > 0
    reserved, allocated = replay(m.allocations)
    assert m.peak_reserved_bytes == max(reserved, m.peak_allocated_bytes)
    # the replay's allocated peak is the timeline's, plus the tails (<= 1 MiB) of blocks it did not split
    assert 0.98 * m.peak_allocated_bytes <= allocated <= 1.05 * m.peak_allocated_bytes


def test_expandable_segments_merge_what_separate_segments_cannot():
    """The default allocator's two freed 20 MiB segments cannot hold a 30 MiB request (a third
    segment is made); with expandable segments the two blocks are neighbours in one segment, merge
    when freed, and hold it: reserved stays at the pages mapped (2 x 20 MiB pages)."""
    plain, grown = CachingAllocator(), CachingAllocator(expandable=True)
    for a in (plain, grown):
        a.malloc("a", 20 * MIB)
        a.malloc("b", 20 * MIB)
        a.free("a")
        a.free("b")
        a.malloc("c", 30 * MIB)
    assert plain.reserved == 40 * MIB + 30 * MIB
    assert grown.reserved == 40 * MIB and grown.peak_reserved == 40 * MIB


def test_expandable_segments_grow_by_pages_at_the_end():
    """A request that fits no free block maps pages at the segment's end: the free block at the
    end grows into them (20 MiB pages in the large pool, 2 MiB in the small one)."""
    a = CachingAllocator(expandable=True)
    a.malloc("x", 25 * MIB)            # 2 pages mapped; 15 MiB free at the end
    assert a.reserved == 40 * MIB
    a.malloc("y", 30 * MIB)            # the free 15 MiB end grows by one page to 35 MiB
    assert a.reserved == 60 * MIB
    a.malloc("s", 100)                 # the small pool has its own segment of 2 MiB pages
    assert a.reserved == 62 * MIB
    assert a.allocated == 25 * MIB + 30 * MIB + 512


def test_expandable_replay_is_remembered_apart():
    log = AllocationLog(sizes=[20 * MIB, 20 * MIB, 30 * MIB], starts=[0, 0, 2], ends=[1, 1, -1],
                        events=[1, 2, -1, -2, 3], before=[])
    plain = replay(log, steps=1)
    grown = replay(log, steps=1, expandable=True)
    assert plain[0] == 70 * MIB and grown[0] == 40 * MIB
    assert replay(log, steps=1) == plain
