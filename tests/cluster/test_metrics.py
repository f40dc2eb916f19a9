"""Simulator metrics on hand-made SimResults: every expected number is derived in a comment.

The results here are synthetic test fixtures (built by hand, not by the simulator).
"""

from __future__ import annotations

import json
import math

import pytest

from gpucast.cluster.metrics import (binned_util, busy_periods, queued_periods, change_line, change_pct, compare, summarize,
                                     time_weighted_util, util_integral)
from gpucast.cluster.result import JobRecord, SimResult


def _rec(job_id, arrival, start, finish, solo, gpu_s, gpus=1, oom=0, restarts=0) -> JobRecord:
    return JobRecord(job_id=job_id, workload="resnet50", batch_size=32, gpus=gpus, arrival_s=arrival,
                     start_s=start, finish_s=finish, solo_duration_s=solo, gpu_seconds=gpu_s,
                     oom_failures=oom, restarts=restarts)


# Timeline: 0 % on [0,10), 50 % on [10,30), 100 % on [30,40), 0 % on [40,50]; end 50.
# Integral = 0*10 + 50*20 + 100*10 + 0*10 = 2000 %·s; / 50 s = 40 %.
TIMELINE = [(0.0, 0.0), (10.0, 50.0), (30.0, 100.0), (40.0, 0.0)]


def synthetic_result(policy="slot", timeline=TIMELINE, end_s=50.0) -> SimResult:
    records = [
        # A: waits 10, runs 30; JCT 40, solo 20 -> slowdown 2.0
        _rec("A", 0.0, 10.0, 40.0, 20.0, 30.0),
        # B: waits 25, JCT 45, solo 10 -> slowdown 4.5; one OOM, one restart; 2 GPUs x 20 s
        _rec("B", 5.0, 30.0, 50.0, 10.0, 40.0, gpus=2, oom=1, restarts=1),
        # C: arrives at 20 and never starts
        _rec("C", 20.0, None, None, 15.0, 0.0),
    ]
    return SimResult(policy=policy, n_gpus=2, gpu_types={"v100-16gb": 2}, records=records,
                     util_timeline=list(timeline), end_s=end_s, params={"seed": 0})


def test_time_weighted_util_of_a_step_function():
    assert util_integral(TIMELINE, 50.0) == pytest.approx(2000.0)
    assert time_weighted_util(TIMELINE, 50.0) == pytest.approx(40.0)
    # Cut at 35: 0*10 + 50*20 + 100*5 = 1500 over 35.
    assert time_weighted_util(TIMELINE, 35.0) == pytest.approx(1500.0 / 35.0)
    # A timeline that starts late counts as idle before its first point: 80 % on [5,10] of 10 s -> 40 %.
    assert time_weighted_util([(5.0, 80.0)], 10.0) == pytest.approx(40.0)
    # Two points at the same instant: the later one holds (zero-width step adds nothing).
    assert time_weighted_util([(0.0, 10.0), (0.0, 30.0)], 4.0) == pytest.approx(30.0)
    assert time_weighted_util(TIMELINE, 0.0) is None
    assert time_weighted_util([], 10.0) == 0.0


def test_summarize_hand_checked():
    s = summarize(synthetic_result())
    assert s["policy"] == "slot"
    assert s["gpu_util_pct"] == pytest.approx(40.0)
    # busy period (no recorded busy_intervals: from the records): A [0,40], B [5,50], C [20,end 50]
    # cover [0,50], the whole run -> the same 40 %
    assert s["gpu_util_busy_pct"] == pytest.approx(40.0)
    assert s["makespan_s"] == pytest.approx(50.0)            # end 50 - first arrival 0
    assert (s["jobs"], s["jobs_finished"], s["jobs_unfinished"], s["jobs_never_started"]) == (3, 2, 1, 1)
    # JCTs 40, 45: mean 42.5; p95 = 40 + 0.95 * 5; p99 = 40 + 0.99 * 5
    assert s["jct_mean_s"] == pytest.approx(42.5)
    assert s["jct_p50_s"] == pytest.approx(42.5)
    assert s["jct_p95_s"] == pytest.approx(44.75)
    assert s["jct_p99_s"] == pytest.approx(44.95)
    # queueing delays 10, 25 (C never started: not counted)
    assert s["queue_delay_mean_s"] == pytest.approx(17.5)
    assert s["queue_delay_p95_s"] == pytest.approx(10 + 0.95 * 15)
    # slowdowns 2.0, 4.5
    assert s["slowdown_mean"] == pytest.approx(3.25)
    assert s["slowdown_p95"] == pytest.approx(2.0 + 0.95 * 2.5)
    assert s["oom_failures"] == 1 and s["restarts"] == 1
    assert s["gpu_hours"] == pytest.approx(70.0 / 3600.0)
    json.dumps(s)  # JSON-ready: plain floats and ints


