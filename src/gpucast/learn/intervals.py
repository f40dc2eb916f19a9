"""Prediction intervals from held-out residuals (split-conformal), and their coverage.

Residuals are taken in the space the fit uses: ``ln(1 + util/100)`` for utilization, ``ln`` for
memory and step time. For ``n`` held-out residuals the half-width at level ``a`` is the
``ceil((n + 1) a)``-th smallest ``|r|`` (split-conformal prediction, Vovk et al. 2005; Lei et
al., 'Distribution-free predictive inference for regression', JASA 2018): an interval
``pred exp(+-h)`` then covers a new row of the same kind with probability >= ``a`` when the
rows are exchangeable. With fewer than ``ceil(1 / (1 - a)) - 1`` residuals no finite half-width
exists and none is given (predictions then keep their constant-corner bands, labelled so).

Held-out rows of *another* group are not exchangeable with a group's own rows, so
:func:`group_coverage` measures coverage honestly: each group's rows are checked against a
half-width computed from the other groups' residuals only.
"""

from __future__ import annotations

import math

import numpy as np

QUANTITIES = ("util_pct", "memory_mib", "step_time_s")


def log_residuals(pred, fitter, idx) -> dict[str, np.ndarray]:
    """Held-out residuals per quantity (NaN where the row has no measurement)."""
    return {"util_pct": np.log1p(pred.util_pct / 100) - np.log1p(fitter.util[idx] / 100),
            "memory_mib": np.log(pred.memory_mib / fitter.memory[idx]),
            "step_time_s": np.log(pred.step_time_s / fitter.step[idx])}


def conformal_halfwidth(residuals: np.ndarray, level: float) -> float | None:
    r = np.sort(np.abs(residuals[~np.isnan(residuals)]))
    k = math.ceil((len(r) + 1) * level)
    if len(r) == 0 or k > len(r):
        return None
    return float(r[k - 1])


def halfwidths(pred, fitter, idx, level: float = 0.8) -> dict[str, dict]:
    """``{quantity: {"halfwidth": h, "rows": n}}`` for each quantity with enough residuals."""
    out = {}
    for q, r in log_residuals(pred, fitter, idx).items():
        h = conformal_halfwidth(r, level)
        if h is not None:
            out[q] = {"halfwidth": h, "rows": int(np.sum(~np.isnan(r)))}
    return out


def interval(quantity: str, value: float, halfwidth: float) -> tuple[float, float]:
    """The interval around a prediction for a log-space half-width."""
    if quantity == "util_pct":
        x = math.log1p(value / 100)
        return (max(0.0, 100 * math.expm1(x - halfwidth)), min(100.0, 100 * math.expm1(x + halfwidth)))
    return (value * math.exp(-halfwidth), value * math.exp(halfwidth))


def group_coverage(residuals: np.ndarray, groups: np.ndarray, level: float = 0.8) -> dict:
    """Share of rows inside an interval whose half-width came from the other groups' residuals."""
    ok = ~np.isnan(residuals)
    inside = total = 0
    per = {}
    for g in dict.fromkeys(groups[ok]):
        mine = ok & (groups == g)
        h = conformal_halfwidth(residuals[ok & (groups != g)], level)
        if h is None:
            continue
        hits = int(np.sum(np.abs(residuals[mine]) <= h))
        per[str(g)] = {"coverage": hits / int(mine.sum()), "rows": int(mine.sum()), "halfwidth": h}
        inside += hits
        total += int(mine.sum())
    return {"coverage": inside / total if total else float("nan"), "rows": total, "per_group": per}
