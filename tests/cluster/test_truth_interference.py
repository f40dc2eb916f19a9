"""Truth (measured where Gavel measured, else prediction times a seeded error) and the
interference model fitted on Gavel's real V100 pair throughputs."""

from __future__ import annotations

import math

import pytest

from gpucast.cluster import gavel, interference
from gpucast.cluster.truth import MEASURED_FIT_FRACTION, Estimate, Profile, Truth


def fake(profile, gpu):  # synthetic predictor: fixed numbers, no torch
    return Estimate(80.0, (70.0, 90.0), 40e9, (30e9, 50e9), 0.2, (0.1, 0.3))


def test_pair_file_layout_own_throughput_first():
    pairs = gavel.pair_throughputs(gpu="v100-16gb")
    solo = gavel.solo_throughputs()
    a, b = "A3C", "ResNet-18 (batch size 16)"
    ta, tb = pairs[(a, b)]
    assert ta < solo[(a, 1, "v100-16gb")] and tb == pytest.approx(solo[(b, 1, "v100-16gb")])
    assert pairs[(b, a)] == pytest.approx((tb, ta), rel=0.05)     # the same pair seen from B


def test_zero_sigma_truth_is_the_prediction_and_obs_hide_it():
    t = Truth(error_sigma=0.0, predictor=fake, use_gavel=False, measurements_dir=None)
    p = Profile.from_zoo("mlp-small", 64)
    b = t.behaviour(p, "a100-80gb")
    assert (b.util_pct, b.memory_bytes, b.step_time_s, b.util_source) == (80.0, 40e9, 0.2, "simulated")
    assert t.observe(p, "a100-80gb", "nothing").util_pct is None
    o = t.observe(p, "a100-80gb", "prediction")
    # the prediction's own utilization interval; no memory error, so a memory interval of zero
    # width (the prediction's own memory range has no stated level: gpucast's bound reads 80 %)
    assert o.memory_interval == (40e9, 40e9) and o.util_interval == (70.0, 90.0)


def test_error_model_is_seeded_lognormal():
    p = Profile.from_zoo("mlp-small", 64)
    one = Truth(error_sigma=0.3, seed=1, predictor=fake, use_gavel=False, measurements_dir=None)
    same = Truth(error_sigma=0.3, seed=1, predictor=fake, use_gavel=False, measurements_dir=None)
    other = Truth(error_sigma=0.3, seed=2, predictor=fake, use_gavel=False, measurements_dir=None)
    b1, b2, b3 = (t.behaviour(p, "a100-80gb") for t in (one, same, other))
    assert b1 == b2 and b1 != b3
    assert b1.util_pct <= 100.0
    # many profiles: log ratios have about the asked spread
    logs = [math.log(one.behaviour(Profile.from_zoo("mlp-small", bs), "a100-80gb").step_time_s / 0.2)
            for bs in range(1, 401)]
    sd = math.sqrt(sum(x * x for x in logs) / len(logs))
    assert 0.25 < sd < 0.35 and abs(sum(logs) / len(logs)) < 0.06


def test_gavel_measured_step_time_and_memory_clip():
    t = Truth(error_sigma=0.0, predictor=fake, measurements_dir=None)
    p = Profile.from_gavel("A3C")
    b = t.behaviour(p, "v100-16gb")
    assert b.step_source == "measured:gavel"
    assert b.step_time_s == pytest.approx(1 / gavel.solo_throughputs()[("A3C", 1, "v100-16gb")])
    assert b.memory_bytes == pytest.approx(MEASURED_FIT_FRACTION * 16 * 2**30)   # 40 GB predicted, it ran
    assert t.behaviour(p, "a100-80gb").step_source == "simulated"                 # not measured there
    # a 4-GPU job uses Gavel's scale-factor-4 throughput where it exists
    r4 = gavel.solo_throughputs().get(("ResNet-50 (batch size 64)", 4, "v100-16gb"))
    if r4:
        b4 = t.behaviour(Profile.from_gavel("ResNet-50 (batch size 64)"), "v100-16gb", gpus=4)
        assert b4.step_time_s == pytest.approx(1 / r4)


def test_slowdown_model_shape():
    assert interference.slowdowns([70.0]) == [1.0]
    s = interference.slowdowns([30.0, 50.0])
    assert s == pytest.approx([1 + interference.A * 0.5, 1 + interference.A * 0.3])
    over = interference.slowdowns([80.0, 80.0])
    assert over[0] == pytest.approx(1 + interference.A * 0.8 + interference.B * 0.6)


@pytest.fixture(scope="module")
def report():
    # real gpucast predictions for Gavel's 26 single-GPU job types on the V100 (~20 s, cached)
    return interference.fit_report("v100-16gb")


def test_fit_on_real_gavel_pairs(report):
    assert report["n_pairs"] > 300 and report["n_observations"] == 2 * report["n_pairs"]
    # the shipped constants are this fit (rounded)
    assert report["a"] == pytest.approx(interference.A, abs=0.01)
    assert report["b"] == pytest.approx(interference.B, abs=0.01)
    assert report["shipped"]["rmse"] == pytest.approx(report["rmse"], rel=0.01)
    # least squares through the origin cannot be worse than the shipped (rounded) coefficients
    assert report["rmse"] <= report["shipped"]["rmse"] + 1e-12
    assert report["baseline_mean_slowdown"] > 1.0 and math.isfinite(report["mape_pct"])


def test_every_policy_runs_the_bundled_trace(report):
    """End to end on the first 200 jobs of the bundled Gavel trace with real predictions
    (cached by the fit above): every job ends, finishes after it arrives, no policy crashes."""
    from gpucast import cluster

    spec = cluster.ClusterSpec.homogeneous("v100-16gb", 32)
    tr = cluster.load_trace("gavel", limit=200)
    for name in cluster.POLICIES:
        res = cluster.simulate(tr, spec, name, seed=0)
        assert len(res.records) == 200 and res.policy == name
        done = [r for r in res.records if r.finish_s is not None]
        assert len(done) + sum(r.oom_failures > 0 and r.finish_s is None for r in res.records) == 200
        assert all(r.finish_s >= r.start_s >= r.arrival_s for r in done)
        assert res.end_s == max(r.finish_s for r in done)
        assert res.util_timeline[0][0] == 0.0 and all(0 <= u <= 100 for _, u in res.util_timeline)