# Two jobs with nothing queued or running between them: A arrives at 10 and runs 10..20 (the
# cluster 50 % busy), nothing on 20..40 (0 %), B arrives at 40 and runs 40..50 (100 %); end 50.
GAP_TIMELINE = [(0.0, 0.0), (10.0, 50.0), (20.0, 0.0), (40.0, 100.0), (50.0, 0.0)]


def gap_result(busy_intervals=()):
    records = [_rec("A", 10.0, 10.0, 20.0, 10.0, 10.0), _rec("B", 40.0, 40.0, 50.0, 10.0, 10.0)]
    return SimResult("slot", 1, {"t4": 1}, records, list(GAP_TIMELINE), 50.0, {},
                     busy_intervals=list(busy_intervals))


def test_busy_util_leaves_out_idle_stretches_and_the_time_before_the_first_arrival():
    # integral 50*10 + 100*10 = 1500 %·s; busy period [10,20] + [40,50] = 20 s -> 75 %
    # (over [0, 50]: 1500 / 50 = 30 %)
    for res in (gap_result(), gap_result([(10.0, 20.0), (40.0, 50.0)])):
        s = summarize(res)
        assert busy_periods(res) == [(10.0, 20.0), (40.0, 50.0)]
        assert s["gpu_util_busy_pct"] == pytest.approx(75.0)
        assert s["gpu_util_pct"] == pytest.approx(30.0)
    # the recorded intervals win over the records: a job waiting on 20..40 (queued, GPUs idle)
    # makes that stretch busy -> 1500 / 40 = 37.5 %
    assert summarize(gap_result([(10.0, 50.0)]))["gpu_util_busy_pct"] == pytest.approx(37.5)
    # clipped to [first arrival, end_s]; overlapping and touching intervals merge
    res = gap_result([(0.0, 15.0), (12.0, 20.0), (40.0, 45.0), (45.0, 80.0)])
    assert busy_periods(res) == [(10.0, 20.0), (40.0, 50.0)]
    assert summarize(res)["gpu_util_busy_pct"] == pytest.approx(75.0)
    # no job at all: no busy period
    assert summarize(SimResult("x", 1, {"t4": 1}, [], [(0.0, 0.0)], 0.0, {}))["gpu_util_busy_pct"] is None


def test_percentiles_interpolate_linearly():
    # JCTs 1..5 (arrival 0, finish k): p50 = 3, p95 at position 0.95*4 = 3.8 -> 4.8, p99 -> 4.96
    recs = [_rec(str(k), 0.0, 0.0, float(k), float(k), float(k)) for k in range(1, 6)]
    r = SimResult("x", 1, {"t4": 1}, recs, [(0.0, 100.0)], 5.0, {})
    s = summarize(r)
    assert (s["jct_p50_s"], s["jct_p95_s"], s["jct_p99_s"]) == pytest.approx((3.0, 4.8, 4.96))
    assert s["slowdown_mean"] == pytest.approx(1.0)
    assert s["queue_delay_mean_s"] == 0.0


def test_makespan_counts_from_the_first_arrival():
    recs = [_rec("late", 100.0, 100.0, 160.0, 60.0, 60.0)]
    s = summarize(SimResult("x", 1, {"t4": 1}, recs, [(0.0, 0.0), (100.0, 100.0), (160.0, 0.0)], 160.0, {}))
    assert s["makespan_s"] == pytest.approx(60.0)
    # utilization is still over [0, end]: 100 % for 60 of 160 s
    assert s["gpu_util_pct"] == pytest.approx(37.5)


def test_nothing_finished_gives_none_not_zero():
    recs = [_rec("A", 0.0, None, None, 10.0, 0.0)]
    s = summarize(SimResult("x", 1, {"t4": 1}, recs, [(0.0, 0.0)], 10.0, {}))
    for key in ("jct_mean_s", "jct_p50_s", "jct_p99_s", "queue_delay_mean_s", "slowdown_mean"):
        assert s[key] is None
    assert s["jobs_finished"] == 0 and s["jobs_never_started"] == 1


