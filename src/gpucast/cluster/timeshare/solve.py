"""The fixed-point solve of :mod:`gpucast.cluster.timeshare`'s interleaving equations (that module's
docstring states them): one set of jobs in canonical order (:func:`_plain`: damped iteration, time
slices with the "held" stretch in one fused pass, compiled by Numba where installed through
:mod:`gpucast.cluster.timeshare.kernel`; cached per set by :func:`_cached`) and many sets at once
as arrays (:func:`solve`, under the constants it is given). :mod:`gpucast.cluster.timeshare` re-exports
these names.
"""

from __future__ import annotations

import functools
from typing import Sequence


from gpucast.cluster.timeshare import kernel as timeshare_kernel
from gpucast.cluster.timeshare.model import (_HELD_CAP, _ITERATIONS, _TOLERANCE, Constants, JobTimeline, _by_held,
                                             _jit, _waits, finished)


def _canonical(jobs: Sequence[JobTimeline]) -> list[int]:
    """The order a set of jobs is solved in, whatever order they came in (by :func:`_key`)."""
    return sorted(range(len(jobs)), key=lambda i: _key(jobs[i]))


def _key(j: JobTimeline) -> tuple:
    return (j.step_s, j.busy_s, j.gaps, j.mem_bound, j.hidden_s, -1.0 if j.syncs is None else j.syncs)


def _solve(jobs: Sequence[JobTimeline], c: Constants, mode: str) -> tuple[tuple, tuple]:
    """:func:`_cached` on the jobs in a canonical order (the model does not care which job was
    placed first), answered in the caller's order: one solve per set of jobs, not per ordering."""
    n = len(jobs)
    order = _canonical(jobs)
    sd, want = _cached(tuple(jobs[i] for i in order), c, mode)
    out_sd, out_want = [0.0] * n, [0.0] * n
    for k, i in enumerate(order):
        out_sd[i], out_want[i] = sd[k], want[k]
    return tuple(out_sd), tuple(out_want)


@functools.lru_cache(maxsize=1 << 17)
def _cached(jobs: tuple, c: Constants, mode: str) -> tuple:
    """One GPU's slowdowns and each job's share of its shared step spent wanting the GPU
    (bursts and waits), remembered (a simulation asks for the same few job sets again and
    again): :func:`_plain`."""
    return _plain(jobs, c, mode)


def _plain(jobs: tuple, c: Constants, mode: str, fused: bool = True) -> tuple:
    """:func:`solve`'s iteration in plain Python, which for two to four jobs is ten times faster
    than numpy's (tests check the two agree); ``fused``: time slices with the "held" stretch take
    :func:`_iterate_held`, the same arithmetic in fewer passes (``False``: the general loop, which
    tests compare it with)."""
    if mode not in ("timeslice", "mps"):
        raise ValueError(f"unknown sharing mode {mode!r} (timeslice, mps)")
    if fused and _jit(c, mode):
        return timeshare_kernel.solve([jobs], c, _ITERATIONS, _TOLERANCE, _HELD_CAP)[0]
    n = len(jobs)
    step = [max(j.step_s, 1e-12) for j in jobs]
    busy = [min(max(j.busy_s, 0.0), s) for j, s in zip(jobs, step)]
    gaps = [float(j.gaps) for j in jobs]
    waits = [_waits(j.gaps, j.syncs) for j in jobs]
    m = [min(1.0, max(0.0, j.mem_bound)) for j in jobs]
    host = [s - b for s, b in zip(step, busy)]
    hshare = [h / s for h, s in zip(host, step)]
    hsum = sum(hshare)
    run = [b / max(g, 1.0) if g >= 1.0 else b for b, g in zip(busy, gaps)]
    ts = mode == "timeslice"
    by_held = _by_held(c)
    host_new = [h * (1.0 + c.host * (hsum - x)) for h, x in zip(host, hshare)]
    act = [b / s for b, s in zip(busy, step)]
    ratio = c.switch_s / c.slice_s
    cost = [min(c.slice_s, r) / 2.0 + c.switch_s for r in run]
    new = list(step)
    want = [a for a in act]
    hs = list(act)          # the held shares of the shared steps (stretch "held"), damped like act
    rng = range(n)
    bw = c.bandwidth
    if ts and by_held and fused:
        sd, want = _iterate_held(n, step, busy, waits, m, host_new, act, ratio, cost, new, want, hs, bw)
        return finished(sd, [b / s for b, s in zip(busy, step)], c), want
    for _ in range(_ITERATIONS):
        amsum = sum([a * q for a, q in zip(act, m)])
        run_share = hs if by_held else act
        asum = sum(run_share)
        if ts:
            psum = sum([a * k for a, k in zip(act, cost)])
            fr = [1.0 - a if a < 1.0 else 0.0 for a in act]
            if n == 2:
                others_free = (fr[1], fr[0])
            else:   # the product of the others' free shares: prefix times suffix products
                pre, suf = [1.0] * n, [1.0] * n
                for k in range(1, n):
                    pre[k] = pre[k - 1] * fr[k - 1]
                    suf[n - 1 - k] = suf[n - k] * fr[n - k]
                others_free = [x * y for x, y in zip(pre, suf)]
        hsum = sum(hs) if by_held else 0.0
        nact = []
        for i in rng:
            ai = act[i]
            thrash = 1.0 + bw * m[i] * (amsum - ai * m[i])
            burst = busy[i] * (1.0 + asum - run_share[i]) * thrash
            wait = 0.0
            if ts:
                sw = 1.0 + ratio * (1.0 - others_free[i])
                burst *= sw
                wait = waits[i] * (psum - ai * cost[i])
            t = host_new[i] + burst + wait
            w = (burst + wait) / t
            if ts and by_held:
                # exclusive slices: the others hold the GPU a share H of the shared step, so the
                # step is at most the job's own host time and kernels over the 1 - H left to it
                held = min(hsum - hs[i], _HELD_CAP)
                bound = (host_new[i] + busy[i] * thrash * sw) / (1.0 - held)
                if t > bound:
                    t = bound
                    w = (t - host_new[i]) / t
            new[i] = t
            want[i] = min(1.0, w)
            nact.append(min(1.0, burst / t))
        done = max(abs(x - y) for x, y in zip(nact, act)) < _TOLERANCE
        act = [0.5 * (x + y) for x, y in zip(nact, act)]
        if by_held:
            nhs = [b / t for b, t in zip(busy, new)]
            done = done and max(abs(x - y) for x, y in zip(nhs, hs)) < _TOLERANCE
            hs = [0.5 * (x + y) for x, y in zip(nhs, hs)]
        if done:
            break
    sd = finished(tuple(max(1.0, t / s) for t, s in zip(new, step)), [b / s for b, s in zip(busy, step)], c)
    return sd, tuple(want)


