"""EASY backfilling (Lifka's EASY scheduler; Slurm's ``sched/backfill`` in its default use) as a
queue policy over a one-job-per-GPU placement rule.

Jobs are tried in FIFO order. While the jobs at the front fit on the free GPUs they start, in
order. When the first one that does not fit (the *head*) is blocked, it gets a reservation: the
earliest time at which enough GPUs are free for it, judged by the time limits of the running
jobs (each running job is expected to end at its start plus its limit; one already past its
limit is expected to end now). A later job of the window may then start now on free GPUs only
if it does not delay that reservation, judged by its own limit: it ends (start + limit) no later
than the reserved time, or it needs no more GPUs than the head will leave unused at that time
(the *extra* GPUs, which it then uses up). Only the head gets a reservation (EASY, not
conservative backfilling). A job whose limit is unknown (``limit_s is None``) never ends as far
as the reservation is concerned; if the head can never be served by jobs with known limits, the
reservation is at infinity and any job with a known limit may start.

What it needs from the engine, beyond the base interface: each job's ``limit_s`` (the time limit
the user gave) and the policy's ``now`` (the time of the current scheduling pass, set by the
engine before the pass; :class:`~gpucast.cluster.policies.base.Policy`). The placement itself
(which GPUs) is the wrapped policy's; this class only chooses *which* jobs of the window start,
by counting free GPUs, which is exact because every job holds whole GPUs alone
(``max_jobs_per_gpu = 1``) and any ``k`` free GPUs can hold a ``k``-GPU job. A planned gang
(:mod:`gpucast.cluster.gangs`: one node's GPUs, or whole nodes) starts or backfills only when the
placement rule finds it room now; its reservation still counts GPUs, not nodes, so it may be
earlier than the gang can really start (the count is exact again once whole nodes free up, and
every later pass recomputes it).

Cost: the running jobs are kept sorted by expected end (``bisect``: O(log n) search and a
memmove per start/stop); a reservation walks them only until the head's GPUs are covered.
A pass is O(window). When neither a job started or stopped nor a running job passed its
expected end since the last pass, the jobs that were refused then are refused again (the free
GPUs, the reservation and the extra GPUs are unchanged, and the time only moves on), so only the
window's new tail (new arrivals) is examined: an arrival costs O(1) on a long queue.
"""

from __future__ import annotations

from bisect import bisect_left, insort

_INF = float("inf")


class EasyBackfill:
    """Mixin: put it before a one-job-per-GPU policy class in the bases
    (``class P(EasyBackfill, SlotFifoPolicy)``). ``lookahead``: the jobs a pass examines
    (Slurm's ``bf_max_job_test``, 500 by default in current Slurm)."""

    lookahead = 500

    def attach(self, gpus):
        gpus = list(gpus)
        super().attach(gpus)
        if self.max_jobs_per_gpu != 1:
            raise ValueError(f"policy {self.name!r}: EASY backfilling here needs one job per GPU")
        self._nfree = sum(1 for g in gpus if not g.jobs)
        self._ends: list = []        # (expected end, tie-break, GPUs) of the running jobs, sorted
        self._entry: dict = {}       # job -> its entry in _ends
        self._tie = 0
        self._version = 0            # starts + stops so far
        self._memo = None            # the last pass that found nothing more to start (see order)

    def on_start(self, job, gpu_indices):
        gl = tuple(gpu_indices)
        k = len(gl)
        self._nfree -= k
        limit = getattr(job, "limit_s", None)
        self._tie += 1
        entry = (self.now + limit if limit is not None else _INF, self._tie, k)
        insort(self._ends, entry)
        self._entry[job] = entry
        self._version += 1
        super().on_start(job, gl)

    def on_stop(self, job, gpu_indices):
        gl = tuple(gpu_indices)
        self._nfree += len(gl)
        entry = self._entry.pop(job, None)
        if entry is not None:
            del self._ends[bisect_left(self._ends, entry)]
        self._version += 1
        super().on_stop(job, gl)

    def reservation(self, gpus: int, free: int, now: float) -> tuple[float, int, float]:
        """The head's reservation when it needs ``gpus`` and ``free`` are free now:
        ``(reserved start, extra GPUs at that time, valid until)``. ``valid until``: the next
        expected end after the reserved start; until then (with no start or stop) the answer
        only follows ``now``."""
        ends = self._ends
        n = len(ends)
        acc, i = free, 0
        shadow = _INF
        while i < n:
            e, _tie, k = ends[i]
            acc += k
            i += 1
            if acc >= gpus:
                shadow = e if e > now else now
                break
        if shadow == _INF:
            return _INF, 0, _INF
        while i < n and ends[i][0] <= shadow:    # jobs expected to end by then free theirs too
            acc += ends[i][2]
            i += 1
        return shadow, acc - gpus, (ends[i][0] if i < n else _INF)

    def order(self, window):
        """The jobs of ``window`` to start now, in order (see the module docstring)."""
        if not window:
            return []
        now = self.now
        head = window[0]
        free = self._nfree
        memo = self._memo
        if memo is not None and memo[0] == self._version and memo[1] is head and now < memo[2]:
            _v, _h, until, shadow, extra, first = memo
            shadow = max(shadow, now)      # a reservation already due is due now
        else:
            prefix = []
            for j in window:
                if j.gpus > free or (getattr(j, "node_gpus", 0) and not self.gang_fits(j)):
                    break
                prefix.append(j)
                free -= j.gpus
            if prefix:
                self._memo = None
                return prefix
            shadow, extra, until = self.reservation(head.gpus, free, now)
            first = 1
        picks = []
        if free > 0:
            for j in window[first:]:
                k = j.gpus
                if k > free or (getattr(j, "node_gpus", 0) and not self.gang_fits(j)):
                    continue
                limit = getattr(j, "limit_s", None)
                if limit is not None and now + limit <= shadow:
                    pass                   # ends before the head's start: its GPUs are back by then
                elif k <= extra:
                    extra -= k             # runs past the head's start on GPUs the head leaves
                else:
                    continue
                picks.append(j)
                free -= k
                if free == 0:
                    break
        # Valid for the next pass if exactly these picks start: the window's first jobs are then
        # the ones refused here, and only jobs behind them are new.
        self._memo = (self._version + len(picks), head, until, shadow, extra, len(window) - len(picks))
        return picks