def test_zero_solo_duration_is_left_out_of_slowdown():
    recs = [_rec("A", 0.0, 0.0, 10.0, 0.0, 10.0), _rec("B", 0.0, 0.0, 10.0, 5.0, 10.0)]
    s = summarize(SimResult("x", 2, {"t4": 2}, recs, [(0.0, 50.0)], 10.0, {}))
    assert s["slowdown_mean"] == pytest.approx(2.0)


def test_binned_util_is_exact_and_preserves_the_mean():
    starts, means = binned_util(TIMELINE, 50.0, 5)
    assert starts == pytest.approx([0, 10, 20, 30, 40])
    assert means == pytest.approx([0.0, 50.0, 50.0, 100.0, 0.0])
    # Two bins: [0,25): (0*10 + 50*15)/25 = 30; [25,50]: (50*5 + 100*10 + 0*10)/25 = 50
    _, means = binned_util(TIMELINE, 50.0, 2)
    assert means == pytest.approx([30.0, 50.0])
    # Bins that split steps unevenly still average to the whole-run utilization.
    _, means = binned_util(TIMELINE, 50.0, 7)
    assert sum(means) / 7 == pytest.approx(40.0)
    assert binned_util([], 50.0, 4) == ([], [])


def test_change_signs():
    assert change_pct(60.0, 40.0) == pytest.approx(50.0)     # utilization up by half
    assert change_pct(80.0, 100.0) == pytest.approx(-20.0)   # makespan 20 % shorter
    assert change_pct(1.0, 0.0) is None
    assert change_pct(None, 1.0) is None
    assert change_pct(1.0, math.nan) is None


def test_compare_against_slot():
    slot = summarize(synthetic_result("slot"))
    # same jobs, a busier timeline: 60 % over the whole run -> +50 % vs 40 %
    busy = summarize(synthetic_result("gpucast", timeline=[(0.0, 60.0)]))
    rows = compare([slot, busy], baseline="slot")
    assert [r["policy"] for r in rows] == ["slot", "gpucast"]
    assert rows[0]["gpu_util_pct"] == pytest.approx(0.0)
    assert rows[1]["gpu_util_pct"] == pytest.approx(50.0)
    assert rows[1]["makespan_s"] == pytest.approx(0.0)
    assert rows[1]["gpu_util_busy_pct"] == pytest.approx(50.0)   # busy period [0,50] too: 60 vs 40
    line = change_line(rows[1])
    assert line.startswith("util busy +50.0%, util queued +50.0%, util +50.0%") and line.endswith("vs slot")
    assert compare([busy], baseline="slot") == []


def test_change_line_skips_missing_values():
    line = change_line({"vs": "slot", "gpu_util_pct": None, "makespan_s": -23.7, "jct_mean_s": None,
                        "jct_p99_s": None, "queue_delay_mean_s": 10.0})
    assert line == "makespan -23.7%, queue delay +10.0% vs slot"
    assert change_line({"vs": "slot"}) == "no comparison with slot"


def test_queued_util_counts_only_the_time_some_job_waits():
    # A runs from its arrival at 0; B arrives at 10 and waits until 20; D arrives at 30 and waits
    # until 35; the cluster is 50 % busy on [0,20), 100 % on [20,40), idle after; end 50.
    records = [_rec("A", 0.0, 0.0, 40.0, 40.0, 40.0), _rec("B", 10.0, 20.0, 40.0, 20.0, 20.0),
               _rec("D", 30.0, 35.0, 50.0, 15.0, 15.0)]
    res = SimResult("slot", 1, {"t4": 1}, records, [(0.0, 50.0), (20.0, 100.0), (40.0, 0.0)], 50.0, {})
    assert queued_periods(res) == [(10.0, 20.0), (30.0, 35.0)]
    # (50 % x 10 s + 100 % x 5 s) / 15 s
    assert summarize(res)["gpu_util_queued_pct"] == pytest.approx(1000.0 / 15.0)
    # nobody waits: no queued period
    alone = SimResult("slot", 1, {"t4": 1}, records[:1], [(0.0, 50.0)], 40.0, {})
    assert summarize(alone)["gpu_util_queued_pct"] is None
