"""Fitting and testing :mod:`gpucast.cluster.timeshare` on measured pairs of real training scripts.

Observations: pairs of jobs measured running together on one GPU (time-sliced), each job's
throughput together over alone (its *speed*, ``1 / slowdown``) and the GPU's combined NVML
utilization, with both jobs' solo runs (step time, NVML utilization). Each job is a gpucast
:class:`~gpucast.job.Job` with the loader, loop and stack its script had. Its timeline, what the
co-location model interleaves, comes one of two ways:

* **predicted** (:func:`predicted_timelines`): gpucast's prediction alone, as a user without
  measurements has it and as gpucast's policies see a job (step time, held share, NVML's
  reading, idle gaps, syncs and memory-boundness of :func:`gpucast.predict`; the same fields as
  :meth:`gpucast.cluster.behaviour.Observation.from_prediction`). Nothing measured enters.
* **anchored** (:func:`timelines`): gpucast's simulated step rescaled to the measured solo run
  (:func:`gpucast.learn.anchor.anchor`): the held share, idle gaps and hidden idle time come from
  the simulation matched to the measured step and utilization, so a job NVML reports 60 % busy
  may hold the GPU far less (:mod:`gpucast.estimate.nvml`). What the pairs say about the
  co-location physics with the solo runs known.

:func:`fit` is least squares on the speeds (scipy's ``least_squares``; slice and switch in log
space, within the bounds of :mod:`gpucast.cluster.timeshare.fit`, whose packing it reuses), the
relief of a light neighbour (``Constants.relief``) with the rest (:data:`NAMES`; :data:`PLAIN_NAMES`
without it, what it is checked against). Speeds a set did not measure are NaN and take no part
(Lucid's TD3: :func:`from_lucid`).
:func:`holdout_report` holds out one workload family at a time (every pair with a job of that
family), fits on the rest and scores the held-out pairs: per-job speed MAE against a constant
(the training pairs' mean speed), against the constants fitted on another kind of timeline and
applied to these (``other_tls``: constants fitted on anchored timelines used on predicted ones,
what a packaged fit from measured solo runs gives a user without them), and against today's
model (:data:`~gpucast.cluster.timeshare.FITTED`, Gavel's constants; by default with NVML
utilization taken as busy time); predicted and measured mean speed; the combined utilization's
MAE; and what sharing decisions made from the predictions are worth against the oracle's (a pair
is shared when the predicted summed speed exceeds ``1 + min_gain``; its worth is the measured
summed speed minus 1). Its ``rows`` keep every held-out job speed with both jobs' held shares,
for residual studies.

Data sets are passed in (:mod:`gpucast.learn.lucid` reads ``data/measured/lucid-rtx3090`` in the repository);
nothing measured is packaged, only fitted constants. Needs scipy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from gpucast.cluster.timeshare import FITTED, Constants, JobTimeline, solve
from gpucast.cluster.timeshare.fit import _pack, _unpack   # the same bounds, slice and switch in log space

# Constants fitted here. host contention too: the measured host-bound jobs (an RL environment, a
# Python negative sampler) keep nearly all their speed, which the fit must be free to say; and the
# relief of a light neighbour (Constants.relief: the learned correction where the interleaving stops).
NAMES = ("slice_s", "switch_s", "bandwidth", "host", "relief")
# The interleaving alone (what the relief is checked against, held out).
PLAIN_NAMES = ("slice_s", "switch_s", "bandwidth", "host")
# Where the fits start: Gavel's constants with the "held" stretch and no relief (Gavel's own
# relief is its world's; a fit without the relief among its names is the interleaving alone).
START = FITTED.with_(stretch="held", relief=0.0)


@dataclass(frozen=True)
class Solo:
    """One job's measured solo run."""

    key: str            # names the job among the set's (e.g. "ResNet18 b32 amp")
    family: str         # the unit held out together
    job: object         # its gpucast Job
    gpu: str
    step_s: float
    util_pct: float     # NVML's, measured


@dataclass(frozen=True)
class Pair:
    a: Solo
    b: Solo
    speed_a: float      # throughput together / alone (NaN: not measured, see from_lucid)
    speed_b: float
    util_pct: float | None = None   # the GPU's NVML utilization while both ran


