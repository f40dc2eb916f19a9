"""Error metrics of predictions against measurements, and the 'predict the mean' floor.

* utilization RMSLE: ``sqrt(mean((ln(1 + pred/100) - ln(1 + meas/100))^2))`` (the reference
  work's metric on utilization percentages), MAE in points, Spearman rank correlation;
* memory MAPE: ``mean(|pred - meas| / meas)``;
* step-time MdAPE: ``median(|pred - meas| / meas)`` and the worst ratio per group.

The floor predicts, for every held-out row, the mean of the rows it was fitted on.
"""

from __future__ import annotations

import numpy as np


def _rank(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    # ties get their mean rank
    vals, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=r)
    return (sums / counts)[inv]


def spearman(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    return float(np.corrcoef(_rank(a), _rank(b))[0, 1])


def util_metrics(pred, meas) -> dict:
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    return {"n": len(m), "rmsle": float(np.sqrt(np.mean((np.log1p(p / 100) - np.log1p(m / 100)) ** 2))),
            "mae": float(np.mean(np.abs(p - m))), "spearman": spearman(p, m)}


def mape(pred, meas) -> float:
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.mean(np.abs(p - m) / m))


def mdape(pred, meas) -> float:
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.median(np.abs(p - m) / m))


def worst_ratio(pred, meas) -> float:
    """The largest factor between prediction and measurement (>= 1)."""
    r = np.asarray(pred, float) / np.asarray(meas, float)
    return float(np.max(np.maximum(r, 1 / r)))
