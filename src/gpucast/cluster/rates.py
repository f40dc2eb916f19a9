"""How fast each running job advances and what NVML reads of each GPU, in the cluster simulator.

:class:`GpuRates` is mixed into :class:`gpucast.cluster.engine.Simulator` (the event loop,
scheduling, out-of-memory and profiling are there) and works on its state: ``on`` (the jobs on
each GPU, in placement order), ``gtype``, ``contrib``/``total`` (each GPU's utilization and their
sum), ``held``/``nheld``, the timelines, the event heap. When the set of jobs on a GPU changes,
:meth:`GpuRates._rerate` brings every job on it up to date at its old rate, computes its new
rate (the slowest of its GPUs; a shared GPU's slowdowns from
:func:`gpucast.cluster.interference.shared_slowdowns`, once per GPU state) and pushes its finish
event again; it records the cluster's utilization and allocation. The arithmetic, what is
modelled and what keeps it fast are described in :mod:`gpucast.cluster.engine`.
"""

from __future__ import annotations

import heapq
import math

from gpucast.cluster import interference, timeshare
from gpucast.cluster.timeshare import modes as sharing

__all__ = ["GpuRates", "FINISH", "OOM", "PROFILED", "ARRIVE"]

# event kinds, in processing order at equal times: capacity is released before it is granted
FINISH, OOM, PROFILED, ARRIVE = 0, 1, 2, 3


