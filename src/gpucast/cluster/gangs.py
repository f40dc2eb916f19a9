"""Planned gangs: multi-GPU jobs with a parallel plan, and the GPUs they may take, by node.

A job is a *planned gang* when its spec carries a ``parallel`` group (:class:`gpucast.plan.Parallel`)
and more than one GPU. Its prediction is the plan's: one optimizer step of the whole job (compute,
exposed tensor/pipeline/sharding communication inside and between nodes, the pipeline bubble),
the busiest GPU's peak memory and the mean utilization over its GPUs (:mod:`gpucast.estimate.parallel`).
The plan assumes ``G = parallel.gpus_per_node`` GPUs on each node (8 when unset), so the simulator
places it the way the plan runs:

* **within one node** (``gpus <= G``): ``gpus`` empty GPUs of one node, the node with the fewest
  empty GPUs that has enough (best fit, then the lowest node: whole nodes stay free for larger
  gangs), never split across nodes;
* **across nodes** (``gpus > G``): ``ceil(gpus / G)`` *whole* nodes, each with at least ``G`` GPUs
  and every GPU empty; the job runs on ``G`` GPUs of each (the last node takes the rest), and the
  nodes are its alone while it runs (Slurm's ``--exclusive``): no other job is placed on any of
  their GPUs. The nodes are the first eligible ones in index order, all of one GPU type when one
  type has enough.

Either way a planned gang never shares a GPU (no time-slicing, whatever the policy: its
utilization is near 100 % and its memory large), and no other job is placed on the GPUs it holds.
Ordinary jobs (no plan, or one GPU) keep the simulator's gang rule (one node if possible, else
the lowest-scored GPUs across nodes) and may share GPUs as their policy allows.

The GPUs a gang holds without running on them (the rest of a whole node when ``G`` is smaller than
the node, or the last node of a plan whose ``gpus`` is not a multiple of ``G``) sit idle: they
count as neither allocated nor busy in the run's timelines.

Not modelled: the network between nodes as a shared resource (two gangs never slow each other),
topology inside the cluster (any ``N`` nodes are as good as any other), node failures.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_GPUS_PER_NODE = 8     # gpucast.plan.Parallel.resolved()'s default


def node_gpus(fields, gpus: int) -> int:
    """``G`` (GPUs per node of the plan) for a planned gang, 0 for any other job.

    ``fields``: a job's fields as items (``TraceJob.fields``) or a mapping; ``gpus``: its GPUs."""
    if gpus < 2:
        return 0
    par = (fields.get("parallel") if isinstance(fields, dict)
           else next((v for k, v in fields if k == "parallel"), None))
    if par is None:
        return 0
    g = par.get("gpus_per_node") if isinstance(par, dict) else getattr(par, "gpus_per_node", None)
    return int(g or DEFAULT_GPUS_PER_NODE)


def node_gpus_of_job(job) -> int:
    """:func:`node_gpus` of a :class:`gpucast.job.Job`."""
    if job.parallel is None or job.gpus < 2:
        return 0
    return int(job.parallel.gpus_per_node or DEFAULT_GPUS_PER_NODE)


def nodes_needed(gpus: int, per_node: int) -> int:
    """Nodes a gang of ``gpus`` spans with ``per_node`` GPUs on each (1 within one node)."""
    return max(1, math.ceil(gpus / per_node))


def why_not(gpus: int, per_node: int, node_sizes) -> str | None:
    """Why a gang can never start on nodes of these sizes (GPUs each), or ``None`` if it can."""
    sizes = list(node_sizes)
    if gpus <= per_node:
        if not sizes or max(sizes) < gpus:
            return (f"its plan keeps its {gpus} GPUs inside one node, and no node has {gpus} GPUs "
                    f"(largest: {max(sizes) if sizes else 0})")
        return None
    n = nodes_needed(gpus, per_node)
    whole = sum(s >= per_node for s in sizes)
    if whole < n:
        return (f"its plan needs {n} whole nodes of at least {per_node} GPUs (parallel.gpus_per_node) for its "
                f"{gpus} GPUs; the cluster has {whole}")
    return None


def check(trace_jobs, node_sizes) -> None:
    """Raise ``ValueError`` naming the first planned gang of ``trace_jobs`` (:class:`TraceJob`) that
    nodes of ``node_sizes`` GPUs can never hold."""
    seen: dict = {}
    sizes = list(node_sizes)
    for tj in trace_jobs:
        per_node = node_gpus(tj.fields, tj.gpus)
        if not per_node:
            continue
        key = (tj.gpus, per_node)
        if key not in seen:
            seen[key] = why_not(tj.gpus, per_node, sizes)
        if seen[key]:
            raise ValueError(f"job {tj.job_id}: {seen[key]}")


def choose(free: np.ndarray, lo: np.ndarray, hi: np.ndarray, types: list, gpus: int, per_node: int
           ) -> tuple[list[int], list[int]] | None:
    """Where a gang goes (the module docstring), over positions ``0..n-1`` of GPUs in index order.

    ``free``: which GPUs are empty and held by no gang; nodes are the runs ``[lo[i], hi[i])``,
    ``types[i]`` their GPU type. Returns ``(positions it runs on, positions it holds)`` or ``None``."""
    per_free = np.add.reduceat(free, lo, dtype=np.int64)
    if gpus <= per_node:
        cand = np.flatnonzero(per_free >= gpus)
        if not len(cand):
            return None
        node = int(cand[np.argmin(per_free[cand])])        # fewest empty GPUs, then the lowest node
        a, b = int(lo[node]), int(hi[node])
        run = (a + np.flatnonzero(free[a:b])[:gpus]).tolist()
        return run, run
    n = nodes_needed(gpus, per_node)
    sizes = hi - lo
    elig = np.flatnonzero((per_free == sizes) & (sizes >= per_node))
    if len(elig) < n:
        return None
    chosen = None
    for t in dict.fromkeys(types[i] for i in elig.tolist()):   # GPU types in node order
        same = [i for i in elig.tolist() if types[i] == t]
        if len(same) >= n:
            chosen = same[:n]
            break
    if chosen is None:
        chosen = elig[:n].tolist()
    run, hold, left = [], [], gpus
    for node in chosen:
        a, b = int(lo[node]), int(hi[node])
        take = min(per_node, left)
        run += range(a, a + take)
        hold += range(a, b)
        left -= take
    return run, hold
