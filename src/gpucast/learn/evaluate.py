"""Group-held-out evaluation of every way gpucast can predict a measured set, side by side.

Every method predicts each held-out group (an MLP architecture, a Gavel job type) from what it
learned on the other groups only, never from random rows of the same group:

* ``floor``: the mean of the fitting rows (geometric mean for step times);
* ``reference``: :class:`~gpucast.learn.models.ReferenceRegressor` on the reference's graph features;
* ``physics``: gpucast with the base environment and no measurement;
* ``physics+calibration``: gpucast with an environment calibrated on the other groups' rows
  (:func:`gpucast.learn.calibrate.calibrate`, at most ``calibration_rows`` of them, drawn at random);
* ``hybrid``: the calibrated physics plus :class:`~gpucast.learn.models.HybridResidual` trained on
  the other groups' residuals.

:func:`few_shot` is the operator's case: calibrate on ``k`` rows drawn from some groups and predict
a group none of them came from. The base environment must not have seen the set
(:func:`base_without`): the packaged default was fitted on the shared sets.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gpucast.estimate.environment import Environment, fit_record
from gpucast.learn import intervals
from gpucast.learn.calibrate import calibrate
from gpucast.learn.features import physics_matrix, reference_matrix
from gpucast.learn.fit import Fitter, Predicted
from gpucast.learn.models import HybridResidual, ReferenceRegressor

METHODS = ("floor", "reference", "physics", "physics+calibration", "hybrid")
KEYS = {"util_pct": "util", "memory_mib": "memory", "step_time_s": "step"}


def base_without(dataset: str) -> Environment:
    """The priors with the packaged fit's stages laid over them, except the stages fitted on
    ``dataset`` ("gpumemnet-mlp", "gavel" or "lucid-rtx3090"): a base that never saw that set."""
    values = {}
    for stage in fit_record().get("stages", []):
        data = stage.get("data")
        if dataset not in (data if isinstance(data, list) else [data]):
            values.update(stage.get("values", {}))
    return Environment.priors().with_params(values)


def _measured(fitter: Fitter, quantity: str) -> np.ndarray:
    return {"util_pct": fitter.util, "memory_mib": fitter.memory, "step_time_s": fitter.step}[quantity]


def _of(pred: Predicted, quantity: str) -> np.ndarray:
    return getattr(pred, quantity)


def compare(fitter: Fitter, quantities: tuple[str, ...], base: Environment, calibration_rows: int = 300,
            seed: int = 0, progress: Callable[[str], None] | None = None) -> dict:
    """Held-out predictions of every method: ``{method: {quantity: array}}`` over all rows."""
    say = progress or (lambda s: None)
    n = len(fitter.rows)
    out = {m: {q: np.full(n, np.nan) for q in quantities} for m in METHODS}
    ref_X = reference_matrix(fitter)
    rng = np.random.default_rng(seed)
    phys_all = fitter.predict(base)
    for g in dict.fromkeys(fitter.groups):
        test = np.flatnonzero(fitter.groups == g)
        train = np.flatnonzero(fitter.groups != g)
        say(f"held out {g}: calibrating on {min(len(train), calibration_rows)} of {len(train)} rows")
        cal_idx = train if len(train) <= calibration_rows else np.sort(rng.choice(train, calibration_rows, replace=False))
        cal = calibrate(fitter, cal_idx, base=base, cross_validate=False)
        phys_cal = fitter.predict(cal.env)
        say(f"held out {g}: learned models")
        Xp = np.hstack([physics_matrix(fitter, cal.env), ref_X])
        for q in quantities:
            y = _measured(fitter, q)
            ok = train[~np.isnan(y[train])]
            if len(ok) == 0:
                continue
            vals = y[ok]
            out["floor"][q][test] = float(np.exp(np.mean(np.log(vals)))) if q == "step_time_s" else float(np.mean(vals))
            out["reference"][q][test] = ReferenceRegressor(q).fit(ref_X[ok], vals).predict(ref_X[test])
            out["physics"][q][test] = _of(phys_all, q)[test]
            out["physics+calibration"][q][test] = _of(phys_cal, q)[test]
            hyb = HybridResidual(q).fit(Xp[ok], _of(phys_cal, q)[ok], vals)
            out["hybrid"][q][test] = hyb.predict(Xp[test], _of(phys_cal, q)[test])
    return out


def score(fitter: Fitter, quantity: str, pred: np.ndarray) -> dict:
    from gpucast.learn import metrics

    y = _measured(fitter, quantity)
    ok = ~np.isnan(y) & ~np.isnan(pred)
    if quantity == "util_pct":
        return metrics.util_metrics(pred[ok], y[ok])
    if quantity == "memory_mib":
        return {"n": int(ok.sum()), "mape": metrics.mape(pred[ok], y[ok])}
    r = pred[ok] / y[ok]
    return {"n": int(ok.sum()), "mdape": metrics.mdape(pred[ok], y[ok]), "within_2x": float(np.mean((r >= 0.5) & (r <= 2))),
            "rmsle": float(np.sqrt(np.mean(np.log(r) ** 2)))}


def coverage(fitter: Fitter, quantity: str, pred: np.ndarray, level: float = 0.8) -> dict:
    """Group coverage of split-conformal intervals built from the other groups' held-out residuals."""
    y = _measured(fitter, quantity)
    if quantity == "util_pct":
        r = np.log1p(pred / 100) - np.log1p(y / 100)
    else:
        r = np.log(pred / y)
    return intervals.group_coverage(r, fitter.groups, level)


