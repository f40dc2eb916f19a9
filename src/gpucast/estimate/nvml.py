"""Two numbers for a job's GPU use: the share of time its kernels hold the GPU, and what NVML says.

NVML's ``utilization.gpu`` is documented as the "percent of time over the past sample period
during which one or more kernels was executing on the GPU" (NVML API reference,
``nvmlUtilization_t``; the averaging period is 1/6 s to 1 s depending on the product). It is not
the kernels' summed run time: the counter watches the graphics/compute engine in short ticks and a
tick counts as busy when any work was running (or queued to run) in it. A gap between kernels
shorter than a tick therefore reads busy, and a longer gap hides one tick's worth of its idle time.
Users on NVIDIA's forum report the consequence: kernel activity records (CUPTI) of two processes
training EfficientNet-B0 at batch 2 add up to 50 % while NVML shows 90 % ("Why the utilization
from kernel activity records is not equal to GPU Utilization?", NVIDIA developer forums, 2024).

So, for one step of ``step_s`` seconds in which the kernels run ``busy_s`` and the GPU idles in
gaps ``g_k`` (the estimator's :class:`~gpucast.estimate.step.Timeline`: between kernels the host
has not launched yet, at syncs, the loader and the loop between steps), with ``tau`` the tick
(:attr:`~gpucast.estimate.environment.Environment.nvml_tick_s`) and random phase::

    held share     = busy_s / step_s
    reported share = 1 - sum_k max(0, g_k - tau) / step_s  = (busy_s + sum_k min(g_k, tau)) / step_s

(a tick lies wholly inside a gap of length ``g`` for a share ``(g - tau)+`` of the time). The
held share is what a neighbour on the same GPU competes for (:mod:`gpucast.cluster.timeshare`);
the reported share is ``Prediction.gpu_util_pct``. The reported share is never below the held one.

Jobs sharing a GPU (time-sliced) run their kernels one context at a time, so the GPU is busy
``H = sum_i h_i`` of the time (``h_i``: each job's held share of wall time while shared) and idle
the rest, when every job is between kernels. A moment of that idle time reads idle only if each
job is then in a part of its own idle time the tick resolves; with independent phases (the
co-location model's assumption) and ``v_i`` the share of job ``i``'s idle time that reads idle::

    reported = H + (1 - H) * (1 - prod_i v_i)

(:func:`combined_reported`): the held time plus the common idle time the counter misses.

What is not modelled: the tick's exact length (undocumented; fitted), sample periods that straddle
phases of a run (the steady state is assumed), engines other than graphics/compute (copy engines
do not count), MIG.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def hidden_idle_s(gap_lengths, tick_s: float) -> float:
    """Idle seconds per step that the counter reads as busy: ``sum_k min(g_k, tick_s)``."""
    if tick_s <= 0:
        return 0.0
    g = np.asarray(gap_lengths, dtype=float)
    if g.size == 0:
        return 0.0
    return float(np.minimum(g, tick_s).sum())


def held_share(step_s: float, busy_s: float) -> float:
    """The share of the step the job's kernels hold the GPU (0-1)."""
    if step_s <= 0:
        return 0.0
    return min(1.0, max(0.0, busy_s / step_s))


def reported_share(step_s: float, busy_s: float, gap_lengths, tick_s: float) -> float:
    """What NVML's ``utilization.gpu`` reports for the step (0-1): the held share plus the idle
    time in gaps the counter's tick does not resolve (module docstring)."""
    if step_s <= 0:
        return 0.0
    return min(1.0, max(0.0, (busy_s + hidden_idle_s(gap_lengths, tick_s)) / step_s))


def combined_reported(held: Sequence[float], idle_visible: Sequence[float]) -> float:
    """The reported share (0-1) of a GPU shared by jobs whose held shares of wall time are
    ``held`` and the shares of whose idle time read idle are ``idle_visible`` (module docstring)."""
    h = min(1.0, max(0.0, sum(held)))
    seen = 1.0
    for v in idle_visible:
        seen *= min(1.0, max(0.0, v))
    return min(1.0, h + (1.0 - h) * (1.0 - seen))


def idle_visible(step_s: float, want_share: float, hidden_s: float) -> float:
    """The share of a job's idle time (``step_s * (1 - want_share)`` of a step in which it wants
    the GPU ``want_share`` of the time) that reads idle, when ``hidden_s`` of it lies in gaps the
    tick does not resolve."""
    idle = step_s * (1.0 - min(1.0, max(0.0, want_share)))
    if idle <= 0:
        return 1.0
    return max(0.0, 1.0 - hidden_s / idle)
