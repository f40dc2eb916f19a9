"""Gavel's measured pair slowdowns, and the utilization-only slowdown model they were first fitted to.

The simulator's slowdowns come from :func:`shared_slowdowns`: a measured pair where Gavel measured
it, the co-location model of :mod:`gpucast.cluster.timeshare` (each job's bursts and gaps)
everywhere else. The utilization-only model below is kept as the baseline that model is compared
with (``benchmarks/colocation.py``).

The utilization-only model (per GPU, for job ``i`` among the jobs sharing it, utilizations in percent)::

    U            = sum of the jobs' solo utilizations
    slowdown_i   = 1 + A * (U - u_i) / 100 + B * max(0, U - 100) / 100

``A`` is the cost of time-slicing with busy neighbours, ``B`` the extra cost once the GPU is
oversubscribed. A job alone has slowdown 1. Slowdown multiplies the job's solo step time.

What is modelled: the jobs' utilizations only. What is not: memory-bandwidth versus compute
contention ("kinds of work"), memory pressure (an over-committed GPU is an out-of-memory failure
in the engine, not a slowdown), MPS versus time-slicing, PCIe or NVLink traffic of multi-GPU jobs.

Fit (:func:`fit`, :func:`fit_report`): every co-located single-GPU pair of Gavel's
``simulation_throughputs.json`` on one GPU type (V100 by default) with both throughputs positive
gives two observations ``slowdown = solo steps/s / co-located steps/s`` (one per job). Gavel
measured no utilizations, so ``u`` is gpucast's *predicted* utilization of each job type on that
GPU (the analytic model): the fit says how well slowdown is explained by gpucast's numbers.
Least squares, no intercept (``slowdown - 1 = A x1 + B x2``), via numpy, with both coefficients
kept non-negative (neither neighbours nor oversubscription can speed a job up): a coefficient
that comes out negative is set to 0 and the other refitted.

:data:`A` and :data:`B` are the shipped coefficients (from :func:`fit_report` on V100 with
gpucast ``analytic-0.1.0``); tests refit them from the data and check they agree.

The engine uses measured pair slowdowns directly where they exist (two Gavel job types alone on a
K80/P100/V100, see :func:`measured_pair_slowdowns`) and the co-location model everywhere else.
"""

from __future__ import annotations

import math
from typing import Sequence

from gpucast.cluster import gavel, timeshare
from gpucast.cluster.timeshare import modes as sharing

# Source: fit_report(gpu="v100-16gb") on Gavel's V100 pairs with gpucast analytic-0.1.0 utilizations
# (as NVML reports them) of Gavel's jobs with their scripts' loaders and PyTorch 1.4 stack, the
# environment refitted on the three shared sets (issue 18; refitted again after issue 25's
# per-set hosts and library-only 1.x kernel factor, 2026-12-02, and after issue 37's kernel model,
# 2026-12-04, and after issue 52's FP32 GEMMs on the CUDA cores, 2026-12-06; both coefficients kept
# non-negative: B came out negative and is 0). RMSE 1.252 against 1.254 for a constant slowdown:
# utilization alone explains little of Gavel's pair slowdowns.
A = 1.1419
B = 0.0


def slowdowns(utils: Sequence[float], a: float = A, b: float = B) -> list[float]:
    """Slowdown of each job sharing one GPU, given their solo utilizations (percent)."""
    n = len(utils)
    if n <= 1:
        return [1.0] * n
    total = sum(utils)
    over = b * max(0.0, total - 100.0) / 100.0
    return [1.0 + a * (total - u) / 100.0 + over for u in utils]


def throughput_gain(utils_before: Sequence[float], u_new: float, a: float = A, b: float = B) -> float:
    """Change in summed normalized throughput (sum of 1/slowdown) when a job with ``u_new`` joins."""
    before = sum(1.0 / s for s in slowdowns(list(utils_before), a, b))
    after = sum(1.0 / s for s in slowdowns(list(utils_before) + [u_new], a, b))
    return after - before


# ----------------------------------------------------------------------------- measured pairs

_PAIR_CACHE: dict[str, dict] = {}


def measured_pair_slowdowns(gpu: str) -> dict[tuple[str, str], tuple[float, float]]:
    """``{(job type A, job type B): (A's slowdown, B's slowdown)}`` measured on ``gpu``
    (``k80``, ``p100``, ``v100-16gb``); empty for other GPUs."""
    if gpu not in gavel.CATALOG_TO_GAVEL:
        return {}
    if gpu not in _PAIR_CACHE:
        solo = gavel.solo_throughputs()
        out = {}
        for (ja, jb), (ta, tb) in gavel.pair_throughputs(gpu=gpu).items():
            sa, sb = solo.get((ja, 1, gpu)), solo.get((jb, 1, gpu))
            if sa and sb:
                out[(ja, jb)] = (sa / ta, sb / tb)
        _PAIR_CACHE[gpu] = out
    return _PAIR_CACHE[gpu]


# ----------------------------------------------------------------------------- fit

def _observations(utils: dict[str, float], gpu: str):
    """(x1, x2, observed slowdown) for each job of each measured pair (each unordered pair once)."""
    rows = []
    seen = set()
    for (ja, jb), (sa, sb) in measured_pair_slowdowns(gpu).items():
        if ja not in utils or jb not in utils or (jb, ja) in seen:
            continue
        seen.add((ja, jb))
        ua, ub = utils[ja], utils[jb]
        over = max(0.0, ua + ub - 100.0) / 100.0
        rows.append((ub / 100.0, over, sa))
        rows.append((ua / 100.0, over, sb))
    return rows