def few_shot(fitter: Fitter, ks: tuple[int, ...], base: Environment, draws: int = 5, seed: int = 0,
             progress: Callable[[str], None] | None = None) -> dict:
    """``{k: {"util": ..., "memory": ..., "step": ..., "coverage": {...}}}``: calibrate on ``k``
    rows drawn at random from all groups but one, predict that group; every group, ``draws`` draws.
    k = 0 is the base environment. Coverage is that of the calibration's own split-conformal
    intervals (from its cross-validation on the k rows) on the held-out group."""
    from gpucast.learn.metrics import summary

    say = progress or (lambda s: None)
    rng = np.random.default_rng(seed)
    out = {}
    for k in ks:
        preds = {q: [] for q in KEYS}
        meas = {q: [] for q in KEYS}
        inside = {q: [0, 0] for q in KEYS}
        for g in dict.fromkeys(fitter.groups):
            test = np.flatnonzero(fitter.groups == g)
            train = np.flatnonzero(fitter.groups != g)
            for d in range(draws if k else 1):
                say(f"k={k}: held out {g}, draw {d + 1}")
                if k:
                    idx = np.sort(rng.choice(train, min(k, len(train)), replace=False))
                    cal = calibrate(fitter, idx, base=base, cross_validate=True, label=f"k{k}")
                    env = cal.env
                else:
                    env = base
                p = fitter.predict(env, test)
                conf = {c[0]: c[2] for c in env.conformal}
                res = intervals.log_residuals(p, fitter, test)
                for q in KEYS:
                    preds[q].append(_of(p, q))
                    meas[q].append(_measured(fitter, q)[test])
                    if q in conf:
                        r = res[q][~np.isnan(res[q])]
                        inside[q][0] += int(np.sum(np.abs(r) <= conf[q]))
                        inside[q][1] += len(r)
        pred = Predicted(*(np.concatenate(preds[q]) for q in KEYS))
        pseudo = _Rows(*(np.concatenate(meas[q]) for q in KEYS))
        row = summary(pred, pseudo, np.arange(len(pseudo.util)))
        row["coverage"] = {KEYS[q]: (v[0] / v[1] if v[1] else None) for q, v in inside.items()}
        out[k] = row
    return out


class _Rows:
    """Measured arrays in a Fitter's shape, for :func:`gpucast.learn.metrics.summary`."""

    def __init__(self, util, memory, step) -> None:
        self.util, self.memory, self.step = util, memory, step


def fit_hybrid(fitter: Fitter, quantity: str | None = None, env: Environment | None = None) -> tuple:
    """The hybrid for one quantity trained on every row (``gpucast learn fit``), with its
    group-held-out scores next to the physics' (each group predicted by a hybrid trained on the
    others, the physics under ``env`` throughout) and the split-conformal half-width of its
    held-out residuals. ``meta["wins"]``: the hybrid beat the physics held out."""
    from gpucast.learn.features import PHYSICS_NAMES, REFERENCE_NAMES

    env = env or Environment.default()
    if quantity is None:
        counts = {q: int(np.sum(~np.isnan(_measured(fitter, q)))) for q in KEYS}
        quantity = max(counts, key=counts.get)
    y = _measured(fitter, quantity)
    ok = np.flatnonzero(~np.isnan(y))
    if len(ok) < 10:
        raise ValueError(f"learn fit needs at least 10 rows measuring {quantity}, got {len(ok)}")
    X = np.hstack([physics_matrix(fitter, env), reference_matrix(fitter)])
    physics = _of(fitter.predict(env), quantity)
    held = np.full(len(y), np.nan)
    groups = fitter.groups
    names = list(dict.fromkeys(groups[ok]))
    if len(names) >= 2:
        for g in names:
            test = ok[groups[ok] == g]
            train = ok[groups[ok] != g]
            held[test] = HybridResidual(quantity).fit(X[train], physics[train], y[train]).predict(X[test], physics[test])
    model = HybridResidual(quantity).fit(X[ok], physics[ok], y[ok])
    scores, wins, half, half_rows = {}, False, None, 0
    if len(names) >= 2:
        scores = {"physics": score(fitter, quantity, np.where(np.isnan(held), np.nan, physics)),
                  "hybrid": score(fitter, quantity, held)}
        key = {"util_pct": "rmsle", "memory_mib": "mape", "step_time_s": "mdape"}[quantity]
        wins = scores["hybrid"][key] < scores["physics"][key]
        r = (np.log1p(held / 100) - np.log1p(y / 100)) if quantity == "util_pct" else np.log(held / y)
        half = intervals.conformal_halfwidth(r, 0.8)
        half_rows = int(np.sum(~np.isnan(r)))
    meta = {"features": list(PHYSICS_NAMES + REFERENCE_NAMES), "groups": sorted(map(str, set(groups[ok]))),
            "gpus": sorted({fitter.rows[i].gpu for i in ok}), "env": env.label, "held_out": scores, "wins": bool(wins),
            "halfwidth": half, "halfwidth_rows": half_rows}
    return model, meta
