"""The gpucast policy's compiled score fill: :meth:`Policy._class_scores` handed whole to
:func:`gpucast.cluster.timeshare.kernel.scores` (the same scores :meth:`GpucastPolicy.score` works
out in Python, to the last bit), a mixin of :class:`gpucast.cluster.policies.gpucast.GpucastPolicy`
whose methods read the policy's own ``_eq`` numbers, memory bounds and what its ``_slowdowns`` read
(``_solve_inputs``, ``_solve_constants``).

Each kind of observation (its ``_eq``) is one row of a table of what the score reads of it
(``_solve_inputs``, its memory bound and weight); a GPU state is its jobs' rows and
``_eq`` numbers, kept per class id of the score index. Not here: the score itself and its checks
(:mod:`gpucast.cluster.policies.gpucast`), the kernel (:mod:`gpucast.cluster.timeshare.kernel`).
GPUs shared otherwise than by time-slicing, inference services with latency targets and rows with
NaN are scored in Python.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpucast.cluster import interference, timeshare
from gpucast.cluster.policies.base import obs_for
from gpucast.cluster.timeshare import kernel as timeshare_kernel


class CompiledFill:
    """The compiled score fill for a :class:`Policy` subclass whose scores are those of the class
    it names as ``_fill_base`` (``None``: never compiled)."""

    _fill_base: type | None = None   # the class whose score, _scores, _cost, _checked, memory_bound the fill reproduces

    def _compiled_fill(self):
        """``(the compiled fill, its constants' use of measured pairs)`` where :meth:`_class_scores` can
        hand the whole score to :func:`gpucast.cluster.timeshare.kernel.scores`, else ``None``:
        the score, its checks, cost and memory bound are this class's, the class that defines
        :meth:`_slowdowns` defines what it reads (:meth:`_solve_inputs`, :meth:`_solve_constants`)
        and what an ``_eq`` stands for (:meth:`score_key`), and the compiled solve covers the
        constants (under time-slicing: GPUs shared otherwise are scored in Python)."""
        cls = type(self)
        ok = _FILL_CLASSES.get(cls)
        if ok is None:
            own = _owner(cls, "_slowdowns")
            base = cls._fill_base
            ok = _FILL_CLASSES[cls] = (
                base is not None and cls.score is base.score and cls._scores is base._scores
                and cls._cost is base._cost and cls._checked is base._checked
                and cls.memory_bound is base.memory_bound
                and own is _owner(cls, "_solve_inputs") is _owner(cls, "_solve_constants") is _owner(cls, "score_key"))
        if not ok or self.__dict__.get("_no_fill"):
            return None
        c, pairs = self._solve_constants()
        hit = self.__dict__.get("_fill")        # (constants, kernel on, the fill) of the last call
        on = timeshare_kernel.available()
        if hit is None or hit[0] is not c or hit[1] != on:
            hit = self._fill = (c, on, timeshare.compiled_scores(c, "timeslice"))
        return None if hit[2] is None else (hit[2], pairs)

    def _row(self, obs) -> tuple[int, int]:
        """``obs``'s row in the score table and its ``_eq`` (a row is added for a new ``_eq``)."""
        e = self._eq(obs)
        tab = self._rows
        r = tab[0].get(e)
        if r is None:
            if obs.latency_s is not None and self.respect_latency:
                self._no_fill = True       # a service's latency target: the compiled score has none
            tl, jtype = self._solve_inputs(obs)
            if jtype is None:
                t = -1
            else:
                t = tab[4].setdefault(jtype, len(tab[4]))
            rw = timeshare_kernel.row(tl, self.memory_bound(obs), obs.gpus if self.weigh_gangs else 1, t)
            if not all(map(math.isfinite, (rw[0], rw[1], rw[2], rw[3], rw[5], rw[6], rw[7], rw[8]))):
                self._no_fill = True       # Python's sort and comparisons of NaN: leave it to Python
            r = tab[0][e] = len(tab[1])
            tab[1].append(rw)
            tab[2] = None
        return r, e

    def _pair_table(self, gpu_type):
        """Gavel's measured slowdowns on ``gpu_type`` by the row table's job-type numbers
        (``[a, b]`` -> ``(a's, b's)``, NaN where not measured)."""
        types = self._rows[4]
        cache = self.__dict__.setdefault("_pairs", {})
        hit = cache.get(gpu_type)
        if hit is not None and hit[0] == (self._rows[3], len(types)):
            return hit[1]
        arr = np.full((max(1, len(types)), max(1, len(types)), 2), np.nan)
        for (a, b), (sa, sb) in interference.measured_pair_slowdowns(gpu_type).items():
            if a in types and b in types:
                arr[types[a], types[b]] = (sa, sb)
        cache[gpu_type] = ((self._rows[3], len(types)), arr)
        return arr

    def _fill_on(self, fill, gpu_type):
        """:func:`_fill_on`, remembered per GPU type for the fill of the last call."""
        hit = self.__dict__.get("_fills_on")
        if hit is None or hit[0] is not fill:
            hit = self._fills_on = (fill, {})
        got = hit[1].get(gpu_type)
        if got is None:
            got = hit[1][gpu_type] = _fill_on(fill, gpu_type)
        return got

    def _class_scores(self, job_obs, todo):
        """:meth:`Policy._class_scores` by the compiled fill where :meth:`_compiled_fill` allows it:
        the classes' job counts, rows and ``_eq`` numbers are kept per class id (worked out once
        per class), and the classes of each GPU type are scored in one call (those of GPUs shared
        otherwise than by time-slicing in Python)."""
        fill = self._compiled_fill()
        if fill is None:
            return super()._class_scores(job_obs, todo)
        fill, use_pairs = fill
        tab = self.__dict__.get("_rows")
        if tab is None or len(tab[1]) >= self._EQ_MAX:
            # [_eq -> row, rows, their array (None: not built), the table's epoch, job type -> number]
            tab = self._rows = [{}, [], None, -1 if tab is None else tab[3] + 1, {}]
        cl = self._class_rows(todo, fill)
        if cl is None:                   # a row Python compares differently (NaN): Python scores
            return super()._class_scores(job_obs, todo)
        nres, rows, eqs, gmem, gtype, types, before, bknown = cl
        sc = np.full(len(todo), np.nan)
        one = len(types) == 1
        run_mode = timeshare.mode()
        for t, (gpu_type, mode) in enumerate(types):
            sel = None if one else np.flatnonzero(gtype[todo] == t)
            if sel is not None and not len(sel):
                continue
            ids = todo if one else todo[sel]
            if (mode or run_mode) != "timeslice":            # MPS: the Python solve
                got, ok = super()._class_scores(job_obs, ids)
                got[~ok] = np.nan
            else:
                job = obs_for(job_obs, gpu_type)
                if job.slice_cost > self.max_slice_cost:
                    continue    # a MIG slice this much slower than its whole GPU: not allowed anywhere
                jrow, jeq = self._row(job)
                if self.__dict__.get("_no_fill"):
                    return super()._class_scores(job_obs, todo)
                if tab[2] is None:
                    tab[2] = np.array(tab[1], dtype=np.float64)
                got = self._fill_on(fill, gpu_type)(tab[2], nres, rows, eqs, gmem, before, bknown, ids, jrow, jeq,
                           self._pair_table(gpu_type) if use_pairs else _NO_PAIRS, use_pairs, self.max_jobs_per_gpu,
                           self._gain(gpu_type), self.consolidate, job.slice_cost)
            if one:
                sc = got
            else:
                sc[sel] = got
        ok = ~np.isnan(sc)
        return sc, ok

    def _class_rows(self, todo, fill):
        """Per class id of the score index: job count, the jobs' rows and ``_eq`` numbers in
        placement order, GPU memory and GPU type's number, filled for the classes of ``todo`` not
        known yet (all again after the ``_eq`` or row table starts again, the classes are
        renumbered or the fill's constants change); the (GPU type, sharing mode) pairs by number;
        and the jobs' slowdowns together and whether they are known (the fill works them out once per class).
        ``None`` where a row is not one the compiled fill may take."""
        epoch = (self._eq_epoch, self._rows[3], self._class_epoch, fill.keywords["c"])
        cl = self.__dict__.get("_cl")
        size = len(self._crep)
        width = max(1, self.max_jobs_per_gpu - 1)
        if cl is None or cl["epoch"] != epoch:
            cl = self._cl = {"epoch": epoch, "known": np.zeros(0, dtype=bool), "types": {}}
        if len(cl["known"]) < size:
            n = max(64, 2 * size)
            old = len(cl["known"])
            for name, dt, shape in (("known", bool, ()), ("nres", np.int64, ()), ("rows", np.int64, (width,)),
                                    ("eqs", np.int64, (width,)), ("gmem", np.float64, ()), ("gtype", np.int64, ()),
                                    ("before", np.float64, (width,)), ("bknown", bool, ())):
                arr = np.zeros((n,) + shape, dtype=dt)
                if old:
                    arr[:old] = cl[name]
                cl[name] = arr
        known = cl["known"]
        new = todo[~known[todo]]
        if len(new):
            crep, types = self._crep, cl["types"]
            nres, rows, eqs, gmem, gtype = cl["nres"], cl["rows"], cl["eqs"], cl["gmem"], cl["gtype"]
            for c in new.tolist():
                g, n = crep[c]
                nres[c] = n
                gmem[c] = float(g.memory_bytes)
                gtype[c] = types.setdefault((g.gpu_type, g.mode), len(types))
                if 0 < n <= width:
                    got = [self._row(o) for o in g.jobs]
                    rows[c, :n] = [r for r, _e in got]
                    eqs[c, :n] = [e for _r, e in got]
            if self.__dict__.get("_no_fill") or cl["epoch"][:3] != (self._eq_epoch, self._rows[3], self._class_epoch):
                self._cl = None
                return None
            known[new] = True
        return (cl["nres"], cl["rows"], cl["eqs"], cl["gmem"], cl["gtype"], list(cl["types"]), cl["before"],
                cl["bknown"])


_NO_PAIRS = np.full((1, 1, 2), np.nan)


def _fill_on(fill, gpu_type):
    """The compiled score fill ``fill`` with its constants resolved for ``gpu_type``
    (:meth:`gpucast.cluster.timeshare.Constants.on`: exclusive slices on a data-center GPU)."""
    c = fill.keywords["c"]
    on = c.on(gpu_type)
    if on is c:
        return fill
    return functools.partial(fill.func, *fill.args, **{**fill.keywords, "c": on})


_FILL_CLASSES: dict = {}     # policy class -> whether its scores are GpucastPolicy's (_compiled_fill)


def _owner(cls, name: str):
    """The class in ``cls``'s MRO that defines ``name`` (a ``_slowdowns_many`` is the batch form of
    the ``_slowdowns`` beside it only when one class defines both)."""
    return next(k for k in cls.__mro__ if name in vars(k))
