"""Jobs time-sharing one GPU, from their predicted timelines (the two clocks of each job).

A job running alone repeats a step of ``step_s`` seconds in which its kernels hold the GPU
``busy_s`` (the held time: not NVML's reading, which also counts the short idle gaps its counter
does not resolve, ``hidden_s``; :mod:`gpucast.estimate.nvml`) and it is idle the rest, split into ``gaps`` idle periods (between kernels the host has
not launched yet, at syncs, the loader and the loop's host work between steps: the estimator's
:class:`~gpucast.estimate.step.Timeline` counts them). When two or three such jobs share a GPU
their bursts and gaps interleave: one job's kernels run in another's gaps, and where bursts
overlap the GPU alternates between the contexts. This module predicts each job's slowdown
(shared step time over solo step time) for any set of jobs, measured together or never.

A package: the ways one GPU is shared are its modes, one model with one interface. ``mode``
``timeslice`` (time slices, the default) and ``mps`` (MPS without limits: kernels of different jobs
at once, no context switch) are this module's; ``mps:N`` (MPS with per-client SM limits, the device
plugin's replicas) is :mod:`.mps`, on these constants, and HAMi's core limits are a duty cycle on
time slices (:func:`throttled`);
:mod:`.modes` sends a GPU's mode to the right one. :mod:`.model` holds the timelines and constants,
:mod:`.solve` and :mod:`.kernel` (Numba) the fixed-point solve, :mod:`.fit` and :mod:`.pairs` fit the
constants on Gavel's and on current-GPU pairs.

The model is a mean-value analysis of that interleaving with random relative phase (the jobs
are not assumed to lock into a perfect alternation). For job ``i`` among the GPU's jobs, with
``a_j`` the share of time job ``j`` has kernels to run (its *activity* while shared) and the
constants of :class:`Constants`::

    own_i    = busy_i * (1 + switch / slice * P_i) * (1 + bandwidth * sum_{j != i} a_j * m_i * m_j)
    burst_i' = own_i * (1 + sum_{j != i} s_j)
    wait_i   = w_i * sum_{j != i} a_j * (min(slice, run_j) / 2 + switch)
    host_i'  = (step_i - busy_i) * (1 + host * sum_{j != i} h_j)
    step_i'  = min(host_i' + burst_i' + wait_i,  (host_i' + own_i) / (1 - H_i))   (the second: "held")
    a_i      = burst_i' / step_i'

solved by fixed-point iteration. ``s_j`` is ``a_j`` (``Constants.stretch = "want"``, the rule
fitted on Gavel's pairs) or ``busy_j / step_j'``, the share of time ``j``'s kernels run
(``"held"``, fitted on current-GPU pairs of real scripts); ``w_i`` is the number of times per
step ``i`` can be held up: its gaps, or, where its host syncs per step are known
(``JobTimeline.syncs``), those syncs (at least one, at most its gaps: between syncs the host
launches ahead and a waiting kernel queues without stalling it). ``P_i = 1 - prod_{j != i} (1 - a_j)`` is the chance some other
job wants the GPU while ``i`` does (then the contexts alternate every ``slice`` seconds, paying
``switch`` each time); ``run_j = busy_j / gaps_j`` is ``j``'s mean uninterrupted burst, so a job
that returns from an idle gap while another holds the GPU waits for that job's slice (or burst)
to end, half of it on average, plus a switch; ``m`` is a job's memory-bound share of kernel time
(two memory-bound jobs thrash the caches and DRAM rows each other warmed); ``h_j`` is ``j``'s host
share of its step (the jobs share the node's CPU cores). ``H_i = sum_{j != i} busy_j / step_j'``
is the share of the shared step the other jobs' kernels hold the GPU: time slices are exclusive,
so ``i`` loses time (its stretched bursts and its waits together) only while the others' kernels
run, and its own host time and kernels fit in the ``1 - H_i`` left to it, whatever the slice
and however often ``i`` syncs. The bound
makes two light jobs barely slow each other (a job's speed is at least ``1 - sum_j u_j`` of its
neighbours' solo busy shares, less its own switch costs, with host contention and cache thrash
aside); it binds where the per-return waits alone would claim more than the neighbour holds (a
job that syncs often beside one with long bursts). A job alone has slowdown 1. Two
saturated jobs (no gaps) each run at about half speed; two jobs idle half the time each fill each
other's gaps for a slowdown of about 1.3 (random phase; a perfect alternation would be 1.0); a
third job makes every slowdown worse.

Where the physics stops, a learned correction (:attr:`Constants.relief`, :func:`model.relieved`):
each job's loss ``1 - 1 / slowdown`` from the solve is multiplied by ``exp(-relief x max(0, 1 - U_i))``,
``U_i`` the other jobs' summed solo held shares. Beside neighbours that fill the GPU nothing
changes; beside light ones the loss shrinks. On the RTX 3090 pairs of real scripts the solve of
predicted timelines was pessimistic for heavy jobs beside light neighbours (measured 0.96,
predicted 0.87) and right for heavy pairs: a light job's held share as predicted (calibrated to
NVML, which reads the short gaps between tiny kernels as busy) overstates what its kernels take
from a busy GPU. :data:`CURRENT` carries the fitted relief (held out by family it beats the solve
alone: ``benchmarks/results/colocation_current.md``); :data:`FITTED` (Gavel's) has none.

On data-center GPUs the slices are exclusive for the jobs together (:attr:`Constants.exclusive`,
:func:`model.capped`): where the jobs' held shares of their shared steps sum to ``W > 1`` after the
relief, every slowdown is multiplied by ``W``, so their kernels hold at most the whole GPU. The
RTX 3090 pairs did up to a quarter more GPU work per second than that; Gavel's K80/P100/V100 pairs
and our H200's did not. :data:`CURRENT` applies it on any GPU that is not a GeForce card
(``Constants.on(gpu)``; ``benchmarks/results/h200_colocation.md``: per-job speed error 0.195 ->
0.129 on the H200, a constant 0.137); :data:`MEASURED_PAIRS` is the fit as it is, on any GPU.

Time-slicing (the default CUDA behaviour: one context on the GPU at a time) is the mode fitted
here. ``mode="mps"`` states NVIDIA MPS from its documentation (the MPS server funnels the
clients' work into one context, so kernels of different processes run concurrently and there is
no context switch): no slice waits and no switch cost; overlapping bursts still share the SMs
(the ``1 + sum a_j`` stretch) and memory bandwidth. Its constants are not fitted (no measured
MPS pairs here; the measured RTX 3090 pairs ran time-sliced, so they cannot check it). The mode
in force is :func:`set_mode`'s (``gpucast simulate --colocation-mode``); :func:`throttled` puts
HAMi's core limits on top of either mode.

What is modelled: each job's busy time, idle-gap count and host share, memory-boundness, the
constants below. What is not: phase locking, priorities, memory capacity (an over-committed GPU
is an out-of-memory failure in the engine), PCIe/NVLink traffic of multi-GPU jobs, MIG; nor the
host launching ahead through a neighbour's slice (a launch-bound job's kernels delayed by a
neighbour catching up in its own host gaps, the estimator's step with its kernels slowed): the
measured RTX 3090 pairs refute it (launch-bound EfficientNet, whose simulated step does not
lengthen until its kernels are three times slower, loses 7-18 % beside busy neighbours).

How it is solved: fixed-point iteration, damped (:func:`_plain`); time slices with the "held"
stretch (both worlds the simulator runs in) in a fused pass that Numba compiles where it is
installed (:mod:`gpucast.cluster.timeshare.kernel`, ``gpucast[fast]``; the same numbers to the last
bit), and :func:`slowdowns_many` solves many sets in one call.

Two sets of constants, one per generation of measurement. :data:`CURRENT` (gpucast's model, with
the cap on data-center GPUs; the simulator's ``data-center`` world, and without the cap its default
``measured-pairs`` world, :data:`MEASURED_PAIRS`) is fitted on measured pairs of real training scripts on an
RTX 3090 (``benchmarks/colocation_current.py``, :mod:`gpucast.cluster.timeshare.pairs`) with each
job's timeline from gpucast's prediction alone, as gpucast's policies and a user without
measurements see it (held out by family, per-job speed error 0.070 against 0.105 for a constant;
0.058 with the timelines anchored to the measured solo runs: the rest is the predictions' error,
``benchmarks/results/colocation_current.md``). :data:`FITTED` (the ``gavel``
world) is fitted to Gavel's measured co-located pairs on K80, P100 and
V100 (``benchmarks/colocation.py``, :mod:`gpucast.cluster.timeshare.fit`), and so are per-job
corrections of the timelines of Gavel's job types (:data:`GAVEL_CORRECTIONS`, used for those job
types only). Gavel's jobs' timelines are gpucast's predictions anchored to Gavel's measured solo
step times (:func:`anchored`). Held-out error is in ``benchmarks/results/colocation.md``: on
pairs never measured whose job types were measured with others, well below a constant's; on job
families never measured at all, no better than a constant (what the timelines predict about an
unmeasured job's co-location is weak evidence).
"""

