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
out-of-memory is placed only on empty GPUs afterwards (every policy).

A policy sees only what it is told (``told``): observations, never the truth, unless it is the
oracle or it profiled the job.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Mapping

from gpucast.cluster import interference
from gpucast.cluster.truth import Observation


@dataclass(frozen=True)
class GpuOccupancy:
    """One GPU as a policy sees it: its type, memory, node, and what it was told of its jobs."""

    index: int
    gpu_type: str
    memory_bytes: float
    node: int = 0
    jobs: tuple[Observation, ...] = ()


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
    score_uses_index = True    # False: score depends only on the GPU's type, memory and jobs,
                               # so the simulator may reuse it across GPUs in the same state

    def __init__(self, **params):
        for k, v in params.items():
            if not hasattr(type(self), k) or k.startswith("_") or callable(getattr(type(self), k)):
                raise TypeError(f"policy {self.name!r} has no parameter {k!r}")
            setattr(self, k, v)
        self.view: list[GpuOccupancy] = []

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

    def predicted_slowdowns(self, gpu: GpuOccupancy, job: Observation) -> list[float]:
        """Slowdowns this policy expects for ``gpu``'s jobs and then ``job`` if it joined."""
        utils = [o.util_pct if o.util_pct is not None else 100.0 for o in gpu.jobs + (job,)]
        return interference.slowdowns(utils)

    # ------------------------------------------------------------------ queue policy

    def order(self, window: list) -> list:
        """Order in which the waiting jobs of one window are tried (FIFO)."""
        return window

    # ------------------------------------------------------------------ simulator hooks

    def attach(self, gpus: list[GpuOccupancy]) -> None:
        """Start of a run: the GPUs this policy places on (a profiling pool is not among them)."""
        self.view = list(gpus)
        self._pos = {g.index: i for i, g in enumerate(self.view)}
        self._stops = 0          # capacity-freeing events so far
        self._failed: dict = {}  # (observation, gpus, exclusive) -> self._stops when it last failed
        self._scores: dict = {}  # (type, memory, job observations, observation) -> score

    def on_start(self, job, gpu_indices: Iterable[int]) -> None:
        for gi in gpu_indices:
            i = self._pos[gi]
            g = self.view[i]
            self.view[i] = dataclasses.replace(g, jobs=g.jobs + (obs_for(job.obs, g.gpu_type),))

    def on_stop(self, job, gpu_indices: Iterable[int]) -> None:
        self._stops += 1
        for gi in gpu_indices:
            i = self._pos[gi]
            g = self.view[i]
            jobs = list(g.jobs)
            jobs.remove(obs_for(job.obs, g.gpu_type))
            self.view[i] = dataclasses.replace(g, jobs=tuple(jobs))

    def place(self, job) -> list[int] | None:
        """GPU indices for ``job`` (``job.gpus`` of them, ``job.obs``, ``job.ooms``) or ``None``.

        The rules of every policy here are monotone: a job that fits nowhere still fits nowhere
        after more jobs start, so a failure is remembered until some job stops.
        """
        exclusive = job.ooms > 0
        key = (id(job.obs), job.gpus, exclusive)
        if self._failed.get(key) == self._stops:
            return None
        alloc = self._place(job, exclusive)
        if alloc is None:
            self._failed[key] = self._stops
        return alloc

    def _place(self, job, exclusive: bool) -> list[int] | None:
        cands = []
        cap = self.max_jobs_per_gpu
        memo = None if self.score_uses_index else self._scores
        if memo is not None and len(memo) > 200_000:
            memo.clear()
        for g in self.view:
            if exclusive:
                if g.jobs:
                    continue
                cands.append((0.0, g.index, g.node))
                continue
            if len(g.jobs) >= cap:
                continue
            o = obs_for(job.obs, g.gpu_type)
            if memo is None:
                s = self.score(g, o)
            else:
                k = (g.gpu_type, g.memory_bytes, tuple(map(id, g.jobs)), id(o))
                s = memo.get(k, memo)
                if s is memo:
                    s = memo[k] = self.score(g, o)
            if s is not None:
                cands.append((s, g.index, g.node))
        return gang(cands, job.gpus)


def gang(cands: list[tuple[float, int, int]], k: int) -> list[int] | None:
    """Pick ``k`` of ``(score, gpu index, node)``: one node if any node has ``k`` (lowest summed
    score, then lowest node), else the ``k`` best across nodes; ``None`` if fewer than ``k``."""
    if len(cands) < k:
        return None
    if k == 1:
        return [min(cands)[1]]
    by_node: dict[int, list] = {}
    for c in cands:
        by_node.setdefault(c[2], []).append(c)
    best = None
    for node, cs in by_node.items():
        if len(cs) >= k:
            cs.sort()
            cost = sum(c[0] for c in cs[:k])
            if best is None or (cost, node) < best[0]:
                best = ((cost, node), [c[1] for c in cs[:k]])
    if best is not None:
        return best[1]
    return [c[1] for c in sorted(cands)[:k]]


def choose_gpu(policy: Policy, gpus_state: list[GpuOccupancy], job_obs: Observation | Mapping[str, Observation]
               ) -> tuple[int | None, list[float]]:
    """Where ``policy`` would put a one-GPU job on these GPUs, and the slowdowns it expects.

    Returns ``(gpu index or None, predicted slowdowns)``; the slowdowns list the chosen GPU's
    current jobs in order, then the new job (empty when no GPU is chosen). Pure: nothing is
    mutated; the simulator places with the same :meth:`Policy.score`.
    """
    best = None
    for g in gpus_state:
        if len(g.jobs) >= policy.max_jobs_per_gpu:
            continue
        s = policy.score(g, obs_for(job_obs, g.gpu_type))
        if s is not None and (best is None or (s, g.index) < best[0]):
            best = ((s, g.index), g)
    if best is None:
        return None, []
    g = best[1]
    return g.index, policy.predicted_slowdowns(g, obs_for(job_obs, g.gpu_type))
