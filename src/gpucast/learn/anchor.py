"""The step timeline a measured run implies: gpucast's simulated step, rescaled to what was measured.

A solo run measured on a GPU gives its step time and the utilization NVML reported; gpucast's
step simulation (:meth:`gpucast.estimate.Prepared.run`) gives a kernel and gap sequence for any
kernel-time factor ``k`` and host-time factor ``h``. :func:`anchor` finds the ``(k, h)`` whose
simulated step matches the measured step time and, where it was measured, the measured
utilization (through NVML's sampler rule, :mod:`gpucast.estimate.nvml`), with a prior on ``k``
(the kernel model is trusted to within :data:`KERNEL_PRIOR_SIGMA`; the host, on an old stack or a
slow CPU, far less: :data:`HOST_PRIOR_SIGMA`). The result says how much of the measured step the
kernels really hold the GPU and how the idle time falls into gaps: what the co-location model
(:mod:`gpucast.cluster.timeshare`) interleaves, where the measured utilization alone (a sampled
count that reads short gaps as busy) would overstate the GPU time a neighbour competes for.

What is not modelled: a measured step the simulation cannot reach with any factors (then the
nearest one is kept, and ``residual`` says how far it is), per-op variation of the factors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Log-space spreads of the factors' priors: the kernel model lands within ~5-20 % of measured
# GPU-bound step times (benchmarks/results/gavel_compare.md), so 0.25; the host's cost spans
# several times across CPUs and PyTorch releases (Environment.host_time_factor's source), so 1.5.
KERNEL_PRIOR_SIGMA = 0.25
HOST_PRIOR_SIGMA = 1.5
# Relative tolerances of the match (our choice: well inside the measurements' own noise).
STEP_TOLERANCE = 0.01
UTIL_TOLERANCE_LOGIT = 0.03


@dataclass(frozen=True)
class Anchored:
    step_s: float          # the simulated step time at the factors (~ the measured one)
    busy_s: float          # kernel seconds per step: the GPU time the job holds
    util_pct: float        # what NVML reports for that step (~ the measured one)
    gaps: int              # idle periods of the GPU per step
    syncs: int             # points per step where the host waits for the GPU
    hidden_s: float        # idle seconds per step that NVML reads as busy (short gaps)
    kernel_factor: float
    host_factor: float
    residual: float        # the remaining mismatch (log step and logit util, in tolerances)

    @property
    def held_pct(self) -> float:
        return 100.0 * self.busy_s / self.step_s if self.step_s > 0 else 0.0


def _logit(u: float) -> float:
    u = min(max(u, 1e-4), 1 - 1e-4)
    return math.log(u / (1 - u))


def anchor(prepared, env, step_s: float, util_pct: float | None = None) -> Anchored:
    """The simulated step of ``prepared`` (a :class:`gpucast.estimate.Prepared`) under ``env``,
    with kernel and host factors that match the measured ``step_s`` and ``util_pct``."""
    import numpy as np
    from scipy.optimize import least_squares

    from gpucast.estimate import reported_util
    from gpucast.estimate.nvml import hidden_idle_s

    if not step_s > 0:
        raise ValueError(f"a measured step time must be positive, got {step_s!r}")
    memo = {}

    def run(x):
        key = (round(float(x[0]), 9), round(float(x[1]), 9))
        if key not in memo:
            memo[key] = prepared.run(env, math.exp(x[0]), math.exp(x[1]))[0]
        return memo[key]

    def resid(x):
        tl = run(x)
        r = [math.log(tl.step_time_s / step_s) / STEP_TOLERANCE]
        if util_pct is not None:
            r.append((_logit(reported_util(tl, env)) - _logit(util_pct / 100.0)) / UTIL_TOLERANCE_LOGIT)
        r += [x[0] / KERNEL_PRIOR_SIGMA, x[1] / HOST_PRIOR_SIGMA]
        return np.array(r)

    tl0 = run(np.zeros(2))
    # start: the whole mismatch in the host when the job waits on its host, else in the kernels
    ratio = math.log(step_s / tl0.step_time_s)
    lo, hi = np.array([-3.0, -4.0]), np.array([3.0, 9.0])
    starts = [np.array([0.0, ratio]), np.array([ratio, 0.0]), np.zeros(2)]
    best = None
    for x0 in starts:
        x0 = np.clip(x0, lo + 1e-6, hi - 1e-6)
        r = least_squares(resid, x0, bounds=(lo, hi), diff_step=1e-3, max_nfev=80)
        if best is None or r.cost < best.cost:
            best = r
    tl = run(best.x)
    fit_res = resid(best.x)[: 2 if util_pct is not None else 1]
    return Anchored(step_s=tl.step_time_s, busy_s=tl.gpu_busy_s, util_pct=100.0 * reported_util(tl, env),
                    gaps=int(tl.idle_gaps), syncs=int(tl.syncs), hidden_s=hidden_idle_s(tl.gap_lengths, env.nvml_tick_s),
                    kernel_factor=math.exp(best.x[0]), host_factor=math.exp(best.x[1]),
                    residual=float(np.sqrt(np.mean(fit_res ** 2))))
