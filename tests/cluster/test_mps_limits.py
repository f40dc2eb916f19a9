"""MPS with per-client SM limits (gpucast.cluster.timeshare.mps): the limit's own cost, disjoint limits,
monotone in the neighbours' SM demand, and no limits = timeshare's MPS mode."""

from __future__ import annotations

import pytest

from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import mps
from gpucast.cluster.timeshare import JobTimeline


@pytest.mark.parametrize("world", sorted(timeshare.WORLDS))
def test_without_limits_it_is_timeshares_mps_mode(world):
    c = timeshare.WORLDS[world]
    jobs = [JobTimeline.from_util(u, s, gaps=g, mem_bound=m)
            for u, s, g, m in ((70, 0.1, 3, 0.3), (40, 0.25, 2, 0.8), (20, 0.05, 1, 0.5))]
    for k in (2, 3):
        assert mps.slowdowns(jobs[:k], None, c) == pytest.approx(timeshare.slowdowns(jobs[:k], c, "mps"), rel=1e-9)


def test_a_lone_job_pays_its_limit_on_its_compute_bound_kernels_only():
    compute = JobTimeline(0.1, 0.08, 2, mem_bound=0.0)
    memory = JobTimeline(0.1, 0.08, 2, mem_bound=1.0)
    # 0.02 s host + 0.08 s of kernels at half the SMs = 0.18 s: x1.8; memory-bound kernels keep their time
    assert mps.slowdowns([compute], [0.5]) == pytest.approx([1.8])
    assert mps.slowdowns([memory], [0.5]) == pytest.approx([1.0])
    assert mps.slowdowns([compute], [None]) == [1.0]


def test_limits_that_fit_side_by_side_leave_only_bandwidth_and_host_sharing():
    a = JobTimeline(0.1, 0.05, 2, mem_bound=0.0)
    c = timeshare.world().with_(relief=0.0)     # the closed form, without the learned relief
    alone = mps.slowdowns([a], [0.5], c)[0]
    together = mps.slowdowns([a, a], [0.5, 0.5], c)
    # compute-bound kernels on disjoint SM halves: only the shared host cores slow them
    host_only = (0.05 * (1 + c.host * 0.5) + 0.05 / 0.5) / 0.1
    assert together == pytest.approx([host_only, host_only])
    assert together[0] >= alone


def test_a_job_slows_more_the_more_sms_its_neighbour_may_take():
    job = JobTimeline.from_util(60, 0.1, gaps=3, mem_bound=0.3)
    other = JobTimeline.from_util(80, 0.1, gaps=3, mem_bound=0.3)
    seen = [mps.slowdowns([job, other], [0.6, p])[0] for p in (0.2, 0.4, 0.6, 0.8, 1.0)]
    assert all(a <= b + 1e-9 for a, b in zip(seen, seen[1:])) and seen[0] < seen[-1], seen
    busier = [mps.slowdowns([job, JobTimeline.from_util(u, 0.1, gaps=3, mem_bound=0.3)], [0.6, 0.8])[0]
              for u in (10, 40, 70, 100)]
    assert all(a < b for a, b in zip(busier, busier[1:])), busier


def test_overlap_and_bad_limits():
    assert mps.overlap(0.5, 0.5) == 0.0
    assert mps.overlap(1.0, 1.0) == 1.0
    assert mps.overlap(0.5, 0.75) == pytest.approx(0.5)
    assert mps.equal_limits(4) == [0.25] * 4
    job = JobTimeline.from_util(50)
    for bad in (0.0, 1.5, -1):
        with pytest.raises(ValueError, match="MPS thread limit"):
            mps.slowdowns([job, job], [bad, 0.5])
    with pytest.raises(ValueError, match="2 jobs but 1"):
        mps.slowdowns([job, job], [0.5])


def test_kernels_on_sms_kept_apart_still_share_dram():
    """Two jobs that do nothing but saturate DRAM, each on its own half of the SMs: each gets half
    the bandwidth, so each runs twice as slow (the fair-share closed form); compute-bound ones on
    their halves do not slow each other at all (beyond each one's own limit)."""
    # the closed form alone: without the fitted thrash of kernels on shared SMs (whose jobs here
    # have none) and without the relief (neighbours that hold the whole GPU take all it says)
    c = timeshare.CURRENT.with_(bandwidth=0.0)
    memory = JobTimeline(0.1, 0.1, 1, mem_bound=1.0)
    assert mps.slowdowns([memory, memory], [0.5, 0.5], c) == pytest.approx([2.0, 2.0])
    compute = JobTimeline(0.1, 0.1, 1, mem_bound=0.0)
    assert mps.slowdowns([compute, compute], [0.5, 0.5], c) == pytest.approx([2.0, 2.0])   # the limit's own x2
    assert mps.slowdowns([compute, memory], [0.5, 0.5], c) == pytest.approx([2.0, 1.0])
