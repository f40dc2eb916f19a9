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


def summary(pred, fitter, idx) -> dict:
    """The metrics of predictions ``pred`` for rows ``idx`` of a Fitter, per measured quantity:
    ``util`` (n, rmsle, mae, spearman), ``memory`` (n, mape), ``step`` (n, mdape)."""
    out = {}
    mu, mm, ms = fitter.util[idx], fitter.memory[idx], fitter.step[idx]
    ok = ~np.isnan(mu)
    if ok.any():
        out["util"] = util_metrics(pred.util_pct[ok], mu[ok])
    ok = ~np.isnan(mm)
    if ok.any():
        out["memory"] = {"n": int(ok.sum()), "mape": mape(pred.memory_mib[ok], mm[ok])}
    ok = ~np.isnan(ms)
    if ok.any():
        out["step"] = {"n": int(ok.sum()), "mdape": mdape(pred.step_time_s[ok], ms[ok])}
    return out


def summary_line(s: dict) -> str:
    """One line of a summary: 'util MAE 7.2 pts, RMSLE 0.061; memory MAPE 0.6 %; step MdAPE 39 %'."""
    parts = []
    if "util" in s:
        parts.append(f"util MAE {s['util']['mae']:.1f} pts, RMSLE {s['util']['rmsle']:.3f}")
    if "memory" in s:
        parts.append(f"memory MAPE {100 * s['memory']['mape']:.1f} %")
    if "step" in s:
        parts.append(f"step MdAPE {100 * s['step']['mdape']:.0f} %")
    return "; ".join(parts) + f" ({max(v['n'] for v in s.values())} rows)" if parts else "no rows"
