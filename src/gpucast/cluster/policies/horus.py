"""``horus``: prediction-based packing after the Horus papers (Yeung et al., "Horus:
Interference-aware and prediction-based scheduling in deep learning systems", IEEE TPDS 2022).

Told gpucast's point predictions (utilization, memory). Device cost of putting a job on a GPU
with combined predicted utilization ``U`` (its jobs plus this one)::

    cost = 100 - U                          if U <= 100   (prefer filling a GPU towards 100 %)
    cost = overshoot_penalty * (U - 100)    if U >  100   (overshoot penalised harder)

a GPU is not allowed when ``U > 100 + max_overshoot_pct``, when the predicted memory does not
fit, or when it already holds ``max_jobs_per_gpu`` = 3 jobs (the papers' limit). The queue is
utilization-ordered with look-ahead: the first ``lookahead`` waiting jobs (FIFO) are tried in
descending predicted utilization. ``overshoot_penalty`` = 2, ``max_overshoot_pct`` = 50 and
``lookahead`` = 8 are our choices (parameters), not values from the papers.
"""

from __future__ import annotations

from gpucast.cluster.policies.base import Policy, obs_for


class HorusPolicy(Policy):
    name = "horus"
    told = "prediction"
    score_uses_index = False
    max_jobs_per_gpu = 3
    lookahead = 8
    overshoot_penalty = 2.0
    max_overshoot_pct = 50.0

    def score(self, gpu, job):
        mem = sum(o.memory_bytes for o in gpu.jobs) + job.memory_bytes
        if mem > gpu.memory_bytes:
            return None
        u = sum(o.util_pct for o in gpu.jobs) + job.util_pct
        if u > 100.0 + self.max_overshoot_pct:
            return None
        return 100.0 - u if u <= 100.0 else self.overshoot_penalty * (u - 100.0)

    def order(self, window):
        def util(j):
            o = j.obs if not isinstance(j.obs, dict) else next(iter(j.obs.values()))
            return -(o.util_pct or 0.0)
        return sorted(window, key=util)