def _iterate_held(n, step, busy, waits, m, host_new, act, ratio, cost, new, want, hs, bw) -> tuple:
    """:func:`_cached`'s iteration for time slices with the "held" stretch (both worlds the
    simulator runs in), fused into one pass over the jobs per round: every float operation of the
    general loop, in the same order on the same operands, so the result is the same to the last
    bit (``tests/cluster/test_timeshare.py`` compares the two); only repeated products
    (``act * m``, ``act * cost``, ``bandwidth * m``) are computed once per round and read back."""
    bwm = [bw * q for q in m]
    rng = range(n)
    cap = _HELD_CAP
    tol = _TOLERANCE
    act, hs = list(act), list(hs)        # updated in place below, one job at a time
    am = [a * q for a, q in zip(act, m)]
    pk = [a * k for a, k in zip(act, cost)]
    fr = [1.0 - a if a < 1.0 else 0.0 for a in act]
    for _ in range(_ITERATIONS):
        amsum = sum(am)
        asum = sum(hs)
        psum = sum(pk)
        if n == 2:
            others_free = (fr[1], fr[0])
        else:
            pre, suf = [1.0] * n, [1.0] * n
            for k in range(1, n):
                pre[k] = pre[k - 1] * fr[k - 1]
                suf[n - 1 - k] = suf[n - k] * fr[n - k]
            others_free = [x * y for x, y in zip(pre, suf)]
        hsum = asum
        done = True
        # Job i reads the round's sums (above) and only its own entries of act, hs, am, pk and
        # fr, so each is replaced by its next round's value as soon as job i is done with it.
        for i in rng:
            hsi = hs[i]
            thrash = 1.0 + bwm[i] * (amsum - am[i])
            bi = busy[i]
            burst = bi * (1.0 + asum - hsi) * thrash
            sw = 1.0 + ratio * (1.0 - others_free[i])
            burst *= sw
            wait = waits[i] * (psum - pk[i])
            hn = host_new[i]
            t = hn + burst + wait
            w = (burst + wait) / t
            held = hsum - hsi
            if cap < held:
                held = cap
            bound = (hn + bi * thrash * sw) / (1.0 - held)
            if t > bound:
                t = bound
                w = (t - hn) / t
            new[i] = t
            want[i] = 1.0 if not w < 1.0 else w
            x = burst / t
            if not x < 1.0:
                x = 1.0
            ai = act[i]
            h = bi / t
            if done and not (abs(x - ai) < tol and abs(h - hsi) < tol):
                done = False
            a = 0.5 * (x + ai)
            act[i] = a
            hs[i] = 0.5 * (h + hsi)
            am[i] = a * m[i]
            pk[i] = a * cost[i]
            fr[i] = 1.0 - a if a < 1.0 else 0.0
        if done:
            break
    return tuple(max(1.0, t / s) for t, s in zip(new, step)), tuple(want)