from __future__ import annotations

import functools
from typing import Sequence

from gpucast.cluster.timeshare import kernel as timeshare_kernel
from gpucast.cluster.timeshare.model import _HELD_CAP, _ITERATIONS, _TOLERANCE, Constants, JobTimeline, _jit
from gpucast.cluster.timeshare.solve import _canonical, _solve
from gpucast.cluster.timeshare.worlds import _ACTIVE, _MODE


def compiled_scores(c: Constants, mode: str | None = None):
    """:func:`gpucast.cluster.timeshare.kernel.scores` with the solve settings of :func:`slowdowns`
    under constants ``c``, or ``None`` where :func:`slowdowns_many` would not take the compiled
    solve for ``c`` and ``mode`` (MPS, the "want" stretch, Numba missing): the caller works in Python."""
    if not _jit(c, mode or _MODE[0]):
        return None
    return functools.partial(timeshare_kernel.scores, c=c, iterations=_ITERATIONS, tolerance=_TOLERANCE,
                             held_cap=_HELD_CAP)


def slowdowns(jobs: Sequence[JobTimeline], c: Constants | None = None, mode: str | None = None) -> list[float]:
    """Each job's step time when sharing one GPU over its solo step time (>= 1); ``c``: the
    constants (default: :func:`set_constants`'s, :data:`FITTED` unless changed); ``mode``: the
    sharing mode (:data:`MODES`; default: :func:`set_mode`'s, ``timeslice`` unless changed)."""
    n = len(jobs)
    if n <= 1:
        return [1.0] * n
    return list(_solve(jobs, c if c is not None else _ACTIVE[0], mode or _MODE[0])[0])