class GpuRates:
    """Rates of running jobs and utilization of GPUs (a mixin of the simulator; see above)."""

    def _advance(self, j, t):
        """Bring ``done`` (and the work at the last checkpoint) up to time ``t`` at the old rate."""
        if t <= j.last_t:
            return
        if j.rate > 0:
            ci = self.checkpoint_s
            cp = j.run_start + math.floor((t - j.run_start) / ci) * ci
            if cp > j.last_t:
                j.ckpt_work = min(j.work, j.done + j.rate * (cp - j.last_t))
            j.done = min(j.work, j.done + j.rate * (t - j.last_t))
        j.last_t = t

    def _rerate(self, gpus, t):
        """Re-rate every job on ``gpus`` after their sets changed; update utilization.

        The slowdowns of a GPU's jobs depend only on the GPU type and which (profile, size) each
        job is, in placement order, so they are computed once per such state (``_shared``); a
        job keeps one rate term per GPU (``terms``) and only the terms of ``gpus`` change."""
        on, gtype = self.on, self.gtype
        if len(gpus) == 1:
            for g in gpus:
                affected = list(on[g])
        else:
            seen = {}
            for g in gpus:
                for j in on[g]:
                    seen[j.i] = j
            affected = seen.values()
        ci = self.checkpoint_s
        for j in affected:     # _advance, inlined
            if t > j.last_t:
                if j.rate > 0:
                    cp = j.run_start + math.floor((t - j.run_start) / ci) * ci
                    if cp > j.last_t:
                        j.ckpt_work = min(j.work, j.done + j.rate * (cp - j.last_t))
                    j.done = min(j.work, j.done + j.rate * (t - j.last_t))
                j.last_t = t
        total = self.total
        contrib = self.contrib
        shared = self._shared
        gw = self.gweight
        gm = self.gmode
        lone = self.glone
        for g in gpus:
            jobs = on[g]
            gt = gtype[g]
            n = len(jobs)
            if n == 1 and lone[g]:
                x = jobs[0]
                b = x.beh[gt]
                x.terms[g] = 1.0 / (b.step_time_s * 1.0)
                c = min(100.0, b.util_pct)
            elif n:
                key = (gt, gm[g], tuple([id(x.beh) for x in jobs]))
                m = shared.get(key)
                if m is None:
                    m = shared[key] = self._shared_state(jobs, gt, gm[g])
                rs, c = m
                for x, r in zip(jobs, rs):
                    x.terms[g] = r
            else:
                c = 0.0
            c *= gw[g]          # a MIG slice counts as its share of the whole GPU (1 otherwise)
            total += c - contrib[g]
            contrib[g] = c
            h = gw[g] if n else 0
            self.nheld += h - self.held[g]
            self.held[g] = h
        heap = self.heap
        heappush = heapq.heappush
        seq = self.seq
        multi = None
        for j in affected:
            terms = j.terms
            if len(terms) > 1:
                rate = min(terms.values())
                if multi is None:
                    multi = set()
                multi.update(j.alloc)
            else:
                rate = terms[j.alloc[0]]
            if j.slo is not None:      # a service: its batch time is its latency; it serves its lifetime
                self._served(j, t)
                j.lat = 1.0 / rate
                rate = 1.0
            j.rate = rate
            j.version += 1
            seq += 1
            heappush(heap, (t + max(0.0, j.work - j.done) / rate, FINISH, seq, j, j.version))
        self.seq = seq
        if multi:
            # A multi-GPU job runs at its slowest GPU's pace, so on its other GPUs its kernels are
            # spread over more time than their own slowdown says: count each job's kernels at the
            # rate it really runs (util x step time x rate), on every GPU of such a job.
            for g in multi:
                jobs = on[g]
                gt = gtype[g]
                paced = True                                   # every job here at this GPU's pace
                for x in jobs:
                    if x.rate != x.terms[g] and x.slo is None:     # a service: one GPU, its own pace
                        paced = False
                        break
                if paced:
                    if len(jobs) == 1 and self.glone[g]:
                        c = min(100.0, jobs[0].beh[gt].util_pct)
                    else:
                        c = shared[(gt, self.gmode[g], tuple([id(x.beh) for x in jobs]))][1]
                else:
                    c = 0.0
                    for x in jobs:
                        b = x.beh[gt]
                        c += b.util_pct * b.step_time_s * (x.rate if x.slo is None else x.terms[g])
                    c = min(100.0, c)
                c *= gw[g]
                total += c - contrib[g]
                contrib[g] = c
        self.total = total
        self._record(t)

    @staticmethod
    def _shared_state(jobs, gt, mode=None):
        """Rate terms of the jobs sharing one GPU of type ``gt`` in sharing mode ``mode`` (None: the
        run's) and the GPU's utilization."""
        bs = [x.beh[gt] for x in jobs]
        types = ([x.prof.job_type if x.gpus == 1 else None for x in jobs] if len(jobs) == 2 else None)
        # interference.shared_slowdowns: a measured pair, else the co-location model solved once
        # for the slowdowns and NVML's reading both (sharing.shared_state: timeshare's, or mps's for "mps:N")
        s = interference.measured_pair(len(bs), types, gt, mode)
        if s is not None:
            util = min(100.0, sum([b.util_pct / sd for b, sd in zip(bs, s)]))
        else:
            s, util = sharing.shared_state([b.timeline() for b in bs], timeshare.world().on(gt),
                                           mode or timeshare.mode())
        return tuple([1.0 / (b.step_time_s * sd) for b, sd in zip(bs, s)]), util

    @staticmethod
    def _served(j, t):
        """Count a service's time since its last change as late where its batches took longer
        than its latency target (a relative 1e-9 spares the float noise of an exact fit)."""
        if j.lat is not None and j.lat > j.slo * (1.0 + 1e-9):
            j.late_s += t - j.lat_t
        j.lat_t = t

    def _record(self, t):
        # self.total is a running sum of per-GPU readings: float drift may carry it a few ulps
        # past n x 100 % on a full cluster (seen: 100.00000000000014), never a real reading.
        u = min(100.0, max(0.0, self.total) / self.capacity)
        for tl, v in ((self.timeline, u), (self.alloc_timeline, 100.0 * self.nheld / self.capacity)):
            if tl[-1][0] == t:
                tl[-1] = (t, v)
                if len(tl) > 1 and tl[-2][1] == v:
                    tl.pop()
            elif tl[-1][1] != v:
                tl.append((t, v))

    def _rerate_pool(self, g, t):
        jobs = self.on[g]
        c = min(100.0, sum(x.beh[self.gtype[g]].util_pct for x in jobs)) * self.gweight[g]
        self.total += c - self.contrib[g]
        self.contrib[g] = c
        h = self.gweight[g] if jobs else 0
        self.nheld += h - self.held[g]
        self.held[g] = h
        self._record(t)
