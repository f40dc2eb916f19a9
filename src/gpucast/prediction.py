"""The Prediction every consumer reads: one job on one GPU.

Fields follow DESIGN.md's contract: ``gpu_util_pct`` (what NVML reports), ``gpu_held_pct`` (the
share of time the kernels hold the GPU), ``memory_peak_bytes``, ``step_time_s``
with intervals, ``gpu_busy_s``, ``flops``, ``bytes``, ``kernels``, ``bottleneck``, the GPU and
the model version that made it, the resolved surroundings (data, loop, stack) and the loader's
host time per step, plus op coverage (share of ops and of estimated GPU time that
had a cost rule) and the uncosted ops by name.

``model_version`` says what produced the numbers: ``analytic-<version>`` is the physics model
alone, never a measurement.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Prediction:
    job: dict
    job_key: str
    gpu: str
    gpu_util_pct: float
    gpu_util_interval: tuple[float, float]
    memory_peak_bytes: int
    memory_interval: tuple[int, int]
    step_time_s: float
    step_time_interval: tuple[float, float]
    gpu_busy_s: float
    host_time_s: float
    flops: int
    bytes: int
    kernels: int
    ops: int
    parameters: int
    memory_allocated_peak_bytes: int
    fits_in_memory: bool
    bottleneck: str
    bottleneck_reason: str
    op_coverage: float
    time_coverage: float
    uncosted_ops: dict[str, int]
    model_version: str
    samples_per_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    # What surrounded the graph (resolved data, loop, stack), the loader's host seconds per step,
    # and what the utilization figure is: "steady-state" or a run-window average.
    surroundings: dict = field(default_factory=dict)
    loader_time_s: float = 0.0
    util_basis: str = "steady-state"
    # What the intervals are: split-conformal from a calibration's held-out residuals, or the
    # constants' corners where no measurement exists.
    interval_basis: str = "constant corners (no measurements)"
    # Idle periods of the GPU per step (between kernels, at syncs, between steps): with
    # gpu_busy_s and step_time_s, the timeline a co-location model interleaves (cluster.timeshare).
    gpu_idle_gaps: int = 0
    # The share of the step the job's kernels hold the GPU (percent), what a co-located job
    # competes for; gpu_util_pct is what NVML reports, which reads short idle gaps as busy
    # (gpucast.estimate.nvml). held <= reported.
    gpu_held_pct: float = 0.0
    gpu_held_interval: tuple[float, float] = (0.0, 0.0)
    # Points per step where the host waits for the GPU (syncs): where a co-located job's time
    # slice can hold this one up (cluster.timeshare).
    gpu_syncs: int = 0
    # A job with a parallel plan (job.parallel, gpucast.estimate.parallel): tensor/pipeline/data
    # degrees, the step's breakdown (compute, recompute, exposed communication per kind, pipeline
    # bubble, optimizer), memory and utilization per stage, MFU/HFU, tokens/s per GPU and for the
    # job. Empty for a single replica. step_time_s is then one optimizer step (all micro-batches),
    # memory_peak_bytes the busiest GPU's and gpu_util_pct the mean over the stages' GPUs.
    plan: dict = field(default_factory=dict)
    # mode 'serve' (gpucast.estimate.serving): TTFT, TPOT, throughput, KV capacity of the deployment;
    # then step_time_s is one decode iteration, gpu_util_pct the run's busy share, memory_peak_bytes what
    # the engine takes on each GPU. Empty for training and inference jobs.
    serving: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("gpu_util_interval", "memory_interval", "step_time_interval", "notes", "gpu_held_interval"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Prediction":
        """The Prediction that :meth:`to_dict` gave ``d`` (e.g. read back from JSON): the lists of
        tuple fields become tuples again, so ``from_dict(p.to_dict()) == p``. A missing field takes
        its default (a required one, or an unknown name, is a TypeError)."""
        from dataclasses import fields

        tuples = {f.name for f in fields(cls) if str(f.type).startswith("tuple")}
        return cls(**{k: tuple(v) if k in tuples and isinstance(v, list) else v for k, v in d.items()})
