"""``oracle``: the ``gpucast`` policy told the truth: true utilization, true memory (no
interval needed) and the true slowdowns (Gavel's measured pair slowdowns where the engine uses
them, the co-location model on true timelines elsewhere). An upper bound for prediction-based
packing with this placement rule, not an optimal scheduler.
"""

from __future__ import annotations

from gpucast.cluster import interference
from gpucast.cluster.policies.gpucast import GpucastPolicy


class OraclePolicy(GpucastPolicy):
    name = "oracle"
    told = "truth"

    def _slowdowns(self, obs, gpu_type):
        types = [o.job_type if o.gpus == 1 else None for o in obs]
        return interference.shared_slowdowns([o.timeline() for o in obs], types, gpu_type)