def slowdowns_many(sets: Sequence[Sequence[JobTimeline]], c: Constants | None = None,
                   mode: str | None = None) -> list[list[float]]:
    """:func:`slowdowns` of each set of jobs in ``sets`` (each set one GPU's jobs), the same
    numbers to the last bit: the sets the compiled solve covers
    (:mod:`gpucast.cluster.timeshare.kernel`) are solved in one call, which spends the
    interpreter's overhead once (a placement asks for hundreds at a time), the rest one by one."""
    c = c if c is not None else _ACTIVE[0]
    mode = mode or _MODE[0]
    out: list = [None] * len(sets)
    batch, where = [], []
    jit = _jit(c, mode)
    for k, jobs in enumerate(sets):
        n = len(jobs)
        if n <= 1:
            out[k] = [1.0] * n
        elif jit:
            order = _canonical(jobs)
            batch.append(tuple(jobs[i] for i in order))
            where.append((k, order))
        else:
            out[k] = list(_solve(jobs, c, mode)[0])
    if batch:
        for (k, order), (sd, _want) in zip(where, timeshare_kernel.solve(batch, c, _ITERATIONS, _TOLERANCE,
                                                                          _HELD_CAP)):
            res = [0.0] * len(order)
            for pos, i in enumerate(order):
                res[i] = sd[pos]
            out[k] = res
    return out


