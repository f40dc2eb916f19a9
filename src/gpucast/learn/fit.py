"""Fit the Environment's constants to measured rows, with published priors, and evaluate the fit
on held-out groups.

The model is gpucast's own estimator: every row is captured and prepared once
(:func:`gpucast.estimate.prepare`), and only the Environment changes between evaluations (the
loader, loop, idle-kernel and context constants), so an evaluation of a few thousand rows takes
about a second. The fit is a nonlinear least squares in log space
(``scipy.optimize.least_squares``) over

* data residuals: ``(ln(1 + pred/100) - ln(1 + meas/100)) / SIGMA_UTIL`` for utilization,
  ``ln(pred / meas) / SIGMA_MEMORY`` for nvidia-smi memory, ``ln(pred / meas) / SIGMA_STEP`` for
  step time;
* prior residuals: ``ln(value / prior) / prior_sigma`` for every fitted constant (its published
  or commonly observed value and spread, :class:`~gpucast.estimate.environment.Environment`), so a
  constant the rows say little about stays near its prior instead of running off to fit noise.

The data residuals pass through the soft-L1 loss (robust to outlier rows); the priors do not.
A coarse coordinate search on a grid of prior sigmas gives the local fit its start
(:func:`_coordinate_search`: the step model is flat where a loader keeps up).

:func:`group_cv` holds out one group (an MLP architecture, a Gavel job type) at a time, fits on
the others and predicts the held-out rows; the floor predicts their mean over the fitting rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpucast.estimate import Prepared, prepare, reported_util
from gpucast.estimate.environment import Environment
from gpucast.learn.rows import MeasuredRow

# The spread of a good prediction, per quantity, in the residuals' units (log1p-util, log).
SIGMA_UTIL = 0.05
SIGMA_MEMORY = 0.05
SIGMA_STEP = 0.15

# The MLP runs loaded CUDA modules eagerly (see shared_sets): they measure the eager context as a
# whole, so the lazy part keeps its prior and only the eager extra moves.
MLP_PARAMS = ("memory_sample_s", "collate_bytes_per_s", "collate_batch_s", "copy_call_s",
              "pageable_copy_efficiency", "item_s", "progress_bar_s", "epoch_s", "idle_kernel_s",
              "cuda_context_eager_extra_bytes")
# Gavel's rows move the per-sample constants of loaders the MLP set does not have; the rest
# (copies, collate, .item(), progress bars, idle kernels) come from the MLP fit, which sees them
# in 2,978 rows. Not fitted to Gavel, though it would move them far (benchmarks/accuracy.py says
# how far off that leaves those job types): the worker constants (worker_batch_s,
# worker_batch_recv_s), which the rows would push to 20-65 ms per batch to explain a ~28 ms
# per-step floor of Gavel's two-worker jobs whose cause is not established, and env_step_s, which
# A3C's rows would push to ~7 ms per frame for costs that are not an environment step (Hogwild
# processes, Adam on a CPU copy of the model): as defaults they would break every other job.
GAVEL_PARAMS = ("small_image_sample_s", "image_sample_s", "jpeg_decode_s_per_px", "token_sample_s",
                "log_line_s")


@dataclass
class Predicted:
    util_pct: np.ndarray
    memory_mib: np.ndarray
    step_time_s: np.ndarray


class Fitter:
    """Rows captured and prepared once; ``predict(env)`` and ``fit(rows, params)`` reuse them."""

    def __init__(self, rows: list[MeasuredRow], progress: Callable[[int, int], None] | None = None,
                 traces: list | None = None, jobs: list | None = None) -> None:
        """``traces`` reuses captures of the same models (``jobs`` then replace the rows' jobs:
        the same graphs with other surroundings, e.g. the benchmark-style jobs of the old model)."""
        from gpucast.api import trace
        from gpucast.graph import capture
        from gpucast.hardware import get_gpu

        self.rows = rows
        self.prepared: list[Prepared] = []
        self.traces = []
        base = Environment.priors()
        for i, r in enumerate(rows):
            job = jobs[i] if jobs is not None else r.job
            tr = traces[i] if traces is not None else (capture(job) if job.is_module else trace(job))
            self.traces.append(tr)
            self.prepared.append(prepare(tr, job, get_gpu(r.gpu), None, base))
            if progress:
                progress(i + 1, len(rows))
        self.util = np.array([np.nan if r.util_pct is None else r.util_pct for r in rows])
        self.memory = np.array([np.nan if r.memory_mib is None else r.memory_mib for r in rows])
        self.step = np.array([np.nan if r.step_time_s is None else r.step_time_s for r in rows])
        self.groups = np.array([r.group for r in rows])
        # The measured set each row comes from (one cluster's hosts): the unit of per-set nuisance
        # parameters (Fitter.fit's ``per_set``); set_fit names them, a plain Fitter is one set.
        self.sets = np.full(len(rows), "", dtype=object)

    @classmethod
    def concat(cls, parts: list["Fitter"]) -> "Fitter":
        out = cls.__new__(cls)
        out.rows = [r for f in parts for r in f.rows]
        out.prepared = [p for f in parts for p in f.prepared]
        out.traces = [t for f in parts for t in f.traces]
        for name in ("util", "memory", "step", "groups", "sets"):
            setattr(out, name, np.concatenate([getattr(f, name) for f in parts]))
        return out

    def predict(self, env: Environment, idx: np.ndarray | None = None) -> Predicted:
        idx = np.arange(len(self.rows)) if idx is None else idx
        u, m, s = np.empty(len(idx)), np.empty(len(idx)), np.empty(len(idx))
        for k, i in enumerate(idx):
            p = self.prepared[i]
            tl, _ = p.run(env)
            s[k] = tl.step_time_s
            u[k] = 100.0 * reported_util(tl, env)
            m[k] = p.memory(env).total_bytes / 2**20
        return Predicted(u, m, s)

    def residuals(self, env: Environment, idx: np.ndarray) -> np.ndarray:
        p = self.predict(env, idx)
        parts = []
        mu, mm, ms = self.util[idx], self.memory[idx], self.step[idx]
        ok = ~np.isnan(mu)
        parts.append((np.log1p(p.util_pct[ok] / 100) - np.log1p(mu[ok] / 100)) / SIGMA_UTIL)
        ok = ~np.isnan(mm)
        parts.append(np.log(p.memory_mib[ok] / mm[ok]) / SIGMA_MEMORY)
        ok = ~np.isnan(ms)
        parts.append(np.log(p.step_time_s[ok] / ms[ok]) / SIGMA_STEP)
        return np.concatenate(parts)

    def fit(self, idx: np.ndarray, params: tuple[str, ...], priors: Environment | None = None,
            max_nfev: int = 60, prior_weight: float = 1.0, per_set: tuple[str, ...] = ()
            ) -> tuple[Environment, dict]:
        """The Environment fitted on rows ``idx`` (``params`` move; the rest keep ``priors``).
        ``prior_weight`` scales the prior residuals (1: the constants' stated spreads).

        ``per_set`` names constants fitted once per measured set (``self.sets``) as nuisances: each
        set's rows are predicted with its own value (prior: the constant's, e.g. a cluster's
        ``host_time_factor``), while ``params`` are shared by every set. The returned Environment
        keeps the nuisances at ``priors``' values (what a cluster never measured gets); the fitted
        ones are in ``info["per_set"]``."""
        from scipy.optimize import least_squares

        priors = priors or Environment.priors()
        groups = list(dict.fromkeys(self.sets[idx])) if per_set else []
        names = list(params) + [(n, g) for g in groups for n in per_set]
        base = [n if isinstance(n, str) else n[0] for n in names]
        x0 = np.array([math.log(priors.param(n)) for n in base])
        sig = np.array([Environment.prior_sigma(n) for n in base])
        by_set = [(g, idx[self.sets[idx] == g]) for g in groups]

        def env_of(x) -> Environment:
            return priors.with_params({n: math.exp(v) for n, v in zip(params, x)})

        def set_envs(x) -> list[tuple[Environment, np.ndarray]]:
            shared = env_of(x)
            vals = dict(zip(names, np.exp(x)))
            return [(shared.with_params({n: vals[(n, g)] for n in per_set}), rows) for g, rows in by_set]

        def fun(x):
            if per_set:
                data = np.concatenate([self.residuals(e, rows) for e, rows in set_envs(x)])
            else:
                data = self.residuals(env_of(x), idx)
            return np.concatenate([_soft_l1(data), prior_weight * (x - x0) / sig])

        start = _coordinate_search(lambda x: float(np.sum(fun(x) ** 2)), x0, sig)
        res = least_squares(fun, start, diff_step=0.02, max_nfev=max_nfev, x_scale=sig)
        env = env_of(res.x)
        info = {"rows": int(len(idx)), "cost": float(res.cost), "nfev": int(res.nfev), "status": int(res.status),
                "values": {n: env.param(n) for n in params}}
        if per_set:
            fitted = dict(zip(names, np.exp(res.x)))
            info["per_set"] = {g: {n: float(fitted[(n, g)]) for n in per_set} for g in groups}
        return env, info


# The coarse search: each constant tried at these multiples of its prior sigma (log space).
SEARCH_STEPS = np.array([-3.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0])
SEARCH_SWEEPS = 2


def _coordinate_search(cost: Callable[[np.ndarray], float], x0: np.ndarray, sig: np.ndarray) -> np.ndarray:
    """A coarse start for the local fit: the step model has flat regions (a loader that keeps up
    has no effect until it is slow enough to set the pace: ``max()`` in the step), where the
    local gradient is zero; trying each constant on a grid around the current point, a few
    sweeps over all of them, finds the region the data point to."""
    x, best = x0.copy(), cost(x0)
    for _ in range(SEARCH_SWEEPS):
        for j in range(len(x)):
            centre = x[j]
            for step in SEARCH_STEPS:
                trial = x.copy()
                trial[j] = centre + step * sig[j]
                c = cost(trial)
                if c < best:
                    best, x = c, trial
    return x


def _soft_l1(r: np.ndarray) -> np.ndarray:
    """Residuals whose squares are the soft-L1 loss ``2 (sqrt(1 + r^2) - 1)``: robust for the data
    (an outlier row pulls linearly, not quadratically) while the priors stay quadratic."""
    return np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))


def group_cv(fitter: Fitter, params: tuple[str, ...], progress: Callable[[str], None] | None = None,
             priors: Environment | None = None) -> tuple[Predicted, dict[str, np.ndarray]]:
    """Leave-one-group-out predictions for every row, and the floor (mean of the fitting rows)."""
    n = len(fitter.rows)
    util, mem, step = np.empty(n), np.empty(n), np.empty(n)
    floor = {"util_pct": np.empty(n), "memory_mib": np.empty(n), "step_time_s": np.empty(n)}
    for g in dict.fromkeys(fitter.groups):
        test = np.flatnonzero(fitter.groups == g)
        train = np.flatnonzero(fitter.groups != g)
        if progress:
            progress(f"held out {g}: fitting on {len(train)} rows")
        env, _ = fitter.fit(train, params, priors=priors)
        p = fitter.predict(env, test)
        util[test], mem[test], step[test] = p.util_pct, p.memory_mib, p.step_time_s
        for key, arr in (("util_pct", fitter.util), ("memory_mib", fitter.memory), ("step_time_s", fitter.step)):
            vals = arr[train]
            vals = vals[~np.isnan(vals)]
            if key == "step_time_s" and len(vals):  # a geometric mean: step times span 1000x
                floor[key][test] = float(np.exp(np.mean(np.log(vals))))
            else:
                floor[key][test] = float(np.mean(vals)) if len(vals) else np.nan
    return Predicted(util, mem, step), floor


def legacy_job(job):
    """The job as gpucast modelled it before surroundings existed: inputs on the GPU, one
    ``loss.item()`` per step, a lazily loaded context."""
    from gpucast.surroundings import Data, Loop, Stack

    return job.with_(data=Data(source="device"), loop=Loop.benchmark(), stack=Stack(lazy_loading=True))


def legacy_env() -> Environment:
    """The constants of that model: no idle-kernel term, a 500 MiB context (300 MiB before Volta)."""
    return Environment.priors().replace(idle_kernel_s=0.0, nvml_tick_s=0.0, cuda_context_lazy_bytes=500 * 2**20,
                                        old_gpu_context_factor=0.6)
