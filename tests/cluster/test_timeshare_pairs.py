"""Fitting and scoring the co-location model on measured pairs of real scripts
(gpucast.cluster.timeshare.pairs), on two families of Lucid's RTX 3090 set (data/measured/lucid-rtx3090)."""

from __future__ import annotations

import numpy as np
import pytest

from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import pairs as tp

from tests.measured_data import LUCID as DATA

FAMILIES = {"ResNet18", "EfficientNet", "TD3"}


@pytest.fixture(scope="module")
def small():
    solos, pairs = tp.from_lucid(DATA)
    assert len(solos) == 35 and len(pairs) == 335
    solos = [s for s in solos if s.family in FAMILIES]
    pairs = [p for p in pairs if p.a.family in FAMILIES and p.b.family in FAMILIES]
    return solos, pairs, tp.timelines(solos)


def test_anchored_timelines_hold_the_gpu_no_longer_than_nvml_reads(small):
    solos, _pairs, tls = small
    for s in solos:
        t = tls[s.key]
        assert t.step_s == s.step_s
        assert 0.0 <= t.util <= s.util_pct / 100.0 + 1e-9
        assert t.reported == pytest.approx(s.util_pct / 100.0, abs=0.05)
    # small CIFAR batches launch many short kernels: a counter with a coarse tick would read them
    # far busier than they are (the packaged tick, fitted on solo utilization, is under a
    # microsecond: there the two agree within a few points)
    from gpucast.estimate.environment import Environment

    coarse = tp.timelines([s for s in solos if s.key == "ResNet18 b32"],
                          Environment.default().replace(nvml_tick_s=50e-6))["ResNet18 b32"]
    assert coarse.util < 0.6 * coarse.reported
    assert tls["ResNet18 b32"].util > 0.9 * tls["ResNet18 b32"].reported


def test_the_fit_beats_todays_model_and_a_constant_on_its_pairs(small):
    _solos, pairs, tls = small
    y = np.array([[p.speed_a for p in pairs], [p.speed_b for p in pairs]])
    k = ~np.isnan(y)            # TD3's own speeds are not measured
    assert k.sum() < y.size
    c = tp.fit(pairs, tls)
    fitted = np.abs(tp.predict(pairs, tls, c)[0] - y)[k].mean()
    today = np.abs(tp.predict(pairs, tp.nvml_as_busy([p.a for p in pairs] + [p.b for p in pairs], tls),
                              timeshare.FITTED)[0] - y)[k].mean()
    assert fitted < 0.8 * np.abs(y[k].mean() - y[k]).mean() and fitted < 0.5 * today


def test_held_out_family_report_names_every_family(small):
    _solos, pairs, tls = small
    rep = tp.holdout_report(pairs, tls)
    assert {f["held_out"] for f in rep["folds"]} == FAMILIES
    assert rep["pairs"] == sum(f["pairs"] for f in rep["folds"]) and 0.0 <= rep["worth"] <= 1.0
    assert rep["mae"] < rep["today_mae"]


def test_decisions_worth_by_hand():
    speeds = np.array([[0.9, 0.4, 0.7], [0.8, 0.5, 0.2]])      # gains 0.7, -0.1, -0.1
    assert tp.decisions_worth(speeds, speeds) == pytest.approx(1.0)     # the oracle's own choice
    share_all = np.ones_like(speeds)
    assert tp.decisions_worth(share_all, speeds) == pytest.approx(0.5 / 0.7)
    assert tp.decisions_worth(np.zeros_like(speeds), speeds) == 0.0


def test_predictions_alone_held_out_by_family(small):
    # each job's timeline from gpucast's prediction only (no measured step or utilization), the
    # constants fitted on the other families' pairs with such timelines, beside the constants
    # fitted on the same pairs' anchored timelines
    solos, pairs, tls = small
    ptl = tp.predicted_timelines(solos)
    assert set(ptl) == {s.key for s in solos}
    for s in solos:
        t = ptl[s.key]
        assert 0.0 < t.util <= t.reported <= 1.0 and t.step_s > 0
    # TD3's measured step (one learn() call of stable-baselines3) is not a training step: the
    # prediction knows nothing of it
    td3 = next(s for s in solos if s.family == "TD3")
    assert ptl[td3.key].step_s != pytest.approx(td3.step_s, rel=0.5)
    rep = tp.holdout_report(pairs, ptl, today_tls=ptl, other_tls=tls)
    assert {f["held_out"] for f in rep["folds"]} == FAMILIES
    assert len(rep["rows"]) == rep["speeds"] < 2 * rep["pairs"]
    assert all(r["family"] != "TD3" and np.isfinite(r["measured"]) for r in rep["rows"])
    assert all(0.0 < r["predicted"] <= 1.0 and 0.0 <= r["held"] <= 1.0 for r in rep["rows"])
    assert np.isfinite(rep["other_mae"]) and 0.0 <= rep["worth"] <= 1.0
    assert rep["mae"] < rep["today_mae"]


def test_td3_speeds_are_not_taken_for_measurements():
    # every TD3 entry of pairs.csv reads 1.000, beside idle and saturated neighbours alike: the
    # artifact's value for a speed it did not measure; its neighbours' speeds vary and are kept
    _solos, pairs = tp.from_lucid(DATA)
    td3 = [(p.speed_a if p.a.family == "TD3" else p.speed_b) for p in pairs if "TD3" in (p.a.family, p.b.family)
           and p.a.family != p.b.family]
    others = [(p.speed_b if p.a.family == "TD3" else p.speed_a) for p in pairs if "TD3" in (p.a.family, p.b.family)
              and p.a.family != p.b.family]
    assert td3 and all(np.isnan(td3))
    assert not np.isnan(others).any() and np.std(others) > 0.03


def test_relief_is_fitted_and_beats_the_interleaving_alone_on_light_neighbours(small):
    # the relief of a light neighbour (Constants.relief), fitted with the other constants on the
    # predicted timelines: it must take the pessimism off heavy jobs beside light ones (the bias the
    # interleaving alone has on these families' pairs), and fit at least as well as the constants
    # without it on the same pairs
    solos, pairs, _tls = small
    ptl = tp.predicted_timelines(solos)
    y = np.array([[p.speed_a for p in pairs], [p.speed_b for p in pairs]])
    k = ~np.isnan(y)
    with_relief = tp.fit(pairs, ptl)
    plain = tp.fit(pairs, ptl, names=tp.PLAIN_NAMES)
    assert with_relief.relief > 0.0 and plain.relief == 0.0
    err = lambda c: tp.predict(pairs, ptl, c)[0] - y        # noqa: E731
    assert np.abs(err(with_relief))[k].mean() <= np.abs(err(plain))[k].mean() + 1e-6
    assert abs(err(with_relief)[k].mean()) < abs(err(plain)[k].mean())
