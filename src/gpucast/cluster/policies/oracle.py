"""``oracle``: the ``gpucast`` policy told the truth: true utilization, true memory (no
interval needed) and the true slowdowns (Gavel's measured pair slowdowns where the engine uses
them, the co-location model on true timelines elsewhere). An upper bound for prediction-based
packing with this placement rule, not an optimal scheduler.
"""

from __future__ import annotations

from gpucast.cluster import interference, timeshare
from gpucast.cluster.policies.gpucast import GpucastPolicy


class OraclePolicy(GpucastPolicy):
    name = "oracle"
    told = "truth"

    def _slowdowns(self, obs, gpu_type, mode=None):
        types = [o.job_type if o.gpus == 1 else None for o in obs]
        return interference.shared_slowdowns([o.timeline() for o in obs], types, gpu_type, mode)

    def _slowdowns_many(self, sets, gpu_type, mode=None):
        return interference.shared_slowdowns_many(
            [([o.timeline() for o in obs], [o.job_type if o.gpus == 1 else None for o in obs]) for obs in sets],
            gpu_type, mode)

    def _solve_inputs(self, obs):
        return obs.timeline(), (obs.job_type if obs.gpus == 1 else None)

    def _solve_constants(self):
        return timeshare.world(), True

    def score_key(self, obs):
        """The memory bound, the true timeline and what picks a measured pair (the job type of a
        one-GPU job), the GPU count with ``weigh_gangs``, the MIG slice cost, and a service's
        latency target and step: all :meth:`score` reads."""
        if type(self).score is not GpucastPolicy.score or type(self)._slowdowns is not OraclePolicy._slowdowns:
            return None
        return (self.memory_bound(obs), obs.timeline(), obs.job_type if obs.gpus == 1 else None,
                obs.gpus if self.weigh_gangs else 0, obs.slice_cost, obs.latency_s,
                (obs.step_time_s, obs.step_interval) if obs.latency_s is not None else None)

