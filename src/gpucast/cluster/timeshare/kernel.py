"""The co-location solve of :mod:`gpucast.cluster.timeshare` for time slices with the "held"
stretch (both worlds the simulator runs in), compiled with Numba: many sets of jobs in one call;
and, built on it, the ``gpucast`` and ``oracle`` policies' placement scores of many GPU states in
one call (:func:`scores`).

What it computes: exactly :func:`gpucast.cluster.timeshare._plain` with ``fused=True`` (its
preamble, then :func:`~gpucast.cluster.timeshare._iterate_held`), every float operation in the
same order on the same operands, compiled without ``fastmath`` (so LLVM neither reorders nor
fuses them), hence the same result to the last bit (``tests/cluster/test_timeshare_kernel.py``
compares the two on random sets and on a simulation). The sums are sequential, as CPython's
``sum`` of floats is up to 3.11; from 3.12 CPython compensates its float sums (Neumaier), so there the
two paths agree to about 1e-15 instead of bit for bit (the test says which it checks).
:func:`scores` is :meth:`gpucast.cluster.policies.gpucast.GpucastPolicy.score` on each GPU state
(its memory rule, the residents' slowdowns alone and with the job, Gavel's measured pairs where
the oracle's slowdowns take them, each set solved in the order the Python path solves it, and
``_cost``'s arithmetic), compared with it in ``tests/cluster/test_score_fill.py``.

Why: the oracle policy asks for millions of distinct sets on a 100,000-job trace (its true
timelines differ per job profile and GPU count: 90 keys where gpucast's predictions have 26), and the
pure-Python iteration costs about 200 us per set; compiled it is about 1 us. What was left was the
interpreter's work around each score (about 30 us a GPU state: keys, memo lookups, the cost), so a
placement's scores are filled in one call: about 1.5 us a GPU state
(``benchmarks/results/sim_scale.md``).

What is not here: the "want" stretch, MPS and the general (unfused) loop stay in Python (the
simulator's worlds do not use them; :func:`gpucast.cluster.timeshare._plain` takes them), and so do
policies whose score differs from ``gpucast``'s (they call ``score``).
The compiled bodies are :mod:`gpucast.cluster.timeshare.kernel_jit` (one file: Numba's cache
checks only the file of the function it caches); this module is their Python entry points.
Numba is optional (``pip install gpucast[fast]``): without it, or with ``GPUCAST_NO_JIT=1`` in the
environment, :func:`available` is False and every solve and score runs in Python, with the same results.
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
    return _compiled()["sets"]


def _compiled() -> dict:
    """The compiled functions of :mod:`gpucast.cluster.timeshare.kernel_jit` (compiled, or loaded
    from Numba's on-disk cache, on first use)."""
    got = _STATE.get("compiled")
    if got is None:
        from gpucast.cluster.timeshare import kernel_jit

        got = _STATE["compiled"] = kernel_jit.build()
    return got


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
                         float(held_cap), float(c.relief), c.exclusive == "yes")
    sdl, wl = sd.tolist(), want.tolist()
    out, o = [], 0
    for n in count.tolist():
        out.append((tuple(sdl[o:o + n]), tuple(wl[o:o + n])))
        o += n
    return out


_NAN = float("nan")


def state(jobs, c, iterations: int, tolerance: float, held_cap: float) -> tuple[list, float]:
    """The slowdowns of one GPU's jobs (two or more :class:`~gpucast.cluster.timeshare.JobTimeline`,
    answered in their order, solved in :func:`~gpucast.cluster.timeshare._canonical`'s) and what
    NVML reads of the GPU: :func:`gpucast.cluster.timeshare.shared_state` in one compiled call."""
    nan = _NAN
    tab = np.array([(j.step_s, j.busy_s, j.gaps, j.mem_bound, nan if j.syncs is None else j.syncs, j.hidden_s,
                     -1.0 if j.syncs is None else j.syncs) for j in jobs], dtype=np.float64)
    sd, util = _compiled()["state"](tab, float(c.host), float(c.switch_s), float(c.slice_s), float(c.bandwidth),
                                    int(iterations), float(tolerance), float(held_cap), float(c.relief),
                                    c.exclusive == "yes")
    return sd.tolist(), util


# ---------------------------------------------------------------- the gpucast policy's placement scores
#
# GpucastPolicy._scores (gpucast.cluster.policies.gpucast) asks for a job's score on every GPU
# state a placement has not scored: hundreds of states, each a set of resident jobs. Here the
# whole of GpucastPolicy.score for those states runs compiled: its memory rule, the residents'
# slowdowns alone and with the job (Gavel's measured pairs where the oracle's slowdowns answer with
# them), each set in the order the Python path solves it, and GpucastPolicy._cost's arithmetic, in
# the same order on the same operands (the same scores to the last bit: the tests compare them).
# Each kind of observation is one row of a table (ROW_COLUMNS); a GPU state is its job count and
# its jobs' rows and _eq numbers in placement order.

ROW_COLUMNS = ("step_s", "busy_s", "gaps", "mem_bound", "syncs", "hidden_s", "syncs_key", "memory_bound",
               "weight", "pair_type")


def row(timeline, memory_bound: float, weight: float, pair_type: int) -> tuple:
    """One observation's row of the score table: what the solve reads of its timeline (syncs NaN
    when not known), the rest of :func:`gpucast.cluster.timeshare._key` (syncs -1 when not known),
    its memory bound, its weight in the residents' loss and its Gavel job type's number in the
    pair table (-1: none)."""
    return (float(timeline.step_s), float(timeline.busy_s), float(timeline.gaps), float(timeline.mem_bound),
            _NAN if timeline.syncs is None else float(timeline.syncs), float(timeline.hidden_s),
            -1.0 if timeline.syncs is None else float(timeline.syncs), float(memory_bound), float(weight),
            float(pair_type))


def scores(table, nres, rows, eqs, gmem, before, known, ids, jrow: int, jeq: int, pairs, use_pairs: bool, cap: int,
           min_gain: float, consolidate: float, slice_cost: float, c, iterations: int, tolerance: float,
           held_cap: float):
    """GpucastPolicy's score of the job of row ``jrow`` (``_eq`` ``jeq``) on each GPU state
    ``k`` of ``ids``: ``nres[k]`` jobs, their rows ``rows[k]`` and ``_eq`` numbers ``eqs[k]`` in
    placement order, GPU memory ``gmem[k]``, their slowdowns together ``before[k]`` where
    ``known[k]`` (else solved here, then written there and marked known); ``table``: the rows
    (:data:`ROW_COLUMNS`);
    ``pairs[a, b]``: Gavel's measured slowdowns of job types ``a`` and ``b`` together (NaN where
    not measured), read when ``use_pairs``. One score per entry of ``ids``, NaN where the job is
    not allowed (a GPU with ``cap`` jobs, memory that does not fit, sharing that does not pay)."""
    return _compiled()["scores"](table, nres, rows, eqs, gmem, before, known, ids, int(jrow), int(jeq), pairs,
                                 bool(use_pairs),
                                 int(cap), float(min_gain), float(consolidate), float(slice_cost), float(c.host),
                                 float(c.switch_s), float(c.slice_s), float(c.bandwidth), int(iterations),
                                 float(tolerance), float(held_cap), float(c.relief), c.exclusive == "yes")
