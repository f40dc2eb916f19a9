"""``gpucast``: packing with gpucast's predictions, their intervals and the co-location model.

Told gpucast's predictions with intervals (the 80 % intervals of the run's error model, which
cover 80 % of the simulated truths as a calibration's split-conformal intervals do; see
:meth:`gpucast.cluster.truth.Truth.intervals`). A GPU is allowed when

* the memory bounds of its jobs and this one fit (:meth:`GpucastPolicy.memory_bound`: the safety
  margin against out-of-memory failures, at the risk level ``memory_risk``; see below),
* it holds fewer than ``max_jobs_per_gpu`` jobs, and,
* if it is not empty, sharing pays: the newcomer's normalized throughput (1/slowdown) minus what
  the GPU's jobs lose (sum of the drops of their 1/slowdown) is at least ``min_gain``, with the
  slowdowns from the co-location model (:mod:`gpucast.cluster.timeshare`) on the jobs' predicted
  timelines taken at the **upper end of each utilization interval** (``cautious``: a job that may
  be busier than predicted is assumed to be). ``weigh_gangs`` counts a resident k-GPU job's loss
  k times (it runs at its slowest GPU's pace); off by default: on the packaged mixes it blocked
  most sharing and lost more than it saved.

Among allowed GPUs the job goes where it costs least: the added slowdown (the GPU's jobs' increase
plus the newcomer's slowdown minus one) minus ``consolidate`` for a shared GPU (an empty GPU costs
0), plus, on a MIG slice, how much slower the job is told to run there than on the whole GPU
(:attr:`~gpucast.cluster.behaviour.Observation.slice_cost`): a host-bound job that hardly slows
on a small slice takes it and leaves whole GPUs free, a compute-bound one goes to a whole GPU
(shared or not) unless none is free. Between whole GPUs of different types the score does not
weigh their speeds (an empty K80 costs what an empty V100 does). A slice on which the job is told to run more
than ``1 + max_slice_cost`` times slower than on the whole GPU (default 1: twice) is not allowed:
a long job that would take it because every whole GPU is busy waits for a whole GPU instead (the
costs are told only where the cluster also has the GPU whole: on a cluster of slices they are 0). With ``consolidate = 1`` a job shares a GPU whenever sharing pays and adds less than one
whole slowdown, even when empty GPUs are free: light jobs are packed together and whole GPUs stay
free for gang-scheduled multi-GPU jobs; with 0 it shares only when no empty GPU is free.

**Re-partitioning MIG nodes** (:mod:`gpucast.cluster.repartition`): the policy asks for a carved
node to be made whole when a waiting job needs several GPUs or is allowed on no slice
(:meth:`GpucastPolicy.wants_whole`), and for a whole node to be carved when no waiting job needs
several GPUs and more jobs that would get more done on its slices wait than its whole GPUs could
hold (:meth:`GpucastPolicy.wants_slices`, its own slowdowns and slice costs).

**Sharing modes and services.** A GPU's slowdowns are solved in its own sharing mode
(:class:`~gpucast.cluster.policies.base.GpuOccupancy` ``mode``: time-slicing, MPS, or MPS
replicas ``"mps:N"``, :mod:`gpucast.cluster.timeshare.modes`): on replicas a job alone costs its SM limit
(its slowdown there minus one) and at most N jobs share the GPU. An inference service
(:attr:`~gpucast.cluster.behaviour.Observation.latency_s`) is never placed where its told step
(the upper end of its 80 % interval with ``cautious``) times its predicted slowdown would exceed
its latency target, nor is a job placed beside a service where the service's would
(``respect_latency``, on by default; off, services are placed like any job). Alone on a whole GPU without a limit a service is always allowed (nothing there
would do better); on a slice or under a limit it must meet its target alone. A run with services
scores in Python (the compiled fill has no latency rule).

How it trades utilization against JCT: ``min_gain`` is the knob; unset, it is 0 on a GPU whose
time slices let two jobs do more than one GPU of work under the constants the policy predicts with
(the measured-pairs model) and :data:`EXCLUSIVE_MIN_GAIN` (0.2) where they are exclusive (a
data-center GPU under :data:`gpucast.cluster.timeshare.CURRENT`: gpucast's model outside the
simulator, the simulator's ``data-center`` world). At 0 any net
gain shares a GPU (more jobs running, each slower: utilization up, the shared jobs' run times
longer); higher values share only where the jobs hardly meet (JCT of running jobs protected,
less packing). 0 since the co-location model was fitted on current-GPU pairs of real scripts:
held out by family there, sharing every pair it predicts to gain is worth 100 % of the oracle's
gain against 99 % at a margin of 0.2 (``benchmarks/results/colocation_current.md``), and on
``philly-mix`` at a queue-keeping load (seeds 0 and 1) it raised utilization over the queued
period from +24 %/+34 % to +41 %/+49 % over ``slot`` with mean JCT -50 %/-55 % (0.2 was chosen
when the model, fitted on Gavel's pairs, said sharing rarely pays). The intervals make it
cautious where the prediction is uncertain. All values are our choices (parameters). FIFO, like
``packing``, so the two differ only in placement.

**Memory bound and its risk**: what the policy reserves for a job on a GPU is a high quantile of its
peak memory under the error its told interval carries (:mod:`gpucast.cluster.policies.memory_bound`).
"""