def timelines(solos: Sequence[Solo], env=None, progress: Callable | None = None) -> dict[str, JobTimeline]:
    """Each solo run's timeline: its simulated step anchored to the measured step and utilization."""
    from gpucast.api import trace
    from gpucast.estimate import prepare
    from gpucast.estimate.environment import Environment
    from gpucast.hardware import get_gpu
    from gpucast.learn.anchor import anchor

    env = env or Environment.default()
    out, seen = {}, {}
    uniq = {s.key: s for s in solos}
    for i, s in enumerate(uniq.values()):
        tr = seen.get(s.job.key)
        if tr is None:
            tr = seen[s.job.key] = trace(s.job)
        spec = get_gpu(s.gpu)
        prep = prepare(tr, s.job, spec, None, env)
        a = anchor(prep, env, s.step_s, s.util_pct)
        busy = min(s.step_s, a.busy_s * s.step_s / a.step_s)
        hidden = min(s.step_s - busy, max(0.0, s.util_pct / 100.0 * s.step_s - busy))
        mem = _mem_bound(tr, spec, a.busy_s)
        out[s.key] = JobTimeline(s.step_s, busy, float(max(a.gaps, 1 if busy < s.step_s else 0)), mem, hidden,
                                 float(a.syncs))
        if progress:
            progress(i + 1, len(uniq))
    return out


def predicted_timelines(solos: Sequence[Solo], env=None, progress: Callable | None = None
                        ) -> dict[str, JobTimeline]:
    """Each solo run's timeline from gpucast's prediction alone (nothing measured): the
    prediction's step time, NVML reading, held share, idle gaps, syncs and memory-bound share, as
    gpucast's policies are told a job (:meth:`~gpucast.cluster.behaviour.Observation.from_prediction`)."""
    from gpucast.api import predict
    from gpucast.cluster.timeshare import mem_bound_share

    out = {}
    uniq = {s.key: s for s in solos}
    for i, s in enumerate(uniq.values()):
        p = predict(s.job, s.gpu, env=env)
        out[s.key] = JobTimeline.from_util(p.gpu_util_pct, p.step_time_s, float(max(p.gpu_idle_gaps, 0)),
                                           mem_bound_share(p), p.gpu_held_pct, float(p.gpu_syncs))
        if progress:
            progress(i + 1, len(uniq))
    return out


def _mem_bound(tr, spec, busy_s: float) -> float:
    from gpucast.estimate.constants import DEFAULT

    if busy_s <= 0:
        return 0.0
    return min(1.0, tr.bytes / (spec.memory_bandwidth_gbs * 1e9 * DEFAULT.bandwidth_efficiency) / busy_s)


def nvml_as_busy(solos: Sequence[Solo], tls: dict[str, JobTimeline]) -> dict[str, JobTimeline]:
    """The timelines today's model took: NVML's utilization as the held share, same gaps."""
    return {s.key: JobTimeline.from_util(s.util_pct, s.step_s, tls[s.key].gaps, tls[s.key].mem_bound)
            for s in solos}


def predict(pairs: Sequence[Pair], tls: dict[str, JobTimeline], c: Constants):
    """``(speeds (2, n), combined NVML utilization % (n,))`` of the pairs under constants ``c``."""
    import numpy as np

    from gpucast.estimate.nvml import combined_reported, idle_visible

    A = [tls[p.a.key] for p in pairs]
    B = [tls[p.b.key] for p in pairs]
    arr = lambda name: np.array([[getattr(t, name) for t in A], [getattr(t, name) for t in B]], dtype=float)  # noqa: E731
    step = arr("step_s")
    sy = np.array([[np.nan if t.syncs is None else t.syncs for t in A], [np.nan if t.syncs is None else t.syncs
                                                                        for t in B]], dtype=float)
    sd, want = solve(step, arr("busy_s"), arr("gaps"), arr("mem_bound"), c, wants=True, syncs=sy)
    held = arr("busy_s") / (step * sd)
    hidden = arr("hidden_s")
    util = np.array([100.0 * combined_reported(held[:, k], [idle_visible(step[i, k] * sd[i, k], want[i, k],
                                                                         hidden[i, k]) for i in range(2)])
                     for k in range(len(pairs))])
    return 1.0 / sd, util


