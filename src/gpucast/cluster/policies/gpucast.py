"""``gpucast``: packing with gpucast's predictions, their intervals and the interference model.

Told gpucast's predictions with intervals. A GPU is allowed when the upper ends of the memory
intervals of its jobs and this one fit (the interval is the safety margin), it holds fewer than
``max_jobs_per_gpu`` jobs, and, if it is not empty, sharing pays: the summed normalized
throughput (sum of 1/slowdown over the GPU's jobs, slowdowns from
:mod:`gpucast.cluster.interference` on the predicted utilizations) rises by at least
``min_gain`` (0.2: the newcomer adds at least a fifth of a GPU's worth of work net of the harm
it does; our choice, a parameter). Among allowed GPUs the job goes where it hurts least: the
smallest increase of the summed slowdown of the GPU's jobs plus its own slowdown minus one (an
empty GPU costs 0). FIFO, like ``packing``, so the two differ only in placement.
"""

from __future__ import annotations

from gpucast.cluster import interference
from gpucast.cluster.policies.base import Policy


class GpucastPolicy(Policy):
    name = "gpucast"
    told = "prediction"
    score_uses_index = False
    max_jobs_per_gpu = 4
    min_gain = 0.2

    def _slowdowns(self, obs, gpu_type) -> list[float]:
        return interference.slowdowns([o.util_pct if o.util_pct is not None else 100.0 for o in obs])

    def predicted_slowdowns(self, gpu, job):
        return self._slowdowns(gpu.jobs + (job,), gpu.gpu_type)

    def score(self, gpu, job):
        if not gpu.jobs:
            return 0.0     # alone: nothing to protect (an over-large job fails in the engine)
        mem = sum(o.memory_upper for o in gpu.jobs) + job.memory_upper
        if mem > gpu.memory_bytes:
            return None
        before = self._slowdowns(gpu.jobs, gpu.gpu_type)
        after = self._slowdowns(gpu.jobs + (job,), gpu.gpu_type)
        gain = sum(1.0 / s for s in after) - sum(1.0 / s for s in before)
        if gain < self.min_gain:
            return None
        return sum(after) - sum(before) - 1.0