from __future__ import annotations

from bisect import bisect_right

from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import modes as sharing, mps
from gpucast.cluster.policies.base import Policy, obs_for
from gpucast.cluster.policies.memory_bound import DEFAULT_MEMORY_RISK, TOLD_Z, _z, memory_bound  # noqa: F401
from gpucast.cluster.policies.gpucast_fill import CompiledFill, _owner
from gpucast.cluster.policies.gpucast_mig import CARVE_LOOK, MigCarving  # noqa: F401 (CARVE_LOOK re-exported)

# The least net gain for sharing a GPU whose time slices are exclusive (Constants.exclusive: two
# jobs together do at most one GPU of work there, so sharing gains little and the predictions' error
# decides). Our choice, from the simulator's data-center world (benchmarks/sim_mixes.py's data-center
# tables; philly-mix at load 3, seed 0): at 0 queued-period utilization +29 % over slot with makespan
# +20 %, at 0.1 +36 % and +0 %, at 0.2 +35 % and -10 % (the oracle +38 % at 0, +47 % at 0.2); 0.2
# was also the rule when the model was fitted on Gavel's pairs.
EXCLUSIVE_MIN_GAIN = 0.2


class GpucastPolicy(CompiledFill, MigCarving, Policy):
    name = "gpucast"
    told = "prediction"
    score_uses_index = False
    max_jobs_per_gpu = 4
    min_gain = None          # None: by the GPU's constants (_gain: 0, or EXCLUSIVE_MIN_GAIN under exclusive slices)
    cautious = True
    weigh_gangs = False
    consolidate = 1.0
    memory_risk = DEFAULT_MEMORY_RISK
    max_slice_cost = 1.0     # our choice: a slice at most twice as slow as its whole GPU (see the docstring)
    respect_latency = True   # keep inference services within their latency targets (see the docstring)

    def __init__(self, **params):
        super().__init__(**params)
        _z(self.memory_risk)          # an impossible risk level fails when the policy is made
        self._bounds: dict = {}       # id(observation) -> (observation, its memory bound)
        self._class_epoch = 0         # classes renumbered so far (what _class_rows keeps per class checks it)

    def memory_bound(self, obs) -> float:
        """:func:`memory_bound` of ``obs`` at this policy's ``memory_risk`` (remembered per
        observation: placement asks for the same few again and again)."""
        hit = self._bounds.get(id(obs))
        if hit is not None and hit[0] is obs:
            return hit[1]
        b = memory_bound(obs, self.memory_risk)
        if len(self._bounds) >= self._MEMO_MAX:
            self._bounds.clear()
        self._bounds[id(obs)] = (obs, b)
        return b

    def _slowdowns(self, obs, gpu_type, mode=None) -> list[float]:
        """The slowdowns of the jobs of ``obs`` together on a ``gpu_type`` shared in ``mode`` (None:
        the run's)."""
        return sharing.slowdowns([o.timeline(upper=self.cautious) for o in obs], timeshare.predicting().on(gpu_type),
                                 mode=mode)

    def _solve_inputs(self, obs):
        """What :meth:`_slowdowns` reads of one observation: the timeline it solves on and the
        Gavel job type that picks a measured pair (``None``: the co-location model answers)."""
        return obs.timeline(upper=self.cautious), None

    def _solve_constants(self):
        """The co-location constants :meth:`_slowdowns` solves with, and whether Gavel's measured
        pairs answer before them (:func:`gpucast.cluster.interference.measured_pair`)."""
        return timeshare.predicting(), False

    def score_key(self, obs):
        """What :meth:`score` reads of an observation: its memory bound, the timeline the
        slowdowns are solved on, with ``weigh_gangs`` its GPU count, its MIG slice cost, and a
        service's latency target and told step and its interval (see
        :meth:`Policy.score_key`). ``None`` (identity) for a subclass that changes the score or the
        slowdowns without saying what they read."""
        if type(self).score is not GpucastPolicy.score or type(self)._slowdowns is not GpucastPolicy._slowdowns:
            return None
        return (self.memory_bound(obs), obs.timeline(upper=self.cautious), obs.gpus if self.weigh_gangs else 0,
                obs.slice_cost, obs.latency_s,
                (obs.step_time_s, obs.step_interval) if obs.latency_s is not None else None)

    def predicted_slowdowns(self, gpu, job):
        return self._slowdowns(gpu.jobs + (job,), gpu.gpu_type, gpu.mode)

    _MEMO_MAX = 1 << 18

    def _remembered(self, obs: tuple, gpu_type, keyed=None, mode=None):
        """:meth:`_slowdowns` of ``obs`` on ``gpu_type`` in ``mode``, remembered by the set of the
        observations' :meth:`~gpucast.cluster.policies.base.Policy._eq` (what the slowdowns read of
        each, or its identity: placement asks for the same few sets again and again; an ``_eq``
        is never reused for another key, and observations with one ``_eq`` give the solve the same
        inputs; ``keyed``: :meth:`_memo_key`'s answer for ``obs``, where the caller has it)."""
        memo = self.__dict__.get("_sd_memo")
        if memo is None:
            memo = self._sd_memo = {}
        key, order = self._memo_key(obs, gpu_type, mode) if keyed is None else keyed
        sd = memo.get(key)
        if sd is None:
            if len(memo) >= self._MEMO_MAX:
                memo.clear()
            sd = memo[key] = self._slowdowns(tuple(obs[i] for i in order), gpu_type, mode)
        out = [0.0] * len(obs)
        for k, i in enumerate(order):
            out[i] = sd[k]
        return out

    def _memo_key(self, obs: tuple, gpu_type, mode=None):
        """The key :meth:`_remembered` files ``obs``'s slowdowns under (on ``gpu_type`` in ``mode``),
        and the order it solves them in (by ``_eq``: one entry per set, whatever the order of its jobs)."""
        eqs = list(map(self._eq, obs))
        order = sorted(range(len(obs)), key=eqs.__getitem__)
        return ((gpu_type, mode), tuple([eqs[i] for i in order])), order

    def _slowdowns_many(self, sets: list, gpu_type, mode=None) -> list:
        """:meth:`_slowdowns` of each tuple of observations in ``sets``, solved together
        (:func:`gpucast.cluster.timeshare.slowdowns_many`: the same numbers to the last bit)."""
        return sharing.slowdowns_many([[o.timeline(upper=self.cautious) for o in obs] for obs in sets],
                                      timeshare.predicting().on(gpu_type), mode=mode)

    def _scores(self, job_obs, reps) -> list:
        """:meth:`score` on every GPU of ``reps`` at once: the sets the scores need that are not
        remembered yet are solved in one call (:meth:`_slowdowns_many`), then each score is
        :meth:`_cost`, as :meth:`score` works it out (the same sets, the same numbers). Only where
        the class that defines the slowdowns defines their batch form too and :meth:`score` is this one."""
        if type(self).score is not GpucastPolicy.score or _owner(type(self), "_slowdowns") is not _owner(
                type(self), "_slowdowns_many"):
            return super()._scores(job_obs, reps)
        memo = self.__dict__.get("_sd_memo")
        if memo is None:
            memo = self._sd_memo = {}
        out: list = []
        todo: dict = {}           # (gpu type, mode) -> {memo key: observations in solve order}
        for g, n in reps:
            if n >= self.cap(g):
                out.append(None)
                continue
            job = obs_for(job_obs, g.gpu_type)
            val, pre = self._checked(g, job)
            if pre is None:
                out.append(val)
                continue
            own = None
            where = (g.gpu_type, g.mode)
            if pre[3] is None:
                own = self._memo_key(g.jobs, g.gpu_type, g.mode)
                if own[0] not in memo:
                    todo.setdefault(where, {}).setdefault(own[0], tuple(g.jobs[i] for i in own[1]))
            keyed = self._joined_key(pre, job, g.gpu_type, g.mode)
            if keyed[0] not in memo:
                obs = g.jobs + (job,)
                todo.setdefault(where, {}).setdefault(keyed[0], tuple(obs[i] for i in keyed[1]))
            out.append((g, pre, job, own, keyed))
        for (gpu_type, mode), sets in todo.items():
            if len(memo) + len(sets) >= self._MEMO_MAX:
                memo.clear()
            for key, sd in zip(sets, self._slowdowns_many(list(sets.values()), gpu_type, mode)):
                memo[key] = sd
        for k, x in enumerate(out):
            if type(x) is tuple:
                g, pre, job, own, keyed = x
                if pre[3] is None:
                    pre[3] = self._remembered(g.jobs, g.gpu_type, own, g.mode)
                out[k] = self._cost(pre, job, self._remembered(g.jobs + (job,), g.gpu_type, keyed, g.mode),
                                    self._gain(g.gpu_type))
        return out

    def _rebuild_classes(self) -> None:
        super()._rebuild_classes()
        self._class_epoch += 1          # class ids renumbered: what _class_rows keeps is stale

    def attach(self, gpus) -> None:
        super().attach(gpus)
        self._class_epoch += 1

    def _resident(self, gpu):
        """What :meth:`score` reads of a GPU's own jobs whoever joins them, remembered per tuple
        of jobs (the score index asks with one occupancy per GPU state): ``[jobs, their summed
        memory bounds, their weights, their slowdowns together (None until asked), their
        :meth:`_memo_key` as :meth:`_joined_key` keeps it (None until asked)]``."""
        memo = self.__dict__.get("_res_memo")
        if memo is None:
            memo = self._res_memo = {}
        jobs = gpu.jobs
        hit = memo.get((id(jobs), gpu.gpu_type, gpu.mode))
        if hit is not None and hit[0] is jobs:
            return hit
        if len(memo) >= self._MEMO_MAX:
            memo.clear()
        services = [(k, o) for k, o in enumerate(jobs) if o.latency_s is not None]
        hit = memo[(id(jobs), gpu.gpu_type, gpu.mode)] = [
            jobs, sum(self.memory_bound(o) for o in jobs), [o.gpus if self.weigh_gangs else 1 for o in jobs], None,
            None, services or None]
        return hit

    def _joined_key(self, pre, job, gpu_type, mode=None):
        """:meth:`_memo_key` of ``pre``'s jobs (a :meth:`_resident` entry) and ``job`` after them,
        from the residents' sorted ``_eq`` values remembered on the entry: ``job``'s goes in after
        any equal one, where the stable sort of :meth:`_memo_key` puts the last job."""
        rk = pre[4]
        if rk is None or rk[0] != self._eq_epoch:
            (_w, eqs), order = self._memo_key(pre[0], gpu_type, mode)
            rk = pre[4] = (self._eq_epoch, eqs, order)
        _e, eqs, order = rk
        je = self._eq(job)
        pos = bisect_right(eqs, je)
        return ((gpu_type, mode), eqs[:pos] + (je,) + eqs[pos:]), order[:pos] + [len(order)] + order[pos:]

    def _late(self, obs, slowdown: float) -> bool:
        """Whether a service (``obs.latency_s``) would miss its latency target at ``slowdown``: its
        told step, at the upper end of the step's interval with ``cautious`` (a step not told: it
        cannot be said, so not)."""
        step = obs.step_interval[1] if self.cautious and obs.step_interval is not None else obs.step_time_s
        return step is not None and step * slowdown > obs.latency_s

    def _checked(self, gpu, job):
        """What :meth:`score` decides before any slowdown: ``(its answer, None)`` where that is
        all (a slice too slow, an empty GPU, memory that does not fit), else ``(None, the GPU's
        :meth:`_resident` entry)``."""
        if job.slice_cost > self.max_slice_cost:
            return None, None       # a MIG slice this much slower than its whole GPU: wait for another
        if not gpu.jobs:
            # alone: nothing to protect (an over-large job fails in the engine); under an MPS
            # limit ("mps:N") it pays its limit even alone
            alone = 1.0
            if mps.replicas(gpu.mode) is not None:
                alone = self._remembered((job,), gpu.gpu_type, None, gpu.mode)[0]
            elif job.latency_s is None or job.slice_cost == 0.0 or not self.respect_latency:
                return job.slice_cost, None        # (a service alone on a whole GPU: nothing does better)
            if job.latency_s is not None and self.respect_latency and self._late(job, alone):
                return None, None                  # a service this slice or limit makes miss its target
            return job.slice_cost + alone - 1.0, None
        pre = self._resident(gpu)
        if pre[1] + self.memory_bound(job) > gpu.memory_bytes:
            return None, None
        return None, pre

    def score(self, gpu, job):
        val, pre = self._checked(gpu, job)
        if pre is None:
            return val
        if pre[3] is None:
            pre[3] = self._remembered(gpu.jobs, gpu.gpu_type, None, gpu.mode)
        return self._cost(pre, job, self._remembered(gpu.jobs + (job,), gpu.gpu_type,
                                                     self._joined_key(pre, job, gpu.gpu_type, gpu.mode), gpu.mode),
                          self._gain(gpu.gpu_type))

    def _gain(self, gpu_type) -> float:
        """The least net gain for sharing a ``gpu_type`` (:attr:`min_gain`, or where it is None the
        default of the constants this policy solves that GPU with: :data:`EXCLUSIVE_MIN_GAIN` where
        their time slices are exclusive there, 0 where not)."""
        if self.min_gain is not None:
            return self.min_gain
        return EXCLUSIVE_MIN_GAIN if self._solve_constants()[0].on(gpu_type).exclusive == "yes" else 0.0

    def _cost(self, pre, job, after, min_gain: float):
        """:meth:`score` of ``job`` joining the jobs of ``pre`` (a :meth:`_resident` entry with
        their slowdowns together), given the slowdowns of all of them then (``job``'s last), sharing
        where the net gain is at least ``min_gain``."""
        w, before = pre[2], pre[3]
        if self.respect_latency:
            if pre[5] is not None and any(self._late(o, after[k]) for k, o in pre[5]):
                return None                 # a service here would miss its latency target
            if job.latency_s is not None and self._late(job, after[-1]):
                return None
        harm = sum(k * (1.0 / b - 1.0 / a) for k, b, a in zip(w, before, after[:-1]))
        if 1.0 / after[-1] - harm < min_gain:
            return None
        cost = sum(k * (a - b) for k, b, a in zip(w, before, after[:-1])) + after[-1] - 1.0
        return cost - self.consolidate + job.slice_cost


GpucastPolicy._fill_base = GpucastPolicy   # its subclasses' scores are compiled where they keep its score