def throttled(jobs: Sequence[JobTimeline], slowdowns_: Sequence[float], cores: Sequence[float | None]) -> list[float]:
    """The slowdowns under per-job core limits on top of either mode: HAMi's ``nvidia.com/gpucores``
    (Volcano's ``vgpu-cores``) lets a job's kernels hold the GPU at most its share ``c`` (0-1] of
    the time, averaged over a window (HAMi's docs: the limiter blocks launches while a container's
    recent utilization is over its limit; alone too, unless the operator's policy says otherwise).
    So a job's step is at least its kernel time over ``c``: slowdown ``max(s, busy / (c x step))``;
    a job whose held share is within its limit is not slowed. ``None`` or ``c >= 1``: no limit.
    Not modelled: the window's length (bursts shorter than it pass at full speed), a limiter that
    lends idle capacity to a busy neighbour."""
    out = []
    for j, s, c in zip(jobs, slowdowns_, cores):
        if c is None or c >= 1.0:
            out.append(s)
            continue
        if not c > 0.0:
            raise ValueError(f"a core limit must be a share in (0, 1], got {c!r}")
        out.append(max(s, j.busy_s / (c * j.step_s)) if j.step_s > 0 else s)
    return out


def throughputs(jobs: Sequence[JobTimeline], c: Constants | None = None, mode: str | None = None) -> float:
    """Summed normalized throughput of the jobs (sum of 1 / slowdown): above 1, sharing pays."""
    return sum(1.0 / s for s in slowdowns(jobs, c, mode))


def held_pct(jobs: Sequence[JobTimeline], c: Constants | None = None, mode: str | None = None) -> float:
    """The share of time (percent) the shared GPU's kernels run: each job's kernels spread over
    its longer step."""
    sd = slowdowns(jobs, c, mode)
    return min(100.0, 100.0 * sum(j.util / s for j, s in zip(jobs, sd)))


def gpu_util_pct(jobs: Sequence[JobTimeline], c: Constants | None = None, mode: str | None = None) -> float:
    """What NVML reports for the shared GPU (percent): the time its kernels run (:func:`held_pct`)
    plus the common idle time the counter's tick misses (:func:`gpucast.estimate.nvml.combined_reported`:
    each job's short gaps, independent phases)."""
    if len(jobs) == 1:
        return 100.0 * jobs[0].reported
    if not jobs:
        return 0.0
    sd, want = _solve(jobs, c if c is not None else _ACTIVE[0], mode or _MODE[0])
    return _util_pct(jobs, sd, want)


def shared_state(jobs: Sequence[JobTimeline], c: Constants | None = None,
                 mode: str | None = None) -> tuple[list[float], float]:
    """:func:`slowdowns` and :func:`gpu_util_pct` of two or more jobs sharing one GPU, from one
    solve (the simulator's engine asks for both whenever a GPU's set of jobs changes); in one
    compiled call where :func:`slowdowns_many` would take the compiled solve (the same numbers)."""
    c = c if c is not None else _ACTIVE[0]
    mode = mode or _MODE[0]
    if _jit(c, mode):
        return timeshare_kernel.state(jobs, c, _ITERATIONS, _TOLERANCE, _HELD_CAP)
    sd, want = _solve(jobs, c, mode)
    return list(sd), _util_pct(jobs, sd, want)


def _util_pct(jobs: Sequence[JobTimeline], sd, want) -> float:
    """:func:`gpu_util_pct` of two or more jobs from their solve (``_solve``'s slowdowns and
    shares of time wanting the GPU)."""
    from gpucast.estimate.nvml import combined_reported, idle_visible

    held = [j.util / s for j, s in zip(jobs, sd)]
    seen = [idle_visible(j.step_s * s, w, j.hidden_s) for j, s, w in zip(jobs, sd, want)]
    return 100.0 * combined_reported(held, seen)
