"""``profiling``: online profiling, then packing by measured utilization.

Each new job first runs alone for ``profile_s`` (60 s: "one minute", as the reference work's
online-profiling baseline) on a reserved pool of ``profiling_gpus`` GPUs, FIFO. The pool is
taken from the cluster (the last GPUs), so it costs capacity; profiling does not advance the
job's training (the run is a measurement). After it the policy knows the job's true solo
utilization and memory on the pool's GPU type (and uses them for every type).

Placement: a GPU whose measured utilizations plus the job's stay at or under ``max_util_pct``
and whose measured memory fits, at most ``max_jobs_per_gpu`` jobs; best fit (the fullest such
GPU). ``profiling_gpus`` default: one per 64 GPUs, at least one (our choice, a parameter).
"""

from __future__ import annotations

from gpucast.cluster.policies.base import Policy


class ProfilingPolicy(Policy):
    name = "profiling"
    told = "profiled"
    score_uses_index = False
    max_jobs_per_gpu = 4
    max_util_pct = 100.0
    profiling_gpus = None    # None: max(1, n_gpus // 64)
    profile_s = 60.0

    def score(self, gpu, job):
        if job.util_pct is None or job.memory_bytes is None:
            return 0.0 if not gpu.jobs else None   # not profiled: exclusive
        util = sum(o.util_pct or 100.0 for o in gpu.jobs) + job.util_pct
        mem = sum(o.memory_bytes or gpu.memory_bytes for o in gpu.jobs) + job.memory_bytes
        if util > self.max_util_pct or mem > gpu.memory_bytes:
            return None
        return self.max_util_pct - util
