"""Event-driven cluster simulator: jobs arrive, queue, start, share GPUs, finish, fail, restart.

Mechanism only; decisions belong to the policy (``policies/``), truth to ``truth``, slowdown to
``interference``. Time jumps from event to event (a heap; no ticks). The re-rating of jobs and the
utilization of GPUs are :mod:`gpucast.cluster.rates` (a mixin of :class:`Simulator`).

What is modelled
----------------
* **Work and rate.** A job's work is a number of training steps (a trace's ``duration_s`` is
  converted with the job's true solo step time on the cluster's reference GPU type). A running
  job advances at ``1 / (true solo step time on its GPU type * slowdown)`` steps per second; a
  multi-GPU job at the rate of its slowest GPU. The slowdown on a GPU comes from the jobs sharing
  it (:func:`gpucast.cluster.interference.shared_slowdowns`: a measured pair, else the
  co-location model of :mod:`gpucast.cluster.timeshare` on the jobs' true timelines).
* **Re-rating.** When the set of jobs on a GPU changes, every job on it is brought up to date at
  its old rate and re-rated; its finish event is pushed again and the old one is dropped when it
  surfaces (lazy invalidation with a per-job version counter).
* **Gang scheduling.** A job of ``k`` GPUs starts only when the policy grants all ``k`` (one
  node if possible, else across nodes; see ``policies/base.py``). Cross-node runs are not slower.
  A *planned gang* (a multi-GPU job whose spec has a ``parallel`` group) is placed by node
  (:mod:`gpucast.cluster.gangs`): inside one node when its plan fits one, else on whole nodes
  that are its alone; it never shares a GPU. Its step time is its plan's predicted optimizer step
  (inter-node communication included) times the truth's error, its work that many steps. A run
  whose cluster cannot ever hold one of its gangs is refused when the simulator is made
  (``ValueError`` naming the job).
* **Out-of-memory.** When the true peak memory of the jobs on a GPU exceeds its memory, the job
  placed last there fails ``oom_after_s`` after its placement (start-up and first steps;
  default 60 s, our choice, a parameter) unless the GPU no longer overflows by then. It loses
  the work since its last checkpoint (checkpoints every ``checkpoint_s`` of its run time, default
  1800 s, a parameter), is requeued ahead of new jobs and from then on is placed only on empty
  GPUs. A job that overflows a GPU alone, or fails ``max_oom_failures`` times, is abandoned (it
  never finishes; its record says so with ``finish_s=None``).
* **Profiling** (policies with ``profiling_gpus``): a new job first runs alone for
  ``profile_s`` on a reserved pool GPU (FIFO); it makes no training progress there.
* **Allocation.** ``alloc_timeline`` is the share of GPUs holding at least one job (the
  profiling pool included), recorded at the same instants.
* **Busy periods.** ``busy_intervals`` are the stretches of time during which at least one job
  is queued or running (arrived, and neither finished nor abandoned; profiling included), after
  all events at each instant (a job that finishes when another arrives leaves no gap). A job
  that never finishes keeps the last one open until the last event.
* **Time limits.** Each job carries ``limit_s``, the time limit a user would request: the
  trace's ``duration_s`` or, for a trace that gives steps, those steps at the job's true solo
  step time on the reference GPU type (its solo run time there, as ``duration_s`` means). Only
  ``slot`` (EASY backfilling) reads it; the engine never stops a job at its limit.
* **Inference services** (a mix's ``services``, ``TraceJob.latency_s``): a one-GPU job that
  serves batches back to back for its lifetime (the trace's ``duration_s``) and then ends, slowed
  or not: its work is seconds at one a second. Its latency is its true batch time now (solo step
  on its GPU times its slowdown there); the seconds it serves with a latency over its target are
  its ``late_s`` (``JobRecord``; :func:`gpucast.cluster.metrics.services`). Every policy is told
  its target (``Observation.latency_s``). Request arrivals and queueing between batches are not
  modelled.
* **Placements.** ``placements`` records every placement of a job, in order:
  ``[start_s, end_s, job index, GPU indices]`` (``end_s`` is ``None`` while it runs; a job that
  failed with out-of-memory and restarted has one entry per run). Profiling runs are not in it.
* **Utilization.** What NVML would report. A GPU with one job contributes its utilization; a
  shared GPU what NVML reads for the jobs together under the co-location model
  (:func:`gpucast.cluster.timeshare.gpu_util_pct`: busy unless every job is idle for a whole tick
  of the counter), or ``min(100, sum_j util_j / slowdown_j)`` for a measured Gavel pair (each
  job's kernels spread over a ``slowdown`` times longer wall clock). A multi-GPU job runs at
  its slowest GPU's pace, so on each of its GPUs it counts ``util_j * step_j * rate_j`` (its
  kernels at the rate it really runs), which is ``util_j / slowdown_j`` on its slowest GPU. Cluster utilization is
  the mean over all GPUs (profiling pool included), recorded as a step function at each change.

MIG nodes that may be re-partitioned (``ClusterSpec.faces``) are drained and reconfigured when
the policy's waiting jobs want whole GPUs: :mod:`gpucast.cluster.repartition` (its events come
after finishes, OOM checks and profiling at the same instant).

What is not modelled: preemption and migration by the policy, job priorities, network and
storage, failures other than OOM, the time a placement decision takes.

Cost per event is O(jobs on the touched GPUs) plus the policy's placement; no scan over jobs.
Events at one time are processed together (releases first), then the queue is tried once. What
keeps 100,000 jobs on 2,048 GPUs fast without changing a single float of the result:

* the slowdowns, rate terms and utilization of a shared GPU are computed once per GPU state (GPU
  type and the (profile, size) of each job on it, in placement order) and reused;
* a job keeps one rate term per GPU, so a re-rate recomputes only the GPUs that changed (the
  rate is still the minimum over all of them, and every affected job is still re-rated: its
  ``done`` and finish time are recomputed at each change, as the arithmetic above requires);
* superseded finish events are dropped from the heap in bulk once it has grown to three times
  its last compacted size (at least 4,096), which leaves the order of the other events as it was;
* placement is indexed by the policy (``policies/base.py``): no per-GPU Python loop; GPUs whose
  jobs a policy's score cannot tell apart share one entry of the index (``Policy.score_key``);
* the queue's head is found in O(1) (an ``OrderedDict``: a dict's first entry is found by
  skipping the holes that jobs leaving from its front left behind, O(queue) on a long queue);
* the co-location solves (:mod:`gpucast.cluster.timeshare`) are remembered per set of job
  timelines, and the iteration of the rule both worlds use is one fused pass per round, the same
  float operations in the same order, compiled by Numba where it is installed
  (:mod:`gpucast.cluster.timeshare.kernel`);
* a placement scores every GPU state its job has not been scored on in one pass
  (``Policy._class_scores``): with Numba, ``gpucast`` and ``oracle`` hand the whole score of those
  states to one compiled call (:func:`gpucast.cluster.timeshare.kernel.scores`, from what they
  keep per state: job count, each job's row of what the score reads, the residents' slowdowns),
  without it they solve the sets those scores need in one call (``timeshare.slowdowns_many``); and
  renumbering the index's states keeps the scores known for the states that remain;
* a new shared GPU state's slowdowns and NVML reading are one compiled call
  (:func:`gpucast.cluster.timeshare.shared_state`);
* a gang's one-node rule works on a node-by-GPU table where every node has as many GPUs
  (``policies.base._gang_np``), not on a sort of the whole cluster.

The out-of-memory check belongs to a placement: it carries the job's placement number
(``seq``), not its rate version, so re-rates of the job before the check (another job arriving
on or leaving its GPU) do not cancel it. (Until the fix, it carried the version and any re-rate
cancelled it, so some overcommitted GPUs never failed.)

One module of this size because the event loop and its handlers share the heap and the cluster's state (re-
rating is :mod:`gpucast.cluster.rates`).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, OrderedDict, deque
from dataclasses import replace
from itertools import chain, islice

from gpucast import mig
from gpucast.cluster import gangs
from gpucast.cluster.timeshare import mps
from gpucast.cluster.behaviour import with_slice_costs
from gpucast.cluster.policies.base import GpuOccupancy, Policy
from gpucast.cluster.rates import ARRIVE, FINISH, OOM, PROFILED, GpuRates
from gpucast.cluster.repartition import DEFAULT_HOLD_S, DEFAULT_RECONFIG_S, Repartition
from gpucast.cluster.result import JobRecord, SimResult
from gpucast.cluster.simjob import SimJob, pool_size  # noqa: F401 (pool_size re-exported)
from gpucast.cluster.spec import ClusterSpec
from gpucast.cluster.trace_formats import Trace
from gpucast.cluster.truth import Profile, Truth

# event kinds (gpucast.cluster.rates), in processing order at equal times
_FINISH, _OOM, _PROFILED, _ARRIVE = FINISH, OOM, PROFILED, ARRIVE

DEFAULT_CHECKPOINT_S = 1800.0   # our choice: a checkpoint every 30 min of run time
DEFAULT_OOM_AFTER_S = 60.0      # our choice: start-up plus first steps before the peak is reached
DEFAULT_MAX_OOM_FAILURES = 3
_COMPACT_MIN = 4096             # heap size before superseded events are first dropped


class Simulator(GpuRates, Repartition):
    """One run of a trace through a policy on a cluster (see the module docstring); the rates and
    utilization are :class:`~gpucast.cluster.rates.GpuRates`'s, re-partitioning MIG nodes
    :class:`~gpucast.cluster.repartition.Repartition`'s."""

    RECONFIG = 4        # event kind: a re-partitioned node's other face opens (after FINISH .. PROFILED)

    def __init__(self, trace: Trace, spec: ClusterSpec, policy: Policy, truth: Truth, *,
                 checkpoint_s: float = DEFAULT_CHECKPOINT_S, oom_after_s: float = DEFAULT_OOM_AFTER_S,
                 max_oom_failures: int = DEFAULT_MAX_OOM_FAILURES, mig_reconfig_s: float = DEFAULT_RECONFIG_S,
                 mig_hold_s: float = DEFAULT_HOLD_S, progress=None):
        from gpucast.hardware import get_gpu

        if checkpoint_s <= 0:
            raise ValueError("checkpoint_s must be > 0")
        self.trace, self.spec, self.policy, self.truth = trace, spec, policy, truth
        self.checkpoint_s, self.oom_after_s = float(checkpoint_s), float(oom_after_s)
        self.max_oom_failures = int(max_oom_failures)
        self.progress = progress
        gl = spec.gpus()
        self.n = len(gl)
        self.gtype = [t for _, _, t in gl]
        self.gnode = [nd for _, nd, _ in gl]
        self.gweight = spec.weights()                  # a MIG slice's share of its GPU (1: whole)
        # each GPU's sharing mode (spec.modes; None: the run's, timeshare.mode())
        self.gmode = spec.gpu_modes()
        # whether a job alone on the GPU runs at its solo speed (not under an MPS limit, "mps:N")
        self.glone = [mps.replicas(m) is None for m in self.gmode]
        self.capacity = spec.physical_gpus             # whole GPUs: utilization's denominator
        caps = self.caps = {t: float(get_gpu(t).memory_bytes) for t in spec.gpu_types}
        self.gcap = [caps[t] for t in self.gtype]
        self.max_cap = max(caps.values())
        self.on = [[] for _ in range(self.n)]          # jobs on each GPU, in placement order
        self._shared: dict = {}                         # GPU state -> rate terms, utilization
        self.contrib = [0.0] * self.n
        self.total = 0.0
        self.timeline = [(0.0, 0.0)]
        self.held = [0] * self.n        # 1 while a GPU holds a job
        self.nheld = 0
        self.alloc_timeline = [(0.0, 0.0)]
        self.busy_intervals: list[tuple[float, float]] = []
        self.heap = []
        self.seq = 0
        self.place_seq = 0
        self.placements: list[list] = []     # [start_s, end_s, job index, GPU indices] per placement
        self._placed: dict[int, list] = {}   # job index -> its open placements entry
        # profiling pool: the last GPUs of the cluster
        npool = pool_size(policy, self.n)
        if npool >= self.n:
            raise ValueError(f"profiling pool of {npool} GPUs leaves none of {self.n} for jobs")
        self.pool = list(range(self.n - npool, self.n))
        self.pool_free = deque(self.pool)
        self.pq = deque()
        policy.attach([GpuOccupancy(i, self.gtype[i], self.gcap[i], self.gnode[i], mode=self.gmode[i])
                       for i in range(self.n - npool)])
        self._init_groups(spec, self.n - npool, mig_reconfig_s, mig_hold_s)
        # jobs and their profiles
        self.ref = spec.reference_gpu
        self.types = list(spec.gpu_types)
        # behaviour on the reference too where it is not a type here (a carved GPU's whole type)
        self.beh_types = self.types + ([self.ref] if self.ref not in self.types else [])
        # MIG slices: their observations carry slice costs (behaviour.with_slice_costs)
        self.has_slices = any(mig.is_slice_name(t) for t in self.types)
        self._prof_ids: dict = {}
        self._obs_cache: dict = {}
        self.jobs = []
        for i, tj in enumerate(trace.jobs):
            key = tj.profile_key
            prof = self._prof_ids.get(key)
            if prof is None:
                prof = self._prof_ids[key] = Profile.from_trace_job(tj)
            self.jobs.append(SimJob(i, tj, prof))
        if any(j.node_gpus for j in self.jobs):
            gangs.check([j.tj for j in self.jobs], Counter(self.gnode[:self.n - npool]).values())
        # Waiting jobs in arrival order. OrderedDicts, not dicts: jobs leave from the front, and a
        # plain dict keeps the holes they leave until it next grows, so finding its first entry
        # (every scheduling pass) costs O(jobs that left) on a long queue; an OrderedDict's is O(1).
        self.queue: OrderedDict[int, SimJob] = OrderedDict()
        self.requeued: OrderedDict[int, SimJob] = OrderedDict()
        self.finished = 0

    # ------------------------------------------------------------------ truth and observations

    def _prepare(self, j: SimJob):
        """Truth and observation of a job (cached per profile and size)."""
        key = (j.prof, j.gpus) if j.slo is None else (j.prof, j.gpus, j.slo)
        c = self._obs_cache.get(key)
        if c is None:
            beh = {t: self.truth.behaviour(j.prof, t, j.gpus) for t in self.beh_types}
            told = self.policy.told
            first = "nothing" if told == "profiled" else told
            obs = {t: self.truth.observe(j.prof, t, first, j.gpus) for t in self.types}
            prof_obs = ({t: self.truth.observe(j.prof, t, "profiled", j.gpus) for t in self.types}
                        if told == "profiled" else None)
            if self.has_slices:   # MIG slices: told how much slower than the whole GPU (Observation.slice_cost)
                obs = with_slice_costs(obs)
                if prof_obs is not None:
                    prof_obs = with_slice_costs(prof_obs)
            if j.slo is not None:    # a service: every policy is told its latency target
                obs = {t: replace(o, latency_s=j.slo) for t, o in obs.items()}
                if prof_obs is not None:
                    prof_obs = {t: replace(o, latency_s=j.slo) for t, o in prof_obs.items()}
            c = self._obs_cache[key] = (beh, obs, prof_obs)
        j.beh, j.obs = c[0], c[1]
        tj = j.tj
        if j.slo is not None:    # a service serves for its lifetime: its work is seconds, at 1 a second
            j.work = j.limit_s = float(tj.duration_s)
            return
        j.work = float(tj.steps) if tj.steps is not None else tj.duration_s / j.beh[self.ref].step_time_s
        j.limit_s = tj.duration_s if tj.duration_s is not None else j.work * j.beh[self.ref].step_time_s

    # ------------------------------------------------------------------ events

    def _push(self, t, kind, j, v):
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, j, v))

    def run(self) -> SimResult:
        jobs = self.jobs
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].tj.arrival_s, i))
        arrivals = [jobs[i].tj.arrival_s for i in order] + [math.inf]
        na, ai = len(order), 0
        heap = self.heap
        heappop = heapq.heappop
        total = len(jobs)
        step = max(1, total // 200)
        last_reported = -1
        profiled = bool(self.pool) and self.policy.told == "profiled"
        queue, pq = self.queue, self.pq
        compact_at = _COMPACT_MIN
        busy = self.busy_intervals
        busy_from = None      # start of the open busy interval (a job queued or running)
        t = 0.0
        while ai < na or heap:
            if len(heap) > compact_at:
                heap = self._compact()
                compact_at = max(_COMPACT_MIN, 3 * len(heap))
            t_arr = arrivals[ai]
            t = heap[0][0] if heap and heap[0][0] <= t_arr else t_arr
            # every event at time t: heap first (finish, oom, profiled), then arrivals
            while heap and heap[0][0] == t:
                _, kind, _, j, v = heappop(heap)
                if kind == _FINISH:
                    if v == j.version and j.alloc:
                        self._finish(j, t)
                elif kind == _OOM:
                    if v == j.seq and j.alloc:
                        self._check_oom(j, t)
                elif kind == _PROFILED:
                    self._profiled(j, t)
                else:
                    self._reconfigured(v, t)
            while ai < na and arrivals[ai] == t:
                j = jobs[order[ai]]
                ai += 1
                self._prepare(j)
                if profiled:
                    pq.append(j)
                else:
                    queue[j.i] = j
            if pq:
                self._start_profiles(t)
            if queue or self.requeued:
                self._schedule(t)
            if ai > self.finished:        # arrived jobs not yet finished or abandoned
                if busy_from is None:
                    busy_from = t
            elif busy_from is not None:
                busy.append((busy_from, t))
                busy_from = None
            if self.progress is not None and self.finished // step != last_reported:
                last_reported = self.finished // step
                self.progress(self.finished, total)
        if busy_from is not None:
            busy.append((busy_from, t))
        if self.progress is not None:
            self.progress(self.finished, total)
        return self._result()

    def _compact(self):
        """Drop superseded events from the heap (a job re-rated many times leaves one finish
        event per rate behind). The order of the remaining events is unchanged, and no time with
        only superseded events changes anything, so results are the same; the heap stays small."""
        heap = self.heap
        heap[:] = [e for e in heap if e[1] >= _PROFILED or (e[3].alloc and e[4] == (e[3].seq if e[1] == _OOM
                                                                                 else e[3].version))]
        heapq.heapify(heap)
        return heap

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, t):
        pol = self.policy
        pol.now = t
        w = pol.lookahead
        while self.queue or self.requeued:
            if w == 1:
                window = [next(iter(self.requeued.values() if self.requeued else self.queue.values()))]
            else:
                window = list(islice(chain(self.requeued.values(), self.queue.values()), w))
            placed = False
            for j in pol.order(window):
                alloc = pol.place(j)
                if alloc:
                    self._start(j, alloc, t)
                    placed = True
            if not placed:
                if self.groups:
                    self._repartition(t, window)
                return

    def _start(self, j: SimJob, alloc, t):
        self.requeued.pop(j.i, None) or self.queue.pop(j.i, None)
        if j.ran:
            j.restarts += 1
        if j.start_s is None:
            j.start_s = t
            j.solo_s = j.work if j.slo is not None else j.work * j.beh[self.gtype[alloc[0]]].step_time_s
        j.ran = True
        j.alloc = tuple(alloc)
        rec = [t, None, j.i, j.alloc]
        self.placements.append(rec)
        self._placed[j.i] = rec
        j.run_start = j.last_t = t
        j.ckpt_work = j.done
        j.rate = 0.0
        self.place_seq += 1
        j.seq = self.place_seq
        self.policy.on_start(j, j.alloc)
        oom = False
        on, gtype = self.on, self.gtype
        for g in j.alloc:
            here = on[g]
            here.append(j)
            gt = gtype[g]
            if len(here) == 1:
                mem = j.beh[gt].memory_bytes
            else:
                mem = sum([x.beh[gt].memory_bytes for x in here])
            if mem > self.gcap[g]:
                oom = True
        self._rerate(set(j.alloc), t)
        if oom:
            self._push(t + self.oom_after_s, _OOM, j, j.seq)

    def _release(self, j: SimJob, t):
        self._advance(j, t)
        if j.slo is not None:
            self._served(j, t)
            j.lat = None
        j.gpu_seconds += (t - j.run_start) * len(j.alloc)
        alloc = j.alloc
        self._placed.pop(j.i)[1] = t
        for g in alloc:
            self.on[g].remove(j)
        self.policy.on_stop(j, alloc)
        j.alloc = ()
        j.terms = {}
        j.version += 1
        self._rerate(set(alloc), t)
        if self.draining is not None and self.draining[2] is None:    # a MIG node draining: empty now?
            self._drained(t)

    def _finish(self, j: SimJob, t):
        j.done = j.work
        j.last_t = t
        self._release(j, t)
        j.done = j.work
        j.finish_s = t
        self.finished += 1

    def _check_oom(self, j: SimJob, t):
        over = False
        alone = True
        for g in j.alloc:
            gt = self.gtype[g]
            mem = sum(x.beh[gt].memory_bytes for x in self.on[g] if x.seq <= j.seq)
            if mem > self.gcap[g]:
                over = True
            if len(self.on[g]) > 1:
                alone = False
        if not over:
            return
        self._release(j, t)
        j.done = j.ckpt_work     # the work since the last checkpoint is lost
        j.ooms += 1
        if j.ooms >= self.max_oom_failures or (alone and self._too_big_everywhere(j)):
            j.abandoned = True
            self.finished += 1
        else:
            self.requeued[j.i] = j

    def _too_big_everywhere(self, j):
        return all(j.beh[gt].memory_bytes > self.caps[gt] for gt in self.types)

    # ------------------------------------------------------------------ profiling

    def _start_profiles(self, t):
        while self.pq and self.pool_free:
            j = self.pq.popleft()
            g = self.pool_free.popleft()
            j.alloc = (g,)
            j.run_start = t
            self.on[g].append(j)
            self._rerate_pool(g, t)
            self._push(t + self.policy.profile_s, _PROFILED, j, g)

    def _profiled(self, j: SimJob, t):
        g = j.alloc[0]
        self.on[g].remove(j)
        j.alloc = ()
        j.gpu_seconds += t - j.run_start
        self._rerate_pool(g, t)
        self.pool_free.append(g)
        j.obs = self._obs_cache[(j.prof, j.gpus) if j.slo is None else (j.prof, j.gpus, j.slo)][2]
        if self._too_big_everywhere(j):
            j.abandoned = True      # profiling saw it does not fit any GPU of the cluster
            j.ooms += 1
            self.finished += 1
        else:
            self.queue[j.i] = j

    # ------------------------------------------------------------------ result

    def _result(self) -> SimResult:
        recs = []
        end = 0.0
        for j in self.jobs:
            if j.solo_s is None and j.slo is not None:
                j.solo_s = float(j.tj.duration_s)        # a service: its lifetime
            if j.solo_s is None:
                beh = j.beh or {self.ref: self.truth.behaviour(j.prof, self.ref, j.gpus)}
                work = j.work if j.work else (j.tj.steps if j.tj.steps is not None
                                              else j.tj.duration_s / beh[self.ref].step_time_s)
                j.solo_s = work * beh[self.ref].step_time_s
            if j.finish_s is not None and j.finish_s > end:
                end = j.finish_s
            tj = j.tj
            recs.append(JobRecord(tj.job_id, tj.workload, tj.batch_size, tj.gpus, tj.arrival_s, j.start_s,
                                  j.finish_s, j.solo_s, j.gpu_seconds, j.ooms, j.restarts, j.slo,
                                  j.late_s if j.slo is not None else None))
        params = {"mig_repartitions": [list(r) for r in self.repartitions]} if self.groups else {}
        return SimResult(self.policy.name, self.n, dict(self.spec.gpu_types), recs, list(self.timeline), end, params,
                         list(self.alloc_timeline), list(self.busy_intervals))
