"""What the simulator knows of one job, as values: its :class:`Profile` (what distinguishes its
behaviour from another job's), gpucast's :class:`Estimate` of it on a GPU type, its true solo
:class:`Behaviour` there, and the :class:`Observation` a policy is told. Where each comes from
(the truth, the error model, the prediction cache) is :mod:`gpucast.cluster.truth`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.cluster import gavel

__all__ = ["Profile", "Estimate", "Behaviour", "Observation"]


@dataclass(frozen=True)
class Profile:
    """What distinguishes one job's behaviour from another's (not its size or arrival)."""

    workload: str
    batch_size: int
    precision: str = "fp32"
    job_type: str | None = None   # Gavel job type, when the job is one
    fields: tuple = ()            # gpucast Job fields, sorted items

    @classmethod
    def from_trace_job(cls, tj) -> "Profile":
        return cls(tj.workload, tj.batch_size, tj.precision, tj.job_type, tj.fields)

    @classmethod
    def from_gavel(cls, job_type: str) -> "Profile":
        f = dict(gavel.job_fields(job_type))
        f.setdefault("precision", "fp32")
        return cls(f["model"], int(f["batch_size"]), f["precision"], job_type,
                   tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in f.items())))

    @classmethod
    def from_zoo(cls, workload: str, batch_size: int, precision: str = "fp32") -> "Profile":
        return cls(workload, batch_size, precision, None,
                   tuple(sorted({"model": workload, "batch_size": batch_size, "precision": precision}.items())))

    def job(self):
        from gpucast.job import Job

        f = dict(self.fields) or {"model": self.workload, "batch_size": self.batch_size,
                                  "precision": self.precision}
        return Job(**f)


@dataclass(frozen=True)
class Estimate:
    """gpucast's prediction of one profile on one GPU type (point values and intervals)."""

    util_pct: float
    util_interval: tuple[float, float]
    memory_bytes: float
    memory_interval: tuple[float, float]
    step_time_s: float
    step_time_interval: tuple[float, float]
    busy_s: float = 0.0        # predicted GPU busy seconds per step
    gaps: float = 1.0          # predicted idle periods of the GPU per step
    mem_bound: float = 0.5     # predicted memory-bound share of kernel time
    held_pct: float | None = None   # predicted share of the step the kernels hold the GPU (None: util_pct)
    syncs: float | None = None      # predicted host syncs per step (None: unknown)

    @property
    def held(self) -> float:
        """The predicted held share (percent), at most the NVML utilization."""
        return self.util_pct if self.held_pct is None else min(self.util_pct, self.held_pct)


@dataclass(frozen=True)
class Behaviour:
    """True solo behaviour of one profile on one GPU type; ``*_source`` is ``measured:...`` or
    ``simulated`` (prediction times the error model)."""

    util_pct: float
    memory_bytes: float
    step_time_s: float
    util_source: str
    memory_source: str
    step_source: str
    gaps: float = 1.0          # idle periods of the GPU per step (the prediction's, anchored)
    mem_bound: float = 0.5     # memory-bound share of kernel time (predicted)
    held_pct: float | None = None   # share of the step the kernels hold the GPU (None: util_pct)
    syncs: float | None = None      # host syncs per step (predicted)

    def timeline(self):
        """This behaviour as the co-location model sees it (:mod:`gpucast.cluster.timeshare`): the
        held share is what a neighbour competes for, the rest of NVML's reading is hidden idle
        (remembered on the frozen behaviour)."""
        tl = self.__dict__.get("_timeline")
        if tl is not None:
            return tl
        from gpucast.cluster.timeshare import JobTimeline

        tl = self.__dict__["_timeline"] = JobTimeline.from_util(
            self.util_pct, self.step_time_s, self.gaps, self.mem_bound, self.held_pct, self.syncs)
        return tl


