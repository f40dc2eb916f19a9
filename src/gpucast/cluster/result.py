"""What one simulation run returns: per-job records and the cluster utilization timeline.

This is the contract between the simulator (``engine``) and everything that reads its output
(``metrics``, ``report``, the ``gpucast simulate`` command). It holds facts about a run, never
derived statistics: metrics compute those.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobRecord:
    """One job's life in a simulation run.

    ``start_s`` is the first time the job was placed (``None`` if it never started); ``finish_s``
    the time it completed (``None`` if it did not finish before the run ended).
    ``solo_duration_s`` is its true run time alone on the GPU type it (first) ran on, or on the
    cluster's first GPU type if it never ran. ``gpu_seconds`` sums, over its GPUs, the time they
    were allocated to it, including work later lost to out-of-memory failures. An inference
    service (``latency_target_s`` set) runs for its lifetime (its ``solo_duration_s``) and counts
    in ``late_s`` the seconds its batches took longer than its target.
    """

    job_id: str
    workload: str
    batch_size: int
    gpus: int
    arrival_s: float
    start_s: float | None
    finish_s: float | None
    solo_duration_s: float
    gpu_seconds: float
    oom_failures: int
    restarts: int
    # An inference service: its latency target per batch, and the seconds it served with batches
    # slower than that. Out of the repr, as the repr of a record of any other job stays what it
    # was before services (tests/cluster/test_equivalence.py digests it).
    latency_target_s: float | None = field(default=None, repr=False)
    late_s: float | None = field(default=None, repr=False)


@dataclass
class SimResult:
    """A whole run: which policy on which cluster, every job, and utilization over time.

    ``util_timeline`` is a step function: each ``(time_s, pct)`` holds from ``time_s`` until the
    next entry; it starts at time 0. ``pct`` is cluster GPU utilization in percent (0-100) as
    defined in ``engine``'s docstring. ``end_s`` is the time the last job finished.
    ``busy_intervals``: the ``(start_s, end_s)`` stretches during which at least one job was
    queued or running (arrived, neither finished nor abandoned), in time order; empty in a
    result that did not record them (a hand-made one).
    """

    policy: str
    n_gpus: int
    gpu_types: dict[str, int]
    records: list[JobRecord]
    util_timeline: list[tuple[float, float]]
    end_s: float
    params: dict = field(default_factory=dict)
    alloc_timeline: list[tuple[float, float]] = field(default_factory=list)  # % of GPUs holding a job
    busy_intervals: list[tuple[float, float]] = field(default_factory=list)  # a job queued or running
