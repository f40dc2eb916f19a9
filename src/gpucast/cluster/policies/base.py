"""The policy interface: a queue order and a per-GPU placement rule over one cluster view.

As in Lucid's simulator, the queue policy (which waiting jobs are considered, in what order:
:meth:`Policy.order` over a window of ``lookahead`` jobs) and the placer (:meth:`Policy.score`,
a pure function of one GPU's occupancy and the job's :class:`Observation`) are separate; a new
policy is one short file overriding one or both. As in Gavel, the placement rule is pure:
:func:`choose_gpu` answers "where would this policy put this job?" for any list of
:class:`GpuOccupancy` (the HTTP service calls it), and the simulator uses the same rule.

Gang placement (:meth:`Policy.place`): a job of ``k`` GPUs is placed only when ``k`` feasible
GPUs exist; all on one node when some node has ``k`` feasible GPUs (the node with the lowest
summed score), otherwise the ``k`` lowest-scored GPUs across nodes. A job that failed with
out-of-memory is placed only on empty GPUs afterwards (every policy). A *planned gang* (a
multi-GPU job with a parallel plan, ``job.node_gpus > 0``) is placed by node for every policy, on
empty GPUs only, and the GPUs it holds (its whole nodes when it spans several) take no other job
while it runs (:mod:`gpucast.cluster.gangs`); with no planned gang in a run nothing of this is
consulted, and placement is exactly what it was before gangs existed.

A policy sees only what it is told (``told``): observations, never the truth, unless it is the
oracle or it profiled the job. Besides its observations a waiting job carries ``gpus``, ``ooms``
and ``limit_s`` (its time limit as a user would request it: see ``slot``, the one policy that
reads it), and the engine sets :attr:`Policy.now` (the simulated time) before each scheduling
pass, so hooks and :meth:`Policy.order` may read the time.

One module of this size because it is one contract: the queue order, the placement rule and gang placement
that every policy file overrides.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from gpucast.cluster import gangs, timeshare
from gpucast.cluster.timeshare import modes as sharing, mps
from gpucast.cluster.behaviour import Observation
from gpucast.cluster.policies.gang_choice import _INF, _TRUE, _gang_np, gang  # noqa: F401 (gang re-exported)


@dataclass(frozen=True)
class GpuOccupancy:
    """One GPU as a policy sees it: its type, memory, node, what it was told of its jobs, and how
    its jobs share it (``mode``: :data:`gpucast.cluster.timeshare.MODES` or ``"mps:N"``,
    :mod:`gpucast.cluster.timeshare.modes`; None: the run's mode)."""

    index: int
    gpu_type: str
    memory_bytes: float
    node: int = 0
    jobs: tuple[Observation, ...] = ()
    mode: str | None = None


def obs_for(job_obs, gpu_type: str) -> Observation:
    """The observation of a job for one GPU type (``job_obs``: one Observation or a mapping)."""
    if isinstance(job_obs, Observation):
        return job_obs
    return job_obs[gpu_type]


class Policy:
    """Base class: FIFO window of one, no sharing, exclusive GPUs."""

    name = "base"
    told = "nothing"           # nothing | prediction | profiled | truth
    max_jobs_per_gpu = 1
    lookahead = 1              # how many waiting jobs (in queue order) a pass considers
    profiling_gpus = 0         # GPUs reserved for profiling (profiling policy only)
    profile_s = 0.0
    drain_busy_nodes = True    # re-partitioning may drain a MIG node with jobs (False: only an empty one)
    score_uses_index = True    # False: score depends only on the GPU's type, memory and jobs,
                               # so the simulator may reuse it across GPUs in the same state

    def __init__(self, **params):
        for k, v in params.items():
            if not hasattr(type(self), k) or k.startswith("_") or callable(getattr(type(self), k)):
                raise TypeError(f"policy {self.name!r} has no parameter {k!r}")
            setattr(self, k, v)
        self._static: list = []
        self._jobs: list = []
        self.now = 0.0     # simulated time of the current scheduling pass (set by the engine)
        self._eqs: dict = {}      # id(observation) -> (observation, its _eq)
        self._eqk: dict = {}      # score_key -> its _eq
        self._eqn = itertools.count()
        self._eq_epoch = 0        # how many times _eqs started again (what remembers _eq values checks it)

    def params(self) -> dict:
        """The policy's parameters (class attributes that are plain values)."""
        out = {}
        for klass in reversed(type(self).__mro__):
            for k, v in vars(klass).items():
                if not k.startswith("_") and not callable(v) and not isinstance(v, (property, classmethod,
                                                                                    staticmethod)):
                    out[k] = getattr(self, k)
        out.pop("view", None)
        return out

    # ------------------------------------------------------------------ pure placement rule

    def score(self, gpu: GpuOccupancy, job: Observation) -> float | None:
        """Cost of putting ``job`` on ``gpu`` (lower is better), ``None`` if not allowed.
        Base: exclusive GPUs, first-fit (the GPU index)."""
        return float(gpu.index) if not gpu.jobs else None

    def _scores(self, job_obs, reps) -> list:
        """:meth:`score` of ``job_obs``'s job on each GPU of ``reps`` (``(GpuOccupancy, job
        count)``: one per class a placement has not scored yet), ``None`` where it is not allowed
        (a GPU holding ``max_jobs_per_gpu`` jobs included). A policy may work them out together
        (:meth:`gpucast.cluster.policies.gpucast.GpucastPolicy._scores`: the same numbers)."""
        return [None if n >= self.cap(g) else self.score(g, obs_for(job_obs, g.gpu_type)) for g, n in reps]

    def cap(self, gpu: GpuOccupancy) -> int:
        """The most jobs ``gpu`` may hold: ``max_jobs_per_gpu``, and at most N on a GPU shared as
        ``"mps:N"`` (the device plugin's MPS replicas, :func:`gpucast.cluster.timeshare.mps.replicas`)."""
        return self._cap(gpu.mode)

    def _cap(self, mode) -> int:
        """:meth:`cap` of a GPU shared in ``mode``."""
        k = mps.replicas(mode)
        return self.max_jobs_per_gpu if k is None else min(self.max_jobs_per_gpu, k)

    def room(self, gpu_indices) -> int:
        """How many jobs these GPUs may hold together (:meth:`cap` each)."""
        return sum(self._cap(self._gmode[self._pos[g]]) for g in gpu_indices)

    def predicted_slowdowns(self, gpu: GpuOccupancy, job: Observation) -> list[float]:
        """Slowdowns this policy expects for ``gpu``'s jobs and then ``job`` if it joined."""
        return sharing.slowdowns([o.timeline() for o in gpu.jobs + (job,)], timeshare.predicting().on(gpu.gpu_type),
                                 mode=gpu.mode)

    # ------------------------------------------------------------------ queue policy

    def order(self, window: list) -> list:
        """Order in which the waiting jobs of one window are tried (FIFO). A policy may leave
        jobs out (a job left out is not tried in this pass)."""
        return window

    # ------------------------------------------------------------------ simulator hooks

    def attach(self, gpus: list[GpuOccupancy]) -> None:
        """Start of a run: the GPUs this policy places on (a profiling pool is not among them),
        kept in GPU-index order."""
        gl = sorted(gpus, key=lambda g: g.index)
        self._static = [(g.index, g.gpu_type, g.memory_bytes, g.node) for g in gl]
        self._gmode = [g.mode for g in gl]              # each GPU's sharing mode (None: the run's)
        self._jobs = [list(g.jobs) for g in gl]        # observations on each GPU, in placement order
        self._pos = {g.index: i for i, g in enumerate(gl)}
        self._gidx = np.array([g.index for g in gl], dtype=np.int64)
        self._gnode = np.array([g.node for g in gl], dtype=np.int64)
        self._count = np.array([len(g.jobs) for g in gl], dtype=np.int64)
        self._stops = 0          # capacity-freeing events so far
        self._failed: dict = {}  # (observation, gpus, exclusive) -> self._stops when it last failed
        self._classes: dict = {}  # (type, memory, mode, _eq of each job observation) -> class id
        self._crep: list = []     # class id -> (a GpuOccupancy in that state, its job count)
        self._tabs: dict = {}     # _job_eq(job observation) -> its score table by class id (_table)
        self._cls = np.zeros(len(gl), dtype=np.int64)
        self._geq: list = [None] * len(gl)   # per GPU: [_eq epoch, its jobs' _eq] (_reclass)
        if not self.score_uses_index:
            for i in range(len(gl)):
                self._reclass(i)
        # nodes (runs of consecutive GPUs with one node number) and the GPUs planned gangs hold
        starts = [i for i in range(len(gl)) if i == 0 or gl[i].node != gl[i - 1].node]
        self._node_lo = np.array(starts, dtype=np.int64)
        self._node_hi = np.array(starts[1:] + [len(gl)], dtype=np.int64)
        self._node_type = [gl[i].gpu_type for i in starts]
        sizes = self._node_hi - self._node_lo
        same = len(sizes) > 0 and bool((sizes == sizes[0]).all()) and bool(
            (np.diff(self._gnode[self._node_lo]) > 0).all())
        self._per_node = int(sizes[0]) if same else 0     # _gang_np's node table, where nodes are alike
        self._locked = np.zeros(len(gl), dtype=bool)
        self._nlocked = 0
        # MIG slices (gpucast.mig) take one-GPU jobs only: slices have no peer access; so do GPUs
        # shared as MPS replicas ("mps:N"): the NVIDIA device plugin refuses a request for more
        # than one replica there (release 0.15.0: sharing.mps.failRequestsGreaterThanOne = true)
        self._slice = np.array([":" in g.gpu_type or mps.replicas(g.mode) is not None for g in gl], dtype=bool)
        self._whole = ~self._slice if self._slice.any() else None
        self._holds: dict = {}     # planned gang -> positions it holds while it runs
        self._pending: dict = {}   # planned gang -> positions to hold, from its placement

    @property
    def view(self) -> list[GpuOccupancy]:
        """The GPUs as the policy sees them now (built on demand)."""
        return [GpuOccupancy(i, t, m, nd, tuple(jobs), md)
                for (i, t, m, nd), jobs, md in zip(self._static, self._jobs, self._gmode)]

    def on_start(self, job, gpu_indices: Iterable[int]) -> None:
        self._hold(job, gpu_indices)
        for gi in gpu_indices:
            i = self._pos[gi]
            o = obs_for(job.obs, self._static[i][1])
            self._jobs[i].append(o)
            self._count[i] += 1
            if not self.score_uses_index:
                ge = self._geq[i]
                if ge is not None:
                    ge[1].append(self._eq(o))
                self._reclass(i)

    def on_stop(self, job, gpu_indices: Iterable[int]) -> None:
        self._stops += 1
        self._unhold(job)
        for gi in gpu_indices:
            i = self._pos[gi]
            jobs, o = self._jobs[i], obs_for(job.obs, self._static[i][1])
            k = next((k for k, x in enumerate(jobs) if x is o), None)   # this object, else an equal one
            k = jobs.index(o) if k is None else k
            del jobs[k]
            self._count[i] -= 1
            if not self.score_uses_index:
                ge = self._geq[i]
                if ge is not None:
                    del ge[1][k]
                self._reclass(i)

    def place(self, job) -> list[int] | None:
        """GPU indices for ``job`` (``job.gpus`` of them, ``job.obs``, ``job.ooms``) or ``None``.

        The rules of every policy here are monotone: a job that fits nowhere still fits nowhere
        after more jobs start, so a failure is remembered until some job stops.
        """
        per_node = getattr(job, "node_gpus", 0)
        exclusive = job.ooms > 0
        key = (id(job.obs), job.gpus, "gang" if per_node else exclusive)
        if self._failed.get(key) == self._stops:
            return None
        alloc = self._place_gang(job, per_node) if per_node else self._place(job, exclusive)
        if alloc is None:
            self._failed[key] = self._stops
        return alloc

    # ---- planned gangs (gpucast.cluster.gangs): by node, on empty GPUs, holding what they take

    def _place_gang(self, job, per_node: int, commit: bool = True) -> list[int] | None:
        free = self._count == 0
        if self._nlocked:
            free &= ~self._locked
        if self._whole is not None:
            free &= self._whole
        got = gangs.choose(free, self._node_lo, self._node_hi, self._node_type, job.gpus, per_node)
        if got is None:
            return None
        run, hold = got
        if commit:
            self._pending[job] = hold
        return self._gidx[run].tolist()

    def switch_off(self, gpu_indices, off: bool) -> None:
        """Take GPUs out of placement (``off``) or give them back: the faces of a MIG node being
        re-partitioned (:mod:`gpucast.cluster.repartition`). Giving GPUs back frees capacity, so
        the failures :meth:`place` remembers are forgotten, as when a job stops."""
        pos = np.array([self._pos[g] for g in gpu_indices], dtype=np.int64)
        if not len(pos):
            return
        changed = int((self._locked[pos] != off).sum())
        self._locked[pos] = off
        self._nlocked += changed if off else -changed
        if not off:
            self._stops += 1

    def wants_whole(self, window: list) -> bool:
        """Whether the jobs of a window that could not be placed want whole GPUs that a carved MIG
        node could give if re-partitioned (:mod:`gpucast.cluster.repartition`). Base: never (the
        cluster's layout is left as it is)."""
        return False

    def wants_slices(self, waiting, whole, sliced) -> bool:
        """Whether to carve a whole MIG node (asked after :meth:`wants_whole` when a pass placed
        nothing): ``waiting``, the waiting jobs in queue order (an iterator), ``whole`` and
        ``sliced``, the node's GPU indices on either face. Base: never."""
        return False

    def gang_fits(self, job) -> bool:
        """Whether a planned gang could start now (nothing is placed)."""
        return self._place_gang(job, job.node_gpus, commit=False) is not None

    def _hold(self, job, gpu_indices) -> None:
        if not getattr(job, "node_gpus", 0):
            return
        pos = self._pending.pop(job, None)
        if pos is None:
            pos = [self._pos[g] for g in gpu_indices]
        self._holds[job] = pos
        self._locked[pos] = True
        self._nlocked += len(pos)

    def _unhold(self, job) -> None:
        if self._holds:
            pos = self._holds.pop(job, None)
            if pos is not None:
                self._locked[pos] = False
                self._nlocked -= len(pos)

    def _place(self, job, exclusive: bool) -> list[int] | None:
        k = job.gpus
        if exclusive:
            empty = self._count == 0
            if self._nlocked:
                empty &= ~self._locked
            if k == 1:
                i = int(empty.argmax())
                return [int(self._gidx[i])] if empty[i] else None
            if self._whole is not None:
                empty &= self._whole
            return _gang_np(np.zeros(len(self._static)), empty, self._gidx, self._gnode, k, self._per_node)
        if not self.score_uses_index:
            _o, val, st, capped = self._table(job)
            cls = self._cls
            if k == 1:
                sc = capped.take(cls)           # +inf where the job is not allowed
                if self._nlocked:
                    sc[self._locked] = _INF
                i = int(sc.argmin())            # the lowest score, then the lowest index
                if sc[i] < _INF:
                    return [int(self._gidx[i])]
            feasible = st.take(cls) == 1
            if self._nlocked:
                feasible &= ~self._locked
            if self._whole is not None:
                feasible &= self._whole
            return _gang_np(val.take(cls), feasible, self._gidx, self._gnode, k, self._per_node)
        # a score that reads the GPU index: the plain rule over every GPU
        cands = []
        locked = self._locked if self._nlocked else None
        slices = self._slice if k > 1 and self._whole is not None else None
        for i, g in enumerate(self.view):
            if len(g.jobs) >= self.cap(g) or (locked is not None and locked[i]) or (slices is not None and slices[i]):
                continue
            s = self.score(g, obs_for(job.obs, g.gpu_type))
            if s is not None:
                cands.append((s, g.index, g.node))
        return gang(cands, job.gpus)

    # ---- the score index (``score_uses_index = False``)
    #
    # GPUs in the same state (type, memory, sharing mode, job observations that score alike in the
    # same order: the same :meth:`score_key`, else the same objects) score alike, so each GPU carries a class
    # id and each kind of job observation (its :meth:`score_key`) a table of scores by class,
    # filled the first time a class is seen with that kind. A placement is then a table lookup per
    # GPU and an argmin (numpy), not a call of ``score`` per GPU. Keying by what the score reads,
    # not by the observation objects (one per profile and size), matters at scale: with 100,000
    # jobs of ~100 observations on 2,048 GPUs the classes by object grew without bound (every
    # ordered triple of observations a new class, each scored for each observation: 2.3 million
    # score calls by 40,000 jobs at load 3), by key ten times fewer, results unchanged.

    _MAX_CLASSES = 20_000    # then the classes are rebuilt from the GPUs' current states (bounds the tables)

    def score_key(self, obs: Observation):
        """What :meth:`score` reads of one observation (of a GPU's job or of the job placed), as a
        hashable value: observations with equal keys score alike in every position, so GPUs whose
        jobs' keys agree (in order) share one class of the score index. ``None`` (the base): the
        observation itself (its identity), always safe. A policy whose score reads a few fields of
        an observation returns those fields, so jobs of different sizes or profiles that it cannot
        tell apart share classes and score tables."""
        return None

    def _eq(self, obs) -> int:
        """A small int naming ``obs``'s :meth:`score_key` (its identity when the key is ``None``);
        remembered per observation object (kept alive in the entry, so an ``id`` is its own)."""
        hit = self._eqs.get(id(obs))
        if hit is not None and hit[0] is obs:
            return hit[1]
        if len(self._eqs) >= self._EQ_MAX:     # many observations (a long-lived service): start
            self._eqs, self._eqk = {}, {}      # again; the counter goes on, so no int is reused
            self._eq_epoch += 1
        k = self.score_key(obs)
        if k is None:
            e = next(self._eqn)
        else:
            e = self._eqk.get(k)
            if e is None:
                e = self._eqk[k] = next(self._eqn)
        self._eqs[id(obs)] = (obs, e)
        return e

    _EQ_MAX = 1 << 16

    def _job_eq(self, job_obs):
        """:meth:`_eq` of a waiting job's observation (one, or a mapping by GPU type)."""
        if isinstance(job_obs, Observation):
            return self._eq(job_obs)
        hit = self._eqs.get(id(job_obs))
        if hit is not None and hit[0] is job_obs:
            return hit[1]
        if len(self._eqs) >= self._EQ_MAX:
            self._eqs, self._eqk = {}, {}
            self._eq_epoch += 1
        e = tuple((t, self._eq(o)) for t, o in job_obs.items())
        self._eqs[id(job_obs)] = (job_obs, e)
        return e

    def _reclass(self, i: int) -> None:
        _idx, gt, mem, _nd = self._static[i]
        jobs = self._jobs[i]
        ge = self._geq[i]      # [_eq epoch, the _eq of each job] kept by on_start/on_stop
        if ge is None or ge[0] != self._eq_epoch or len(ge[1]) != len(jobs):
            ep = self._eq_epoch
            ge = self._geq[i] = [ep, list(map(self._eq, jobs))]
            if ep != self._eq_epoch:           # the _eq table started again meanwhile
                ge = self._geq[i] = [self._eq_epoch, list(map(self._eq, jobs))]
        key = (gt, mem, self._gmode[i], tuple(ge[1]))
        c = self._classes.get(key)
        if c is None:
            if len(self._crep) >= self._MAX_CLASSES:
                self._rebuild_classes()
                c = self._classes.get(key)
            if c is None:
                c = self._classes[key] = len(self._crep)
                self._crep.append((GpuOccupancy(*self._static[i], tuple(jobs), self._gmode[i]), len(jobs)))
        self._cls[i] = c

    def _rebuild_classes(self) -> None:
        """Number again only the classes some GPU is in now; the score tables keep what they
        know of those (a class's score reads only its key), so no placement solves them again."""
        old = self._classes
        self._classes, self._crep = {}, []
        for i in range(len(self._static)):
            _idx, gt, mem, _nd = self._static[i]
            key = (gt, mem, self._gmode[i], tuple(map(self._eq, self._jobs[i])))
            if key not in self._classes:
                self._classes[key] = len(self._crep)
                self._crep.append((GpuOccupancy(*self._static[i], tuple(self._jobs[i]), self._gmode[i]),
                                   len(self._jobs[i])))
            self._cls[i] = self._classes[key]
        # new class id -> its old id (-1: a class no GPU was in before)
        was = np.array([old.get(k, -1) for k in self._classes], dtype=np.int64)
        keep = was >= 0
        size = max(64, 2 * len(self._crep))
        for jk, (obs, val, st, capped) in list(self._tabs.items()):
            nval, nst, ncap = np.zeros(size), np.zeros(size, dtype=np.int8), np.full(size, _INF)
            idx = np.flatnonzero(keep & (was < len(st)))
            w = was[idx]
            nval[idx], nst[idx], ncap[idx] = val[w], st[w], capped[w]
            self._tabs[jk] = [obs, nval, nst, ncap]

    def _table(self, job):
        """``[observation, score, state, score or +inf]`` by class id for ``job``, filled for
        every class some GPU is in now (state 1: allowed, 2: not allowed, 0: not computed)."""
        jk = self._job_eq(job.obs)
        tab = self._tabs.get(jk)
        ncls = len(self._crep)
        if tab is None or len(tab[1]) < ncls:
            size = max(64, 2 * ncls)
            val, st, capped = np.zeros(size), np.zeros(size, dtype=np.int8), np.full(size, _INF)
            if tab is not None:
                n = len(tab[1])
                val[:n], st[:n], capped[:n] = tab[1], tab[2], tab[3]
            tab = self._tabs[jk] = [job.obs, val, st, capped]
        _o, val, st, capped = tab
        cls = self._cls
        s = st.take(cls)
        if np.count_nonzero(s) != len(s):
            todo = np.sort(cls[s == 0])
            todo = todo[np.concatenate((_TRUE, todo[1:] != todo[:-1]))]   # np.unique, 5x faster here
            sc, ok = self._class_scores(job.obs, todo)
            st[todo] = np.where(ok, 1, 2)
            good = todo[ok]
            val[good] = capped[good] = sc[ok]
        return tab

    def _class_scores(self, job_obs, todo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_scores` of ``job_obs``'s job on the classes ``todo`` (class ids of the score
        index): ``(scores, allowed)`` arrays, a score where allowed. A policy may work them out
        from what it keeps per class (:meth:`gpucast.cluster.policies.gpucast_fill.CompiledFill._class_scores`)."""
        crep = self._crep
        got = self._scores(job_obs, [crep[c] for c in todo.tolist()])
        ok = np.array([x is not None for x in got], dtype=bool)
        return np.array([0.0 if x is None else x for x in got], dtype=np.float64), ok


def choose_gpu(policy: Policy, gpus_state: list[GpuOccupancy], job_obs: Observation | Mapping[str, Observation]
               ) -> tuple[int | None, list[float]]:
    """Where ``policy`` would put a one-GPU job on these GPUs, and the slowdowns it expects.

    Returns ``(gpu index or None, predicted slowdowns)``; the slowdowns list the chosen GPU's
    current jobs in order, then the new job (empty when no GPU is chosen). Pure: nothing is
    mutated; the simulator places with the same :meth:`Policy.score`. A GPU that holds a planned
    gang (an observation with ``node_gpus``) takes no other job, and a planned gang only an empty
    GPU, as in the simulator.
    """
    best = None
    for g in gpus_state:
        if len(g.jobs) >= policy.cap(g) or any(o.node_gpus for o in g.jobs):
            continue                     # full, or held by a planned gang (gpucast.cluster.gangs)
        if g.jobs and obs_for(job_obs, g.gpu_type).node_gpus:
            continue                     # a planned gang takes empty GPUs only
        s = policy.score(g, obs_for(job_obs, g.gpu_type))
        if s is not None and (best is None or (s, g.index) < best[0]):
            best = ((s, g.index), g)
    if best is None:
        return None, []
    g = best[1]
    return g.index, policy.predicted_slowdowns(g, obs_for(job_obs, g.gpu_type))