def fit(pairs: Sequence[Pair], tls: dict[str, JobTimeline], start: Constants = START,
        names: Sequence[str] = NAMES) -> Constants:
    """Least-squares constants on the pairs' measured speeds."""
    import numpy as np
    from scipy.optimize import least_squares

    y = np.array([[p.speed_a for p in pairs], [p.speed_b for p in pairs]])
    seen = ~np.isnan(y)          # speeds not measured (NaN) take no part
    names = list(names)
    best = None
    starts = [start, start.with_(host=0.0, bandwidth=0.0)]
    if "relief" in names and not start.relief > 0.0:
        starts.append(start.with_(relief=1.0))     # a start off the bound, where the interleaving alone sits
    for x0_c in starts:
        x0, lo, hi = _pack(x0_c, names)

        def resid(x):
            return (predict(pairs, tls, _unpack(start, names, x))[0] - y)[seen]

        r = least_squares(resid, x0, bounds=(lo, hi), diff_step=1e-3, max_nfev=300)
        if best is None or r.cost < best.cost:
            best = r
    return _unpack(start, names, best.x)


def decisions_worth(pred_speeds, speeds, min_gain: float = 0.0) -> float:
    """What sharing the pairs whose predicted summed speed exceeds ``1 + min_gain`` is worth
    (summed measured gain, speed_a + speed_b - 1) over what the oracle's choice is worth
    (every pair whose measured gain is positive)."""
    import numpy as np

    speeds = np.asarray(speeds, dtype=float)
    known = ~np.isnan(speeds).any(0)     # pairs with both speeds measured
    gain = speeds[:, known].sum(0) - 1.0
    share = np.asarray(pred_speeds)[:, known].sum(0) - 1.0 > min_gain
    best = float(np.clip(gain, 0.0, None).sum())
    return float(gain[share].sum()) / best if best > 0 else 1.0


