"""When the gpucast policy carves a whole MIG node into slices, and which slices a job may go to
alone: the MIG half of :class:`gpucast.cluster.policies.gpucast.GpucastPolicy`, a mixin whose
methods read the policy's own slowdowns (``_remembered``), memory bounds, caps and latency check.

A waiting job wants whole GPUs when it needs several or no slice allows it; a whole node is carved
when enough waiting one-GPU jobs would get more done on its slices than on its whole GPUs (the
policy's own slowdowns and each slice's cost). Not here: the engine's re-partitioning itself
(:mod:`gpucast.cluster.repartition`).
"""

from __future__ import annotations

import math
from itertools import islice

CARVE_LOOK = 1000            # our choice: waiting jobs looked at when deciding to carve a MIG node


class MigCarving:
    """:meth:`wants_whole`, :meth:`wants_slices` and what they rest on, for a :class:`Policy` subclass."""

    def wants_whole(self, window: list) -> bool:
        """A waiting job wants whole GPUs: it needs several, or the cluster has slices and it is
        allowed on none of them (:meth:`_slice_allows`)."""
        for job in window:
            if job.gpus > 1:
                return True
            sliced, allowed = self._slices_allowed(job.obs)
            if sliced and not allowed:
                return True
        return False

    def wants_slices(self, waiting, whole, sliced) -> bool:
        """Carve a whole node when no waiting job needs several GPUs and more waiting one-GPU jobs
        than its whole GPUs could hold even once empty (:meth:`room`; any fewer would run there
        after the same drain) would get more done on its slices: for such a job, copies of it
        filling one GPU's slices (each slice up to its cap, memory allowing) run faster in total
        than copies of it filling the whole GPU (:meth:`_face_rates`, the policy's own slowdowns
        and slice costs). The first ``CARVE_LOOK`` waiting jobs are looked at."""
        pos = self._pos
        wt, wm = self._static[pos[whole[0]]][1], self._gmode[pos[whole[0]]]
        per: dict = {}
        for g in sliced:
            key = (self._static[pos[g]][1], self._gmode[pos[g]])
            per[key] = per.get(key, 0) + 1
        node = ((wt, wm), tuple(sorted((k, c / len(whole)) for k, c in per.items())))
        n, enough = 0, self.room(whole) + 1
        for job in islice(waiting, CARVE_LOOK):
            if job.gpus > 1:
                return False        # a waiting job needs whole GPUs: carving would take them away
            if n < enough and self._slices_allowed(job.obs)[1]:
                rates = self._face_rates(job.obs, node)
                n += rates[1] > rates[0]
        return n >= enough

    def _face_rates(self, obs: dict, node) -> tuple[float, float]:
        """Work done per GPU, in solo whole-GPU steps per solo step, by copies of a job (``obs``)
        filling a node's GPU whole and carved: the best over 1 .. cap copies on the whole GPU, and
        the same on each slice of one GPU (``node``: (whole type, mode), ((slice type, mode), slices
        per GPU)...) over its slice cost; a slice the job is not allowed on, or copies whose memory
        bounds exceed the GPU's, count nothing. Remembered per job and node."""
        memo = self.__dict__.get("_face_memo")
        if memo is None:
            memo = self._face_memo = {}
        hit = memo.get((id(obs), node))
        if hit is not None and hit[0] is obs:
            return hit[1]
        allowed = self._slices_allowed(obs)[1]
        mem = self._allowed[1]

        def filled(t, mode):
            o = obs.get(t)
            if o is None:
                return 0.0
            b, room, best = self.memory_bound(o), mem.get(t), 0.0
            for k in range(1, self._cap(mode) + 1):
                if room is not None and k * b > room:
                    break
                best = max(best, sum(1.0 / x for x in self._remembered((o,) * k, t, None, mode)))
            return best

        (wt, wm), slices = node
        out = (filled(wt, wm), math.fsum(c * filled(t, m) / (1.0 + obs[t].slice_cost)
                                         for (t, m), c in slices if t in allowed))
        if len(memo) >= self._MEMO_MAX:
            memo.clear()
        memo[(id(obs), node)] = (obs, out)
        return out

    def _slices_allowed(self, obs) -> tuple[bool, frozenset]:
        """Whether the cluster has MIG slices for a job (its observations ``obs``, GPU type ->
        observation, name some), and the slice types it would be placed alone on
        (:meth:`_slice_allows`); remembered per job."""
        if not isinstance(obs, dict):
            return False, frozenset()
        memo = self.__dict__.get("_allowed")
        if memo is None or memo[0] is not self._static:
            memo = self._allowed = (self._static, {t: m for _i, t, m, _n in self._static}, {})
        hit = memo[2].get(id(obs))
        if hit is not None and hit[0] is obs:
            return hit[1]
        mem = memo[1]
        sliced = [t for t in obs if ":" in t]
        out = (bool(sliced), frozenset(t for t in sliced if self._slice_allows(obs[t], mem.get(t))))
        if len(memo[2]) >= self._MEMO_MAX:
            memo[2].clear()
        memo[2][id(obs)] = (obs, out)
        return out

    def _slice_allows(self, obs, memory) -> bool:
        """Whether a job would be placed alone on a slice (``obs``: its observation there,
        ``memory``: the slice's, None where not known): no more than ``1 + max_slice_cost`` times
        slower than on the whole GPU, its memory bound within the slice, a service on time there."""
        return (obs.slice_cost <= self.max_slice_cost
                and (memory is None or self.memory_bound(obs) <= memory)
                and not (obs.latency_s is not None and self.respect_latency and self._late(obs, 1.0)))
