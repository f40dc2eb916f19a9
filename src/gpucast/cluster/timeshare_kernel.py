"""The co-location solve of :mod:`gpucast.cluster.timeshare` for time slices with the "held"
stretch (both worlds the simulator runs in), compiled with Numba: many sets of jobs in one call.

What it computes: exactly :func:`gpucast.cluster.timeshare._plain` with ``fused=True`` (its
preamble, then :func:`~gpucast.cluster.timeshare._iterate_held`), every float operation in the
same order on the same operands, compiled without ``fastmath`` (so LLVM neither reorders nor
fuses them), hence the same result to the last bit (``tests/cluster/test_timeshare_kernel.py``
compares the two on random sets and on a simulation). The sums are sequential, as CPython's
``sum`` of floats is up to 3.11; from 3.12 CPython compensates its float sums (Neumaier), so there the
two paths agree to about 1e-15 instead of bit for bit (the test says which it checks).

Why: the oracle policy asks for millions of distinct sets on a 100,000-job trace (its true
timelines differ per job profile and GPU count: 90 keys where gpucast's predictions have 26), and the
pure-Python iteration costs about 200 us per set; compiled it is about 1 us, and one call for
all the sets a placement needs spends the interpreter's overhead once
(``benchmarks/results/sim_scale.md``).

What is not here: the "want" stretch, MPS and the general (unfused) loop stay in Python (the
simulator's worlds do not use them; :func:`gpucast.cluster.timeshare._plain` takes them).
Numba is optional (``pip install gpucast[fast]``): without it, or with ``GPUCAST_NO_JIT=1`` in the
environment, :func:`available` is False and every solve runs in Python, with the same results.
"""

from __future__ import annotations

import os

import numpy as np

_STATE: dict = {}


def available() -> bool:
    """Whether the compiled solve can be used (Numba imports and ``GPUCAST_NO_JIT`` was not set
    when it was first asked). Imports Numba on the first call (about 0.4 s); the kernel is
    compiled, or loaded from Numba's on-disk cache, on its first use (about 3 s, then 0.3 s)."""
    ok = _STATE.get("ok")
    if ok is None:
        if os.environ.get("GPUCAST_NO_JIT"):
            return False
        try:
            import numba  # noqa: F401
            ok = True
        except Exception:       # not installed, or broken on this platform: Python does it
            ok = False
        _STATE["ok"] = ok
    return ok


def _kernel():
    k = _STATE.get("kernel")
    if k is None:
        import numba

        k = _STATE["kernel"] = numba.njit(cache=True, fastmath=False, nogil=True)(_solve_sets)
    return k


def solve(sets, c, iterations: int, tolerance: float, held_cap: float):
    """Slowdowns and wanting shares of each set of :class:`~gpucast.cluster.timeshare.JobTimeline`
    in ``sets`` (each a sequence of at least two jobs, in the order the caller solves them) under
    constants ``c``: a list of ``(slowdowns, wants)`` tuples, as ``_plain`` returns them."""
    nan = _NAN
    flat = [x for jobs in sets for j in jobs
            for x in (j.step_s, j.busy_s, j.gaps, j.mem_bound, nan if j.syncs is None else j.syncs)]
    count = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    sd, want = _kernel()(np.array(flat, dtype=np.float64), count, float(c.host), float(c.switch_s),
                         float(c.slice_s), float(c.bandwidth), int(iterations), float(tolerance),
                         float(held_cap))
    sdl, wl = sd.tolist(), want.tolist()
    out, o = [], 0
    for n in count.tolist():
        out.append((tuple(sdl[o:o + n]), tuple(wl[o:o + n])))
        o += n
    return out


_NAN = float("nan")


def _solve_sets(flat, count, c_host, switch_s, slice_s, bw, iterations, tol,
                cap):  # pragma: no cover - compiled; the tests compare it with Python
    # flat: (step_s, busy_s, gaps, mem_bound, syncs or NaN) of every job, set after set; count:
    # the jobs of each set. Returns the slowdowns and wanting shares, one per job, in that order.
    width = 1
    for r in range(count.shape[0]):
        if count[r] > width:
            width = count[r]
    out_sd = np.ones(flat.shape[0] // 5)
    out_want = np.zeros(flat.shape[0] // 5)
    step = np.empty(width)
    busy = np.empty(width)
    gaps = np.empty(width)
    waits = np.empty(width)
    m = np.empty(width)
    host_new = np.empty(width)
    act = np.empty(width)
    cost = np.empty(width)
    new = np.empty(width)
    want = np.empty(width)
    hs = np.empty(width)
    bwm = np.empty(width)
    am = np.empty(width)
    pk = np.empty(width)
    fr = np.empty(width)
    pre = np.empty(width)
    suf = np.empty(width)
    of = np.empty(width)
    ratio = switch_s / slice_s
    base = 0
    for r in range(count.shape[0]):
        n = count[r]
        # _plain's preamble, job by job, in its order
        hsum = 0.0
        for i in range(n):
            o = 5 * (base + i)
            s = flat[o]
            if 1e-12 > s:
                s = 1e-12
            step[i] = s
            b = flat[o + 1]
            if 0.0 > b:
                b = 0.0
            if s < b:
                b = s
            busy[i] = b
            g = flat[o + 2]
            gaps[i] = g
            y = flat[o + 4]
            if y != y:                          # NaN: syncs not known
                waits[i] = g
            else:
                if 1.0 > y:
                    y = 1.0
                waits[i] = y if y < g else g
            q = flat[o + 3]
            if 0.0 > q:
                q = 0.0
            if q > 1.0:
                q = 1.0
            m[i] = q
            hsum += (s - b) / s
        for i in range(n):
            s = step[i]
            b = busy[i]
            g = gaps[i]
            h = s - b
            x = h / s
            host_new[i] = h * (1.0 + c_host * (hsum - x))
            a = b / s
            act[i] = a
            if g >= 1.0:
                run = b / (g if g > 1.0 else 1.0)
            else:
                run = b
            cost[i] = (run if run < slice_s else slice_s) / 2.0 + switch_s
            new[i] = s
            want[i] = a
            hs[i] = a
            bwm[i] = bw * m[i]
            am[i] = a * m[i]
            pk[i] = a * cost[i]
            fr[i] = 1.0 - a if a < 1.0 else 0.0
        # _iterate_held
        for _ in range(iterations):
            amsum = 0.0
            asum = 0.0
            psum = 0.0
            for i in range(n):
                amsum += am[i]
            for i in range(n):
                asum += hs[i]
            for i in range(n):
                psum += pk[i]
            if n == 2:
                of[0] = fr[1]
                of[1] = fr[0]
            else:
                for i in range(n):
                    pre[i] = 1.0
                    suf[i] = 1.0
                for j in range(1, n):
                    pre[j] = pre[j - 1] * fr[j - 1]
                    suf[n - 1 - j] = suf[n - j] * fr[n - j]
                for i in range(n):
                    of[i] = pre[i] * suf[i]
            hsum = asum
            done = True
            for i in range(n):
                hsi = hs[i]
                thrash = 1.0 + bwm[i] * (amsum - am[i])
                bi = busy[i]
                burst = bi * (1.0 + asum - hsi) * thrash
                sw = 1.0 + ratio * (1.0 - of[i])
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
        for i in range(n):
            v = new[i] / step[i]
            out_sd[base + i] = v if v > 1.0 else 1.0
            out_want[base + i] = want[i]
        base += n
    return out_sd, out_want