def solve(step, busy, gaps, mem_bound, c: Constants, mode: str = "timeslice", wants: bool = False,
          syncs=None):
    """:func:`slowdowns` over arrays of shape ``(jobs on the GPU, cases)``: column ``k`` is one
    GPU's set of jobs (for fitting on many measured pairs at once). Returns the slowdowns, same
    shape (``wants``: and each job's share of its shared step spent wanting the GPU; ``syncs``:
    the jobs' :attr:`JobTimeline.syncs`, same shape, NaN or None: as many as gaps)."""
    import numpy as np

    if mode not in ("timeslice", "mps"):
        raise ValueError(f"unknown sharing mode {mode!r} (timeslice, mps)")
    step = np.maximum(np.asarray(step, dtype=float), 1e-12)
    busy = np.clip(np.asarray(busy, dtype=float), 0.0, step)
    gaps = np.asarray(gaps, dtype=float)
    waits = gaps if syncs is None else np.where(np.isnan(np.asarray(syncs, dtype=float)), gaps,
                                                np.minimum(gaps, np.maximum(1.0, np.asarray(syncs, dtype=float))))
    m = np.clip(np.asarray(mem_bound, dtype=float), 0.0, 1.0)
    n = step.shape[0]
    if n <= 1:
        return (np.ones_like(step), busy / step) if wants else np.ones_like(step)
    host = step - busy
    hshare = host / step
    run = np.where(gaps >= 1.0, busy / np.maximum(gaps, 1.0), busy)
    ts = mode == "timeslice"
    by_held = _by_held(c)
    host_new = host * (1.0 + c.host * (hshare.sum(0) - hshare))
    act = busy / step
    new = step
    want = act
    hs = act
    for _ in range(_ITERATIONS):
        share = hs if by_held else act
        others = share.sum(0) - share
        thrash = 1.0 + c.bandwidth * m * ((act * m).sum(0) - act * m)
        burst = busy * (1.0 + others) * thrash
        wait = 0.0
        if ts:
            free = 1.0 - np.minimum(1.0, act)
            if n == 2:
                p_other = 1.0 - free[::-1]
            else:   # the product of the others' free shares: prefix times suffix products
                ones = np.ones_like(free[:1])
                pre = np.cumprod(np.concatenate([ones, free[:-1]]), axis=0)
                suf = np.cumprod(np.concatenate([ones, free[::-1][:-1]]), axis=0)[::-1]
                p_other = 1.0 - pre * suf
            sw = 1.0 + (c.switch_s / c.slice_s) * p_other
            burst = burst * sw
            per = act * (np.minimum(c.slice_s, run) / 2.0 + c.switch_s)
            wait = waits * (per.sum(0) - per)
        new = host_new + burst + wait
        want = np.minimum(1.0, (burst + wait) / new)
        if ts and by_held:     # exclusive slices (see _cached)
            held = np.minimum(hs.sum(0) - hs, _HELD_CAP)
            bound = (host_new + busy * thrash * sw) / (1.0 - held)
            over = new > bound
            if over.any():
                new = np.where(over, bound, new)
                want = np.where(over, np.minimum(1.0, (new - host_new) / new), want)
        nact = np.minimum(1.0, burst / new)
        done = np.max(np.abs(nact - act)) < _TOLERANCE
        act = 0.5 * (nact + act)      # damped: converges for 2-4 jobs
        if by_held:
            nhs = busy / new
            done = done and np.max(np.abs(nhs - hs)) < _TOLERANCE
            hs = 0.5 * (nhs + hs)
        if done:
            break
    sd = np.maximum(1.0, new / step)
    if c.relief > 0.0:     # relieved(), over the columns
        util = busy / step
        free = 1.0 - (util.sum(0) - util)
        loss = (1.0 - 1.0 / sd) * np.exp(-c.relief * np.maximum(free, 0.0))
        sd = np.where(free > 0.0, 1.0 / (1.0 - loss), sd)
    if c.exclusive == "yes":     # capped(), over the columns
        w = (busy / step / sd).sum(0)
        sd = np.where(w > 1.0, sd * w, sd)
    return (sd, want) if wants else sd
