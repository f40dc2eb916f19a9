"""The learned models (gpucast.learn.models) and their features (gpucast.learn.features) on a
synthetic fixture (named so: targets made by a known formula), and the features of real traces."""

from __future__ import annotations

import numpy as np
import pytest

from gpucast.learn.models import HybridResidual, ReferenceRegressor


def test_reference_regressor_learns_a_monotone_target_from_synthetic_features():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (400, 3))
    util = 100 / (1 + np.exp(-(X[:, 0] - 5)))  # synthetic: utilization rises with feature 0 only
    m = ReferenceRegressor("util_pct").fit(X[:300], util[:300])
    pred = m.predict(X[300:])
    assert np.mean(np.abs(pred - util[300:])) < 5
    assert pred.min() >= 0 and pred.max() <= 100


def test_hybrid_corrects_the_physics_where_it_is_biased_and_keeps_it_where_right():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (400, 2))
    truth = np.exp(rng.uniform(-3, 0, 400))
    physics = truth * np.where(X[:, 0] > 0.5, 2.0, 1.0)  # synthetic: physics 2x slow when feature 0 > 0.5
    m = HybridResidual("step_time_s").fit(X[:300], physics[:300], truth[:300])
    pred = m.predict(X[300:], physics[300:])
    assert np.median(np.abs(np.log(pred / truth[300:]))) < 0.1


def test_reference_features_count_the_graphs_layers():
    from gpucast.api import trace
    from gpucast.hardware import get_gpu
    from gpucast.learn.features import REFERENCE_NAMES, reference_features
    from gpucast.learn.rows import from_records

    row, = from_records([{"model": "mlp:32:64;64;10", "batch_size": 16, "gpu": "t4", "util_pct": 50}])
    tr = trace(row.job)
    f = dict(zip(REFERENCE_NAMES, reference_features(tr, row.job, get_gpu("t4"))))
    assert (f["linear_layers"], f["activation_layers"], f["conv_layers"]) == (3, 2, 0)
    assert f["log_batch_size"] == pytest.approx(np.log(16))
    assert f["log_parameters"] == pytest.approx(np.log1p(32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10))