def fit(utils: dict[str, float], gpu: str = "v100-16gb") -> tuple[float, float, int]:
    """Least-squares ``(A, B, n observations)`` from the measured pairs on ``gpu``.

    ``utils`` maps each Gavel job type to its solo utilization (percent) on that GPU.
    """
    import numpy as np

    rows = _observations(utils, gpu)
    if len(rows) < 2:
        raise ValueError(f"too few measured pairs on {gpu} with known utilizations ({len(rows)})")
    X = np.array([[r[0], r[1]] for r in rows])
    y = np.array([r[2] - 1.0 for r in rows])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    if (coef < 0).any():  # neither cost can be negative: refit with the negative one at 0
        keep = int(np.argmax(coef))
        only, *_ = np.linalg.lstsq(X[:, [keep]], y, rcond=None)
        coef = np.zeros(2)
        coef[keep] = max(0.0, float(only[0]))
    return float(coef[0]), float(coef[1]), len(rows)


def evaluate(utils: dict[str, float], a: float, b: float, gpu: str = "v100-16gb") -> dict:
    """RMSE and MAPE of predicted vs measured slowdown, and of the constant baseline (the mean)."""
    rows = _observations(utils, gpu)
    obs = [r[2] for r in rows]
    pred = [1.0 + a * r[0] + b * r[1] for r in rows]
    mean = sum(obs) / len(obs)
    rmse = math.sqrt(sum((p - o) ** 2 for p, o in zip(pred, obs)) / len(obs))
    mape = 100.0 * sum(abs(p - o) / o for p, o in zip(pred, obs)) / len(obs)
    base_rmse = math.sqrt(sum((mean - o) ** 2 for o in obs) / len(obs))
    base_mape = 100.0 * sum(abs(mean - o) / o for o in obs) / len(obs)
    return {"n_observations": len(obs), "n_pairs": len(obs) // 2, "rmse": rmse, "mape_pct": mape,
            "baseline_mean_slowdown": mean, "baseline_rmse": base_rmse, "baseline_mape_pct": base_mape}


def predicted_utils(gpu: str = "v100-16gb") -> dict[str, float]:
    """gpucast's predicted solo utilization of each Gavel single-GPU job type on ``gpu``."""
    from gpucast.cluster.trace_formats import gavel_job_types
    from gpucast.cluster.truth import Profile, predict_cached

    return {jt: predict_cached(Profile.from_gavel(jt), gpu).util_pct for jt in gavel_job_types()}


def fit_report(gpu: str = "v100-16gb", utils: dict[str, float] | None = None) -> dict:
    """Refit on Gavel's measured pairs and report the error of the fit and of the shipped model.

    Keys: ``gpu``, ``a``, ``b``, ``n_pairs``, ``n_observations``, ``rmse``, ``mape_pct`` (of the
    refit), ``shipped`` (the same metrics for :data:`A`, :data:`B`), and the constant-slowdown
    baseline's ``baseline_rmse``/``baseline_mape_pct``.
    """
    utils = utils if utils is not None else predicted_utils(gpu)
    a, b, _n = fit(utils, gpu)
    rep = {"gpu": gpu, "a": a, "b": b, **evaluate(utils, a, b, gpu)}
    rep["shipped"] = {"a": A, "b": B, **{k: v for k, v in evaluate(utils, A, B, gpu).items()
                                         if k in ("rmse", "mape_pct")}}
    return rep


def shared_slowdowns(timelines: Sequence, job_types: Sequence[str | None] | None = None,
                     gpu: str | None = None, mode: str | None = None) -> list[float]:
    """Slowdowns of the jobs sharing one GPU: Gavel's measured pair slowdowns when exactly two
    single-GPU Gavel job types share a K80/P100/V100 and that pair was measured, else the
    co-location model on the jobs' timelines (:func:`gpucast.cluster.timeshare.slowdowns`).
    Pass ``None`` as a job type for a job that is not a single-GPU Gavel job. ``mode``: the GPU's
    sharing mode (None: the one in force, :func:`gpucast.cluster.timeshare.set_mode`)."""
    m = measured_pair(len(timelines), job_types, gpu, mode)
    if m is not None:
        return m
    return sharing.slowdowns(timelines, timeshare.world().on(gpu), mode)


def shared_slowdowns_many(sets: Sequence[tuple[Sequence, Sequence[str | None] | None]],
                          gpu: str | None = None, mode: str | None = None) -> list[list[float]]:
    """:func:`shared_slowdowns` of each ``(timelines, job types)`` in ``sets`` on ``gpu``: the
    co-location model's sets solved together (:func:`gpucast.cluster.timeshare.slowdowns_many`)."""
    out: list = [None] * len(sets)
    model, where = [], []
    for k, (timelines, types) in enumerate(sets):
        m = measured_pair(len(timelines), types, gpu, mode)
        if m is not None:
            out[k] = m
        else:
            model.append(timelines)
            where.append(k)
    for k, sd in zip(where, sharing.slowdowns_many(model, timeshare.world().on(gpu), mode)):
        out[k] = sd
    return out


def measured_pair(n: int, job_types: Sequence[str | None] | None, gpu: str | None,
                  mode: str | None = None) -> list[float] | None:
    """The measured slowdowns :func:`shared_slowdowns` answers with for ``n`` jobs of these
    types on ``gpu``, or ``None`` where it answers with the co-location model (always under MPS,
    ``mode`` or else :func:`gpucast.cluster.timeshare.set_mode`'s: Gavel's set does not say it ran
    MPS, and gpucast reads its pairs as time-sliced, as every co-location measurement it has)."""
    if (mode or timeshare._MODE[0]) != "timeslice":
        return None
    if n == 2 and job_types is not None and gpu is not None and None not in job_types:
        m = measured_pair_slowdowns(gpu).get((job_types[0], job_types[1]))
        if m is not None:
            return [m[0], m[1]]
    return None
