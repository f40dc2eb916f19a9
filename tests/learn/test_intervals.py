"""Split-conformal intervals (gpucast.learn.intervals) on hand-checkable residuals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpucast.learn.intervals import conformal_halfwidth, group_coverage, interval


def test_halfwidth_is_the_ceil_n_plus_one_level_th_smallest_absolute_residual():
    r = np.array([0.1, -0.2, 0.3, -0.4, 0.5, 0.6, -0.7, 0.8, 0.9, -1.0])
    assert conformal_halfwidth(r, 0.8) == pytest.approx(0.9)  # ceil(11 * 0.8) = 9th of 10
    assert conformal_halfwidth(np.array([0.1, np.nan, 0.2, 0.3, 0.4]), 0.8) == pytest.approx(0.4)  # 4 rows: 4th
    assert conformal_halfwidth(np.array([0.1, 0.2, 0.3]), 0.8) is None  # ceil(4 * 0.8) = 4 > 3: none finite


def test_intervals_are_symmetric_in_log_space_and_utilization_stays_in_0_100():
    lo, hi = interval("step_time_s", 2.0, math.log(2))
    assert (lo, hi) == pytest.approx((1.0, 4.0))
    lo, hi = interval("util_pct", 95.0, 0.5)
    assert hi == 100.0 and lo == pytest.approx(100 * math.expm1(math.log1p(0.95) - 0.5))


def test_group_coverage_uses_only_the_other_groups_residuals():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.array(["a", "b", "c", "d", "e"]), 200)
    same = rng.normal(0, 0.1, 1000)
    cov = group_coverage(same, groups, 0.8)
    assert cov["coverage"] == pytest.approx(0.8, abs=0.03)
    # one group twice as wrong as the others: its rows fall outside the others' interval more often
    wider = same.copy()
    wider[groups == "e"] *= 3
    per = group_coverage(wider, groups, 0.8)["per_group"]
    assert per["e"]["coverage"] < 0.5 < per["a"]["coverage"]
