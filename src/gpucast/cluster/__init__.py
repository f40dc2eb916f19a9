"""Cluster simulator: replay job traces through scheduling policies and compare what they buy.

>>> from gpucast import cluster
>>> spec = cluster.ClusterSpec.homogeneous("v100-16gb", n_gpus=128, gpus_per_node=8)
>>> res = cluster.simulate("gavel", spec, "gpucast", seed=0, error_sigma=0.2)  # doctest: +SKIP

Modules: ``engine`` (event-driven mechanism), ``traces`` (Gavel, synthetic, CSV/Parquet),
``mixes`` (workload mixes drawn to a cluster's utilization), ``truth`` (true behaviour vs what a
policy is told), ``errors`` (the truth's error per quantity), ``timeshare`` (jobs sharing a GPU
from their timelines, a package: ``model``, ``solve`` and ``kernel`` the solve, ``modes`` the sharing
modes ``timeslice``/``mps``/``mps:N`` with ``mps`` the SM limits, ``fit`` and ``pairs`` its fits), ``interference`` (Gavel's measured pairs and
the utilization-only baseline), ``policies/`` (one file per policy), ``gangs`` (multi-GPU jobs with a parallel
plan, placed by node), ``result`` (the output contract), ``spec`` (the cluster),
``gavel`` (Gavel's packaged data and job-type mapping), ``sweep`` (many runs over a grid of
loads, seeds, traces and error scales, on local processes or Ray: ``gpucast simulate --sweep``).
"""

from __future__ import annotations

from gpucast.cluster.policies import POLICIES, GpuOccupancy, Policy, choose_gpu, make_policy
from gpucast.cluster.result import JobRecord, SimResult
from gpucast.cluster.spec import ClusterSpec
from gpucast.cluster.traces import Trace, TraceError, TraceJob, load_trace, synthetic
from gpucast.cluster.truth import Observation, Truth

from gpucast.cluster.run import simulate

__all__ = ["simulate", "load_trace", "synthetic", "ClusterSpec", "POLICIES", "Policy", "choose_gpu",
           "make_policy", "GpuOccupancy", "Observation", "Truth", "Trace", "TraceJob", "TraceError",
           "JobRecord", "SimResult"]
