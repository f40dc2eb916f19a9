"""Calibrate an Environment to a cluster from a few of its measured jobs (``gpucast calibrate``).

The fit is :meth:`gpucast.learn.fit.Fitter.fit`: log-space least squares over the rows' measured
quantities with every fitted constant held by its prior (the constants in force, by default
:meth:`Environment.default`), so three rows move only what they say something about and a
hundred rows do not overfit. Which constants move is decided by the rows (:func:`choose_params`):
a constant whose change by one prior sigma changes no row's prediction by 1 % is left alone,
and a per-GPU kernel factor exists only for GPU types the rows have step times or utilization on.

What the caller gets (:class:`Calibration`): the environment, the error on the rows before and
after, and a cross-validated estimate: the rows are split by group (whole architectures or job
types) when they have several, else one row at a time, each part predicted by a fit on the
others. The same split chooses how hard the priors hold (``prior_weight``, or no fit at all):
rows whose groups are each wrong for reasons of their own do not transfer, and the split shows
it. The held-out residuals of that split also give the environment's split-conformal 80 %
intervals (:mod:`gpucast.learn.intervals`), stored in the environment (``Environment.conformal``).

Not done: fitting the EstimatorConfig's GPU-physics constants (the kernel factors stand for a
cluster's deviation from them), co-located runs, multi-GPU jobs' communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gpucast.estimate.environment import PER_GPU, Environment
from gpucast.learn import intervals
from gpucast.learn.fit import SIGMA_MEMORY, SIGMA_STEP, SIGMA_UTIL, Fitter, Predicted
from gpucast.learn.metrics import summary

# A constant moves only if one prior sigma of it changes some row's prediction by this much (log).
SENSITIVITY_LOG = 0.01
# Most cross-validation parts (groups are merged round-robin beyond it).
MAX_FOLDS = 8
LEVEL = 0.8
# Prior weights the cross-validation chooses from (1: the stated spreads; larger: stiffer), and
# the "no fit" choice (the base constants kept).
PRIOR_WEIGHTS = (1.0, 4.0, 16.0)
NO_FIT = float("inf")


@dataclass
class Calibration:
    env: Environment
    base: Environment
    params: tuple[str, ...]
    rows: int
    groups: list[str]
    gpus: list[str]
    measured: dict[str, int]
    before: dict
    after: dict
    cross_validated: dict | None
    cv_unit: str
    held_out: Predicted | None = None
    conformal: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)


def choose_params(fitter: Fitter, idx: np.ndarray, base: Environment) -> tuple[str, ...]:
    """The constants the rows ``idx`` are sensitive to (see the module docstring)."""
    gpus = sorted({fitter.rows[i].gpu for i in idx
                   if fitter.rows[i].step_time_s is not None or fitter.rows[i].util_pct is not None})
    candidates = Environment.fittable() + [f"{PER_GPU}:{g}" for g in gpus]
    ref = fitter.predict(base, idx)
    out = []
    for name in candidates:
        sig = Environment.prior_sigma(name)
        moved = fitter.predict(base.with_params({name: base.param(name) * float(np.exp(sig))}), idx)
        change = max(_max_abs(np.log1p(moved.util_pct / 100) - np.log1p(ref.util_pct / 100), fitter.util[idx]),
                     _max_abs(np.log(moved.memory_mib / ref.memory_mib), fitter.memory[idx]),
                     _max_abs(np.log(moved.step_time_s / ref.step_time_s), fitter.step[idx]))
        if change >= SENSITIVITY_LOG:
            out.append(name)
    return tuple(out)


def _max_abs(delta: np.ndarray, measured: np.ndarray) -> float:
    ok = ~np.isnan(measured)
    return float(np.max(np.abs(delta[ok]))) if ok.any() else 0.0


def folds(groups: np.ndarray) -> tuple[list[np.ndarray], str]:
    """Held-out parts: whole groups when there are several (merged to at most MAX_FOLDS), else
    single rows (at most MAX_FOLDS of them, round-robin)."""
    names = list(dict.fromkeys(groups))
    if len(names) >= 2:
        parts = [np.flatnonzero(np.isin(groups, names[k::MAX_FOLDS])) for k in range(min(MAX_FOLDS, len(names)))]
        return parts, "group"
    n = len(groups)
    if n < 2:
        return [], "none"
    return [np.arange(k, n, min(MAX_FOLDS, n)) for k in range(min(MAX_FOLDS, n))], "row"


def calibrate(fitter: Fitter, idx: np.ndarray | None = None, base: Environment | None = None,
              params: tuple[str, ...] | None = None, cross_validate: bool = True, label: str = "calibrated",
              progress: Callable[[str], None] | None = None, max_nfev: int = 40,
              prior_weight: float | None = None) -> Calibration:
    """Fit an environment on rows ``idx`` of ``fitter`` (all by default), starting from ``base``.

    ``prior_weight`` scales the priors' pull (1: the constants' stated spreads). ``None`` picks it
    by the cross-validation, from :data:`PRIOR_WEIGHTS` and "no fit" (the base kept as it is):
    rows that do not transfer between their groups (each group wrong for its own reasons) then
    leave the constants near the base instead of moving them to fit one group's quirks. The
    cross-validated error reported is that of the chosen weight (slightly optimistic: it was
    also the selection criterion)."""
    idx = np.arange(len(fitter.rows)) if idx is None else np.asarray(idx)
    if len(idx) == 0:
        raise ValueError("calibrate needs at least one measured row")
    base = base or Environment.default()
    say = progress or (lambda s: None)
    say("choosing the constants the rows say something about")
    params = params if params is not None else choose_params(fitter, idx, base)
    before = summary(fitter.predict(base, idx), fitter, idx)
    cv, unit, held, conformal = None, "none", None, {}
    parts, unit = folds(fitter.groups[idx]) if cross_validate else ([], "none")
    chosen = 1.0 if prior_weight is None else prior_weight
    if parts and params:
        weights = [prior_weight] if prior_weight is not None else list(PRIOR_WEIGHTS) + [NO_FIT]
        tried = {}
        for w in weights:
            say(f"cross-validation, prior weight {w:g}")
            h = _held_out(fitter, idx, parts, base, params if w != NO_FIT else (), max_nfev, w, say)
            tried[w] = (_cv_cost(h, fitter, idx), h)
        chosen = min(tried, key=lambda w: tried[w][0])
        held = tried[chosen][1]
    elif parts:
        held = _held_out(fitter, idx, parts, base, (), max_nfev, 1.0, say)
    if held is not None:
        cv = summary(held, fitter, idx)
        conformal = intervals.halfwidths(held, fitter, idx, LEVEL)
    if params and chosen != NO_FIT:
        say(f"fitting {len(params)} constants on {len(idx)} rows")
        env, info = fitter.fit(idx, params, priors=base, max_nfev=max_nfev, prior_weight=chosen)
    else:
        env, info = base, {"rows": int(len(idx)), "values": {}}
    info["prior_weight"] = None if chosen == NO_FIT else chosen
    after = summary(fitter.predict(env, idx), fitter, idx)
    conf = tuple((q, LEVEL, c["halfwidth"], c["rows"]) for q, c in conformal.items())
    env = env.replace(label=label, conformal=conf)
    measured = {"util_pct": int(np.sum(~np.isnan(fitter.util[idx]))),
                "memory_mib": int(np.sum(~np.isnan(fitter.memory[idx]))),
                "step_time_s": int(np.sum(~np.isnan(fitter.step[idx])))}
    return Calibration(env=env, base=base, params=tuple(params), rows=int(len(idx)),
                       groups=sorted(set(fitter.groups[idx])), gpus=sorted({fitter.rows[i].gpu for i in idx}),
                       measured=measured, before=before, after=after, cross_validated=cv, cv_unit=unit,
                       held_out=held, conformal=conformal, info=info)


def _cv_cost(held: Predicted, fitter: Fitter, idx) -> float:
    """The fit's data term on held-out predictions: the mean soft-L1 loss of the scaled log
    residuals (every measured quantity of every row)."""
    r = intervals.log_residuals(held, fitter, idx)
    parts = [r["util_pct"] / SIGMA_UTIL, r["memory_mib"] / SIGMA_MEMORY, r["step_time_s"] / SIGMA_STEP]
    allr = np.concatenate([x[~np.isnan(x)] for x in parts])
    return float(np.mean(2 * (np.sqrt(1 + allr ** 2) - 1))) if len(allr) else 0.0


def _held_out(fitter: Fitter, idx, parts, base, params, max_nfev, prior_weight, say) -> Predicted:
    n = len(idx)
    u, m, s = np.empty(n), np.empty(n), np.empty(n)
    for k, test in enumerate(parts):
        train = np.setdiff1d(np.arange(n), test)
        say(f"cross-validation: part {k + 1} of {len(parts)}")
        env = base
        if params and len(train) and prior_weight != NO_FIT:
            env, _ = fitter.fit(idx[train], params, priors=base, max_nfev=max_nfev, prior_weight=prior_weight)
        p = fitter.predict(env, idx[test])
        u[test], m[test], s[test] = p.util_pct, p.memory_mib, p.step_time_s
    return Predicted(u, m, s)


__all__ = ["Calibration", "calibrate", "choose_params", "folds", "SIGMA_UTIL", "SIGMA_MEMORY", "SIGMA_STEP"]
