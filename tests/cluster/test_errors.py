"""The simulator's truth error per quantity (gpucast.cluster.errors) and the allocation metric."""

import json

import pytest

from gpucast import cluster
from gpucast.cluster import errors, metrics, timeshare
from gpucast.cluster.engine import Simulator
from gpucast.cluster.policies import make_policy
from gpucast.cluster.truth import Estimate, Profile, Truth

from simhelpers import GB, HandTruth, job, trace


def test_the_measured_error_is_packaged_with_its_provenance():
    d = json.loads(errors.measured_path().read_text())
    assert d["provenance"]["command"] == "benchmarks/measured_error.py"
    assert d["rows"]["util"] > 1000 and d["rows"]["step"] > 50
    m = errors.measured()
    assert (m.util, m.memory, m.step) == (d["sigma"]["util"], d["sigma"]["memory"], d["sigma"]["step"])
    assert "measured" in m.source


def test_error_sigma_forms():
    m = errors.measured()
    assert errors.parse("measured") == m
    assert errors.parse(0.3).as_dict() == {"util": 0.3, "memory": 0.3, "step": 0.3, "source": "given: 0.3"}
    e = errors.parse("util=0.5, step=1")
    assert (e.util, e.memory, e.step) == (0.5, m.memory, 1.0)
    assert errors.parse("0").is_zero
    assert errors.parse("util=0.4").scaled(2).util == pytest.approx(0.8)
    for bad, msg in (("-1", ">= 0"), ("util=-1", ">= 0"), ("speed=1", "expected"), ("util=a", "not a number")):
        with pytest.raises(ValueError, match=msg):
            errors.parse(bad)


def test_a_calibrated_environment_brings_its_own_error():
    class Env:
        label = "mine"
        conformal = (("util_pct", 0.8, 0.25632, 40),)
    e = errors.from_environment(Env())
    assert e.util == pytest.approx(0.2) and e.memory == errors.measured().memory
    assert "mine" in e.source


def _fake(profile, gpu):  # synthetic predictor (no torch)
    return Estimate(50.0, (40.0, 60.0), 4e9, (3e9, 5e9), 0.1, (0.09, 0.11), 0.05, 2.0, 0.3)


def test_each_quantity_gets_its_own_sigma_and_intervals_to_match():
    t = Truth(error_sigma="util=0,memory=0.5,step=0", predictor=_fake, use_gavel=False, measurements_dir=None)
    b = t.behaviour(Profile.from_zoo("mlp-small", 64), "a100-80gb")
    assert b.util_pct == 50.0 and b.step_time_s == 0.1 and b.memory_bytes != 4e9
    o = t.observe(Profile.from_zoo("mlp-small", 64), "a100-80gb", "prediction")
    assert o.util_interval == pytest.approx((50.0, 50.0))
    lo, hi = o.memory_interval
    assert lo == pytest.approx(4e9 / 1.8977, rel=1e-3) and hi == pytest.approx(4e9 * 1.8977, rel=1e-3)


def test_utilization_error_stays_between_0_and_100():
    t = Truth(error_sigma=3.0, predictor=_fake, use_gavel=False, measurements_dir=None)
    us = [t.behaviour(Profile.from_zoo("mlp-small", b), "a100-80gb").util_pct for b in range(1, 200)]
    assert all(0 < u < 100 for u in us) and min(us) < 10 and max(us) > 90


def test_intervals_cover_about_80_percent_of_the_truths():
    t = Truth(error_sigma=0.5, predictor=_fake, use_gavel=False, measurements_dir=None)
    hits = 0
    n = 400
    for b in range(1, n + 1):
        p = Profile.from_zoo("mlp-small", b)
        lo, hi = t.observe(p, "a100-80gb", "prediction").util_interval
        hits += lo <= t.behaviour(p, "a100-80gb").util_pct <= hi
    assert 0.72 <= hits / n <= 0.88


def test_allocated_utilization_is_the_busy_share_of_gpus_holding_jobs():
    spec = cluster.ClusterSpec.homogeneous("v100-16gb", 2)
    res = Simulator(trace(job("a", 0, steps=100)), spec, make_policy("slot"),
                    HandTruth({"w": (60.0, 2 * GB, 1.0, 2 * GB)})).run()
    s = metrics.summarize(res)
    assert s["gpu_util_pct"] == pytest.approx(30.0)
    assert s["gpu_util_allocated_pct"] == pytest.approx(60.0)
    assert s["gpus_allocated_pct"] == pytest.approx(50.0)


def test_a_gang_job_counts_its_kernels_at_its_slowest_gpus_pace():
    # big (2 GPUs) alone on GPU 1, sharing GPU 0 with small: it runs at GPU 0's pace everywhere
    table = {"w": (50.0, 2 * GB, 1.0, 2 * GB), "small": (50.0, 2 * GB, 1.0, 2 * GB)}
    spec = cluster.ClusterSpec.homogeneous("v100-16gb", 2)
    tr = trace(job("big", 0, steps=1000, gpus=2), job("s", 1, workload="small", steps=10))
    res = Simulator(tr, spec, make_policy("packing"), HandTruth(table)).run()
    tl = timeshare.JobTimeline(1.0, 0.5, 1.0, 0.5)
    sd = timeshare.slowdowns([tl, tl])[0]
    t, u = res.util_timeline[1]
    assert t == 1.0
    # GPU 0: both at 50 / sd; GPU 1: big's kernels at its real (slower) pace, 50 / sd, not 50
    assert u == pytest.approx((2 * 50 / sd + 50 / sd) / 2)
    # small leaves: big runs alone on both GPUs at 50 %
    assert res.util_timeline[2][1] == pytest.approx(50.0)
