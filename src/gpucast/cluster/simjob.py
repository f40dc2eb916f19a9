"""A job's state in one simulator run (:class:`SimJob`, what the engine moves and the policies read)
and the profiling pool a policy takes from the cluster (:func:`pool_size`). Used by
:mod:`gpucast.cluster.engine`.
"""

from __future__ import annotations

from gpucast.cluster import gangs
from gpucast.cluster.policies.base import Policy


class SimJob:
    """A job's state in one run (policies read ``gpus``, ``obs``, ``ooms``, ``limit_s``)."""

    __slots__ = ("i", "tj", "prof", "gpus", "obs", "ooms", "restarts", "work", "done", "rate", "last_t",
                 "version", "alloc", "start_s", "finish_s", "run_start", "ckpt_work", "gpu_seconds",
                 "seq", "types", "beh", "solo_s", "abandoned", "ran", "terms", "limit_s", "node_gpus",
                 "slo", "lat", "lat_t", "late_s")

    def __init__(self, i, tj, prof):
        self.i, self.tj, self.prof, self.gpus = i, tj, prof, tj.gpus
        self.node_gpus = gangs.node_gpus(tj.fields, tj.gpus)   # > 0: a planned gang (GPUs per node)
        self.obs = None
        self.ooms = self.restarts = 0
        self.work = self.done = self.rate = self.last_t = 0.0
        self.version = 0
        self.alloc = ()
        self.start_s = self.finish_s = None
        self.run_start = self.ckpt_work = self.gpu_seconds = 0.0
        self.seq = 0
        self.beh = None     # gpu type -> Behaviour
        self.solo_s = None
        self.abandoned = False
        self.ran = False
        self.terms = {}     # gpu -> 1 / (step time there * slowdown there), while placed
        self.limit_s = None  # the time limit a user would request (set on arrival)
        # an inference service (tj.latency_s): its latency target, its batch time now (None while
        # not placed) and since when, and the seconds its batches took longer than the target
        self.slo = tj.latency_s
        self.lat = None
        self.lat_t = 0.0
        self.late_s = 0.0


def pool_size(policy: Policy, n_gpus: int) -> int:
    """GPUs of the profiling pool a policy takes from a cluster of ``n_gpus`` (0 unless it profiles)."""
    if policy.told != "profiled":
        return 0
    return policy.profiling_gpus if policy.profiling_gpus is not None else max(1, n_gpus // 64)