@dataclass(frozen=True)
class Observation:
    """What a policy is told about a job on one GPU type. ``None`` means not told."""

    workload: str
    batch_size: int
    gpus: int
    gpu_type: str
    source: str                                   # nothing | prediction | profiled | truth
    util_pct: float | None = None
    util_interval: tuple[float, float] | None = None
    memory_bytes: float | None = None
    memory_interval: tuple[float, float] | None = None
    step_time_s: float | None = None
    job_type: str | None = None
    gaps: float = 1.0
    mem_bound: float = 0.5
    held_pct: float | None = None   # told share of the step the kernels hold the GPU (None: util_pct)
    syncs: float | None = None
    # A planned gang (gpucast.cluster.gangs): GPUs per node of its plan; 0 for any other job. Part
    # of what the job asks for (like ``gpus``), so every policy is told it.
    node_gpus: int = 0
    # A MIG slice (gpucast.mig): how much slower the job is told to run on it than on the whole GPU
    # it was carved from (told step on the slice over told step on the whole GPU, minus 1); 0 for a
    # whole GPU or where a step is not told. Set by the simulator (:func:`with_slice_costs`).
    slice_cost: float = 0.0
    # An inference service (a mix's ``services``): the latency it must keep per batch, seconds
    # (its step on the GPU, shared or not); None for a job that runs to completion.
    latency_s: float | None = None
    # The told step's 80 % interval (None: not told); the gpucast policy keeps a service's
    # latency by its upper end (``cautious``).
    step_interval: tuple[float, float] | None = None

    def timeline(self, upper: bool = False):
        """What this observation says of the job's timeline (:mod:`gpucast.cluster.timeshare`):
        the held share (what a neighbour competes for) and NVML's reading; ``upper``: at the upper
        end of the utilization interval, the held share scaled alike (a cautious neighbour). A job
        whose utilization is not told counts as saturating the GPU. Remembered on the (frozen)
        observation: placement asks for it millions of times."""
        memo = self.__dict__.setdefault("_timelines", {})
        tl = memo.get(upper)
        if tl is None:
            tl = memo[upper] = self._timeline(upper)
        return tl

    def _timeline(self, upper: bool):
        from gpucast.cluster.timeshare import JobTimeline

        u, h = self.util_pct, self.held_pct
        step = self.step_time_s or 0.1
        if u is None:
            return JobTimeline(step, step, 0.0, self.mem_bound)
        if upper and self.util_interval is not None:
            hi = self.util_interval[1]
            if h is not None and u > 0:
                h = min(hi, h * hi / u)
            u = hi
        return JobTimeline.from_util(u, step, self.gaps, self.mem_bound, h, self.syncs)

    @classmethod
    def from_prediction(cls, prediction, job=None) -> "Observation":
        """What a policy told predictions learns from ``prediction`` (a
        :class:`~gpucast.prediction.Prediction`) of ``job`` (a :class:`~gpucast.job.Job`;
        by default the job the prediction records), on the prediction's GPU type."""
        from gpucast.cluster.gangs import node_gpus

        spec = job.to_dict() if job is not None else prediction.job
        gpus = int(spec.get("gpus", 1))
        return cls(workload=spec["model"], batch_size=int(spec["batch_size"]), gpus=gpus,
                   gpu_type=prediction.gpu, source="prediction", util_pct=prediction.gpu_util_pct,
                   util_interval=tuple(prediction.gpu_util_interval),
                   memory_bytes=float(prediction.memory_peak_bytes),
                   memory_interval=tuple(float(x) for x in prediction.memory_interval),
                   step_time_s=prediction.step_time_s,
                   step_interval=tuple(float(x) for x in prediction.step_time_interval),
                   gaps=float(max(prediction.gpu_idle_gaps, 0)),
                   mem_bound=_mem_bound(prediction), held_pct=prediction.gpu_held_pct,
                   syncs=float(prediction.gpu_syncs), node_gpus=node_gpus(spec, gpus))

    @property
    def memory_upper(self) -> float | None:
        """The upper end of the memory interval, else the point value."""
        if self.memory_interval is not None:
            return self.memory_interval[1]
        return self.memory_bytes


def _mem_bound(prediction) -> float:
    from gpucast.cluster.timeshare import mem_bound_share

    try:
        return mem_bound_share(prediction)
    except Exception:  # noqa: BLE001 - a GPU that is not in the catalog: the model's default
        return 0.5


def with_slice_costs(obs: dict) -> dict:
    """``obs`` (GPU type -> :class:`Observation` of one job, the cluster's types) with each MIG
    slice's :attr:`Observation.slice_cost` set from the told steps on the slice and on its whole
    GPU, where the cluster also has that GPU whole (a cluster of slices only has nothing faster to
    wait for: the costs stay 0). Unchanged where the cluster has no slices."""
    from dataclasses import replace

    from gpucast import mig

    out = dict(obs)
    for t, o in obs.items():
        if not mig.is_slice_name(t) or o.step_time_s is None:
            continue
        parent = mig.parent_name(t)
        w = obs.get(parent)
        if w is not None and w.step_time_s:
            out[t] = replace(o, slice_cost=max(0.0, o.step_time_s / w.step_time_s - 1.0))
    return out
