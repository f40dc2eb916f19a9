"""The learned models, scikit-learn style (constructor takes parameters, ``fit`` learns,
``predict`` answers), both gradient-boosted trees (LightGBM):

* :class:`ReferenceRegressor`: the reference work's approach, graph features
  (:func:`~gpucast.learn.features.reference_features`) straight to the target;
* :class:`HybridResidual`: gpucast's physics outputs (:func:`~gpucast.learn.features.physics_features`)
  and the graph features to the residual of the physics prediction, in log space; the answer is
  the physics prediction times ``exp(residual)``, so where the trees know nothing the physics
  stands.

Targets are in the fit's log spaces: ``ln(1 + util/100)`` for utilization, ``ln`` for memory MiB
and step seconds (:func:`to_target`/:func:`from_target`). Trees are small and regularised for
data sets of tens to thousands of rows (:data:`LGBM_PARAMS`); lightgbm is imported on first fit.
"""

from __future__ import annotations

import numpy as np

# Small, regularised trees: the sets are 78-3,000 rows. min_data_in_leaf scales with the rows.
LGBM_PARAMS = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 15, "feature_fraction": 0.9,
               "bagging_fraction": 0.9, "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1, "seed": 0,
               "deterministic": True, "num_threads": 2, "min_data_in_bin": 1}
ROUNDS = 300


def to_target(quantity: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, float)
    return np.log1p(values / 100) if quantity == "util_pct" else np.log(values)


def from_target(quantity: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, float)
    return np.clip(100 * np.expm1(values), 0, 100) if quantity == "util_pct" else np.exp(values)


def _booster(X: np.ndarray, y: np.ndarray, rounds: int, params: dict):
    import lightgbm as lgb

    p = {**LGBM_PARAMS, "min_data_in_leaf": max(3, len(y) // 50), **params}
    return lgb.train(p, lgb.Dataset(X, y, params={"verbose": -1}), num_boost_round=rounds)


class ReferenceRegressor:
    """Graph features to the target quantity (the reference work's learned predictor)."""

    def __init__(self, quantity: str = "util_pct", rounds: int = ROUNDS, **params) -> None:
        self.quantity, self.rounds, self.params = quantity, rounds, params
        self.booster = None
        self.rows = 0

    def fit(self, X: np.ndarray, y: np.ndarray) -> "ReferenceRegressor":
        self.booster = _booster(np.asarray(X, float), to_target(self.quantity, y), self.rounds, self.params)
        self.rows = len(y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return from_target(self.quantity, self.booster.predict(np.asarray(X, float)))


class HybridResidual:
    """Physics (and graph) features to the physics prediction's log residual."""

    def __init__(self, quantity: str = "util_pct", rounds: int = ROUNDS, **params) -> None:
        self.quantity, self.rounds, self.params = quantity, rounds, params
        self.booster = None
        self.rows = 0

    def fit(self, X: np.ndarray, physics: np.ndarray, y: np.ndarray) -> "HybridResidual":
        resid = to_target(self.quantity, y) - to_target(self.quantity, physics)
        self.booster = _booster(np.asarray(X, float), resid, self.rounds, self.params)
        self.rows = len(y)
        return self

    def predict(self, X: np.ndarray, physics: np.ndarray) -> np.ndarray:
        return from_target(self.quantity, to_target(self.quantity, physics) + self.booster.predict(np.asarray(X, float)))

    def save(self, path) -> None:
        self.booster.save_model(str(path))
