"""The Numba-compiled bodies of :mod:`gpucast.cluster.timeshare.kernel` (that module says what
they compute and why; it holds their Python entry points). All in this one file: Numba's on-disk
cache checks only the file of the function it caches, so a compiled caller and its compiled callees
change together. Every function here also runs as plain Python (the tests compare the two).
"""

from __future__ import annotations

import math

import numpy as np


def build() -> dict:
    """The helpers compiled first and put in this module's namespace under their own names, where
    the kernels that call them find them; then the kernels: ``sets`` (many sets' slowdowns),
    ``scores`` (the policies' placement scores) and ``state`` (one set's slowdowns and NVML reading)."""
    import numba

    jit = numba.njit(cache=True, fastmath=False, nogil=True)
    g = globals()
    for name in ("_solve_one", "_before", "_solve_order", "_set_slowdowns"):   # callees first
        if not hasattr(g[name], "py_func"):
            g[name] = jit(g[name])
    return {"sets": jit(_solve_sets), "scores": jit(_score_sets), "state": jit(_state)}


def _solve_sets(flat, count, c_host, switch_s, slice_s, bw, iterations, tol,
                cap, relief, exclusive):  # pragma: no cover - compiled; the tests compare it with Python
    # flat: (step_s, busy_s, gaps, mem_bound, syncs or NaN) of every job, set after set; count:
    # the jobs of each set. Returns the slowdowns and wanting shares, one per job, in that order.
    width = 1
    for r in range(count.shape[0]):
        if count[r] > width:
            width = count[r]
    out_sd = np.ones(flat.shape[0] // 5)
    out_want = np.zeros(flat.shape[0] // 5)
    scratch = np.empty((_SCRATCH, width))
    base = 0
    for r in range(count.shape[0]):
        n = count[r]
        _solve_one(flat, base, n, c_host, switch_s, slice_s, bw, iterations, tol, cap, relief, exclusive, scratch,
                   out_sd, out_want)
        base += n
    return out_sd, out_want


_SCRATCH = 18   # rows of _solve_one's scratch array


def _solve_one(flat, base, n, c_host, switch_s, slice_s, bw, iterations, tol, cap, relief, exclusive, scratch, out_sd,
               out_want):  # pragma: no cover - compiled; the tests compare it with Python
    # One set: the n jobs from job ``base`` of ``flat`` (5 values each, as _solve_sets reads them),
    # their slowdowns and wanting shares written to out_sd/out_want from index ``base``.
    step = scratch[0]
    busy = scratch[1]
    gaps = scratch[2]
    waits = scratch[3]
    m = scratch[4]
    host_new = scratch[5]
    act = scratch[6]
    cost = scratch[7]
    new = scratch[8]
    want = scratch[9]
    hs = scratch[10]
    bwm = scratch[11]
    am = scratch[12]
    pk = scratch[13]
    fr = scratch[14]
    pre = scratch[15]
    suf = scratch[16]
    of = scratch[17]
    ratio = switch_s / slice_s
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
    util_sum = 0.0                          # model.relieved: the others' summed held shares
    if relief > 0.0:
        for i in range(n):
            util_sum += busy[i] / step[i]
    for i in range(n):
        v = new[i] / step[i]
        if not v > 1.0:
            v = 1.0
        elif relief > 0.0:
            free = 1.0 - (util_sum - busy[i] / step[i])
            if free > 0.0:
                v = 1.0 / (1.0 - (1.0 - 1.0 / v) * math.exp(-relief * free))
        out_sd[base + i] = v
        out_want[base + i] = want[i]
    if exclusive:                           # model.capped: the kernels together hold one GPU at most
        w = 0.0
        for i in range(n):
            w += busy[i] / step[i] / out_sd[base + i]
        if w > 1.0:
            for i in range(n):
                out_sd[base + i] *= w


_KEY_COLUMNS = (0, 1, 2, 3, 5, 6)   # timeshare._key's fields: the solve order of a set


def _score_sets(table, nres, rows, eqs, gmem, cbefore, cknown, ids, jrow, jeq, pairs, use_pairs, cap, min_gain,
                consolidate, slice_cost, c_host, switch_s, slice_s, bw, iterations, tol,
                held_cap, relief, exclusive):  # pragma: no cover - compiled; the tests compare it with Python
    K = ids.shape[0]
    width = rows.shape[1] + 1
    out = np.empty(K)
    scratch = np.empty((_SCRATCH, width))
    buf = np.empty(5 * width)
    sd_s = np.empty(width)
    want_s = np.empty(width)
    before = np.empty(width)
    after = np.empty(width)
    ridx = np.empty(width, dtype=np.int64)
    reqs = np.empty(width, dtype=np.int64)
    order = np.empty(width, dtype=np.int64)
    jmem = table[jrow, 7]
    for q in range(K):
        r = ids[q]
        n = nres[r]
        if n >= cap:
            out[q] = np.nan
            continue
        if n == 0:
            out[q] = slice_cost
            continue
        mem = 0.0
        for i in range(n):
            mem += table[rows[r, i], 7]
        if mem + jmem > gmem[r]:
            out[q] = np.nan
            continue
        for i in range(n):
            ridx[i] = rows[r, i]
            reqs[i] = eqs[r, i]
        if n == 1:
            before[0] = 1.0
        elif cknown[r]:
            for i in range(n):
                before[i] = cbefore[r, i]
        else:
            _set_slowdowns(table, ridx, reqs, n, pairs, use_pairs, c_host, switch_s, slice_s, bw, iterations,
                           tol, held_cap, relief, exclusive, scratch, buf, order, sd_s, want_s, before)
            for i in range(n):
                cbefore[r, i] = before[i]
            cknown[r] = True
        ridx[n] = jrow
        reqs[n] = jeq
        _set_slowdowns(table, ridx, reqs, n + 1, pairs, use_pairs, c_host, switch_s, slice_s, bw, iterations,
                       tol, held_cap, relief, exclusive, scratch, buf, order, sd_s, want_s, after)
        harm = 0.0
        for i in range(n):
            harm += table[ridx[i], 8] * (1.0 / before[i] - 1.0 / after[i])
        if 1.0 / after[n] - harm < min_gain:
            out[q] = np.nan
            continue
        cost = 0.0
        for i in range(n):
            cost += table[ridx[i], 8] * (after[i] - before[i])
        cost = cost + after[n] - 1.0
        out[q] = cost - consolidate + slice_cost
    return out


def _set_slowdowns(table, ridx, reqs, m, pairs, use_pairs, c_host, switch_s, slice_s, bw, iterations, tol,
                   held_cap, relief, exclusive, scratch, buf, order, sd_s, want_s,
                   out):  # pragma: no cover - compiled; the tests compare it with Python
    # The slowdowns of the m jobs of rows ridx[:m] (_eq numbers reqs[:m]) into out[:m], in that
    # order: a measured pair where interference.measured_pair answers (a pair in _eq order, both
    # with a job type), else the solve in timeshare._canonical's order of the _eq-sorted set
    # (by _key, then _eq, then position: the two stable sorts of the Python path).
    if use_pairs and m == 2:
        a = 0
        b = 1
        if reqs[1] < reqs[0]:
            a = 1
            b = 0
        ta = table[ridx[a], 9]
        tb = table[ridx[b], 9]
        if ta >= 0.0 and tb >= 0.0:
            v = pairs[int(ta), int(tb), 0]
            if v == v:
                out[a] = v
                out[b] = pairs[int(ta), int(tb), 1]
                return
    _solve_order(table, ridx, reqs, m, order)
    for k in range(m):
        rw = ridx[order[k]]
        for col in range(5):
            buf[5 * k + col] = table[rw, col]
    _solve_one(buf, 0, m, c_host, switch_s, slice_s, bw, iterations, tol, held_cap, relief, exclusive, scratch, sd_s,
               want_s)
    for k in range(m):
        out[order[k]] = sd_s[k]


def _solve_order(table, ridx, reqs, m, order):  # pragma: no cover - compiled
    # order[:m]: the jobs 0..m-1 sorted by _before (an insertion sort: stable, a few jobs)
    for i in range(m):
        order[i] = i
    for i in range(1, m):
        x = order[i]
        j = i - 1
        while j >= 0 and _before(table, ridx, reqs, x, order[j]):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = x


def _before(table, ridx, reqs, x, y):  # pragma: no cover - compiled
    # whether job x comes before job y in the solve order: by _key, then _eq (then position: the
    # insertion sort keeps it)
    rx = ridx[x]
    ry = ridx[y]
    for col in _KEY_COLUMNS:
        u = table[rx, col]
        v = table[ry, col]
        if u < v:
            return True
        if u > v:
            return False
    return reqs[x] < reqs[y]


def _state(tab, c_host, switch_s, slice_s, bw, iterations, tol,
           held_cap, relief, exclusive):  # pragma: no cover - compiled; the tests compare it with Python
    # timeshare._solve (the canonical order: by _key, then position) and then timeshare._util_pct
    # with gpucast.estimate.nvml's idle_visible and combined_reported, in the jobs' own order.
    n = tab.shape[0]
    scratch = np.empty((_SCRATCH, n))
    buf = np.empty(5 * n)
    sd_s = np.empty(n)
    want_s = np.empty(n)
    idx = np.arange(n)
    order = np.empty(n, dtype=np.int64)
    _solve_order(tab, idx, idx, n, order)
    for k in range(n):
        for col in range(5):
            buf[5 * k + col] = tab[order[k], col]
    _solve_one(buf, 0, n, c_host, switch_s, slice_s, bw, iterations, tol, held_cap, relief, exclusive, scratch, sd_s,
               want_s)
    sd = np.empty(n)
    want = np.empty(n)
    for k in range(n):
        sd[order[k]] = sd_s[k]
        want[order[k]] = want_s[k]
    held = 0.0
    for i in range(n):
        step = tab[i, 0]
        u = tab[i, 1] / step if step > 0 else 0.0          # JobTimeline.util
        held += u / sd[i]
    h = held if held > 0.0 else 0.0                         # min(1, max(0, sum(held)))
    if not h < 1.0:
        h = 1.0
    seen = 1.0
    for i in range(n):
        w = want[i] if want[i] > 0.0 else 0.0               # idle_visible
        if not w < 1.0:
            w = 1.0
        idle = tab[i, 0] * sd[i] * (1.0 - w)
        if idle <= 0:
            v = 1.0
        else:
            v = 1.0 - tab[i, 5] / idle
            if not v > 0.0:
                v = 0.0
        if not v > 0.0:                                    # combined_reported's clamp
            v = 0.0
        if not v < 1.0:
            v = 1.0
        seen *= v
    r = h + (1.0 - h) * (1.0 - seen)
    if not r < 1.0:
        r = 1.0
    return sd, 100.0 * r