def holdout_report(pairs: Sequence[Pair], tls: dict[str, JobTimeline], start: Constants = START,
                   min_gain: float = 0.2, progress: Callable | None = None,
                   today_tls: dict[str, JobTimeline] | None = None,
                   other_tls: dict[str, JobTimeline] | None = None, names: Sequence[str] = NAMES) -> dict:
    """Held-out-family scores (module docstring), pooled over every held-out pair. The constants
    are fitted on the training families' pairs with ``tls`` and predict the held-out pairs with
    ``tls``; ``other_tls``: also constants fitted on those timelines (the same training pairs) and
    applied to ``tls`` (``other_mae``); ``today_tls``: the timelines today's model (Gavel's
    constants) is scored on (None: NVML's measured utilization as busy time, :func:`nvml_as_busy`);
    ``names``: the constants fitted (:data:`NAMES`; :data:`PLAIN_NAMES`: the interleaving alone,
    the relief left at ``start``'s). Speeds not measured (NaN) are left out of every score."""
    import numpy as np

    fams = sorted({p.a.family for p in pairs} | {p.b.family for p in pairs})
    if today_tls is None:
        today_tls = nvml_as_busy([p.a for p in pairs] + [p.b for p in pairs], tls)
    rows, P, C, O, X, Y, U, UM, UO, R = [], [], [], [], [], [], [], [], [], []
    for k, fam in enumerate(fams):
        test = [p for p in pairs if fam in (p.a.family, p.b.family)]
        train = [p for p in pairs if fam not in (p.a.family, p.b.family)]
        if not test or not train:
            continue
        c = fit(train, tls, start, names)
        ps, pu = predict(test, tls, c)
        os_, ou = predict(test, today_tls, FITTED)
        xs = predict(test, tls, fit(train, other_tls, start, names))[0] if other_tls is not None else np.full_like(ps, np.nan)
        y = np.array([[p.speed_a for p in test], [p.speed_b for p in test]])
        mean = float(np.nanmean([[p.speed_a, p.speed_b] for p in train]))
        um = np.array([p.util_pct if p.util_pct is not None else np.nan for p in test])
        k_ = ~np.isnan(y)
        rows.append({"held_out": fam, "pairs": len(test), "speeds": int(k_.sum()),
                     "mae": float(np.abs(ps - y)[k_].mean()),
                     "constant_mae": float(np.abs(mean - y)[k_].mean()), "today_mae": float(np.abs(os_ - y)[k_].mean()),
                     "other_mae": float(np.abs(xs - y)[k_].mean()), "util_mae": float(np.nanmean(np.abs(pu - um))),
                     "mean_speed": float(y[k_].mean()), "predicted_mean_speed": float(ps[k_].mean()),
                     "other_mean_speed": float(xs[k_].mean()), "constants": c.as_dict()})
        for j, p in enumerate(test):
            for side, (me, nb) in enumerate(((p.a, p.b), (p.b, p.a))):
                if np.isnan(y[side, j]):
                    continue
                R.append({"job": me.key, "neighbour": nb.key, "held_out": fam, "family": me.family,
                          "held": tls[me.key].util, "neighbour_held": tls[nb.key].util,
                          "predicted": float(ps[side, j]), "measured": float(y[side, j]),
                          "other": float(xs[side, j])})
        P.append(ps)
        O.append(os_)
        X.append(xs)
        C.append(np.full_like(y, mean))
        Y.append(y)
        U.append(pu)
        UO.append(ou)
        UM.append(um)
        if progress:
            progress(k + 1, len(fams))
    P, O, X, C, Y = (np.concatenate(v, axis=1) for v in (P, O, X, C, Y))
    U, UO, UM = (np.concatenate(v) for v in (U, UO, UM))
    k_ = ~np.isnan(Y)
    return {"folds": rows, "pairs": int(Y.shape[1]), "speeds": int(k_.sum()), "mae": float(np.abs(P - Y)[k_].mean()),
            "constant_mae": float(np.abs(C - Y)[k_].mean()), "today_mae": float(np.abs(O - Y)[k_].mean()),
            "other_mae": float(np.abs(X - Y)[k_].mean()), "other_mean_speed": float(X[k_].mean()),
            "util_mae": float(np.nanmean(np.abs(U - UM))), "today_util_mae": float(np.nanmean(np.abs(UO - UM))),
            "worth": decisions_worth(P, Y, min_gain), "worth_any_gain": decisions_worth(P, Y, 0.0),
            "today_worth": decisions_worth(O, Y, min_gain),
            "other_worth": decisions_worth(X, Y, min_gain) if other_tls is not None else float("nan"),
            "min_gain": min_gain, "mean_speed": float(Y[k_].mean()), "predicted_mean_speed": float(P[k_].mean()),
            "rows": R}


def from_lucid(root) -> tuple[list[Solo], list[Pair]]:
    """Lucid's RTX 3090 solo runs and pairs (``root``: ``data/measured/lucid-rtx3090``, read by
    :mod:`gpucast.learn.lucid`) as :class:`Solo` and :class:`Pair` (step time: batch / speed, which
    for TD3 is one ``learn()`` call: a cycle of the script all the same). The speeds of the
    families in :data:`gpucast.learn.lucid.SPEED_NOT_MEASURED` (TD3: 1.000 in every pair, not a
    measurement) are NaN; their neighbours' speeds are kept."""
    from gpucast.learn import lucid

    def speed(family, value):
        return float("nan") if family in lucid.SPEED_NOT_MEASURED else value

    singles = lucid.singles(root)
    by = {}
    for s in singles:
        by[s.key] = Solo(key=f"{s.model} b{s.batch_size}{' amp' if s.amp else ''}", family=s.model, job=s.job(),
                         gpu=lucid.GPU, step_s=s.step_time_s, util_pct=s.gpu_util_pct)
    pairs = [Pair(by[p.key1], by[p.key2], speed(p.family1, p.speed1_vs_solo), speed(p.family2, p.speed2_vs_solo),
                  p.gpu_util_pct)
             for p in lucid.pairs(root, singles)]
    return list(by.values()), pairs
