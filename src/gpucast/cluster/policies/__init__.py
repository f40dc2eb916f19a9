"""Scheduling policies, one small file each, behind :class:`~.base.Policy`.

``POLICIES`` maps a name to its class; :func:`choose_gpu` is the pure placement rule that the
simulator and the HTTP service share.
"""

from gpucast.cluster.policies.base import GpuOccupancy, Policy, choose_gpu, gang, obs_for
from gpucast.cluster.policies.gpucast import GpucastPolicy
from gpucast.cluster.policies.horus import HorusPolicy
from gpucast.cluster.policies.oracle import OraclePolicy
from gpucast.cluster.policies.packing import PackingPolicy
from gpucast.cluster.policies.profiling import ProfilingPolicy
from gpucast.cluster.policies.slot import SlotPolicy
from gpucast.cluster.policies.slot_fifo import SlotFifoPolicy

POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (SlotPolicy, SlotFifoPolicy, ProfilingPolicy, HorusPolicy, PackingPolicy, GpucastPolicy,
                        OraclePolicy)
}


def make_policy(name: str, **params) -> Policy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} (have: {', '.join(POLICIES)})")
    return POLICIES[name](**params)


__all__ = ["POLICIES", "Policy", "GpuOccupancy", "choose_gpu", "gang", "make_policy", "obs_for",
           "SlotPolicy", "SlotFifoPolicy", "ProfilingPolicy", "HorusPolicy", "PackingPolicy", "GpucastPolicy",
           "OraclePolicy"]
