"""What to measure: a :class:`RunSpec` (the job, the warm-up and window, the device, the sampling
and the co-location fields), and its JSON form, the one thing that crosses into a worker process.

A module job is refused by :meth:`RunSpec.to_dict` (its factories are code, not data).

:func:`as_run` is the job as the harness runs it (:mod:`gpucast.profile.step`): a job that says
nothing of its data and loop is fed synthetic tensors already on the GPU (``Data(source="device")``,
or the emulated loader of ``input_pipeline_s``) and steps with one ``loss.item()``, no bar, no logging
and torch's default ``cudnn.benchmark`` (off). Predictions compared with a measured row must use it:
without it the job gets its workload's typical loader (ImageNet JPEG decoding, say), which the run
never had.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from gpucast.job import Job, JobError

__all__ = ["RunSpec", "as_run"]


def as_run(job: Job, cpu_speed: float | None = None) -> Job:
    """``job`` with the data and loop fields it leaves unset filled as the harness runs it;
    ``cpu_speed``: the measuring host's single-thread speed (``stack.cpu_speed``), where the job
    leaves it unset."""
    from dataclasses import replace

    from gpucast.surroundings import Data, Loop, Stack

    harness_data = Data(source="device")
    harness_loop = Loop(item_calls=1, progress_bar=False, log_every=0, cudnn_benchmark=False)
    data = job.data
    if data is None or (data.source is None and not data.has_code):
        data = harness_data if data is None else replace(data, source="device")
    loop = job.loop or harness_loop
    loop = replace(loop, **{k: getattr(harness_loop, k) for k in ("item_calls", "progress_bar", "log_every",
                                                                  "cudnn_benchmark") if getattr(loop, k) is None})
    stack = job.stack
    if cpu_speed is not None and (stack is None or stack.cpu_speed is None):
        stack = replace(stack or Stack(), cpu_speed=float(cpu_speed))
    return replace(job, data=data, loop=loop, stack=stack)


@dataclass(frozen=True)
class RunSpec:
    """How to measure ``job``: warm-up, window, device and sampling.

    ``start_file`` / ``start_at``: start barrier (wait after set-up until the file exists /
    until ``time.time() >= start_at``). ``sync_dir``, ``slot``, ``hold_s``: co-location
    rendezvous (see :mod:`gpucast.profile.colocate`); ``None`` for a solo run.
    """

    job: Job
    warmup_steps: int = 5
    window_s: float = 3.0
    min_window_steps: int = 5
    max_window_steps: int = 500
    device: str = "cuda"
    sampler_hz: float = 50.0
    start_file: str | None = None
    start_at: float | None = None
    sync_dir: str | None = None
    slot: int = 0
    hold_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.job, Job):
            raise TypeError(f"RunSpec.job must be a gpucast Job, got {type(self.job).__name__}")
        if self.job.precision in ("fp8", "mxfp8", "nvfp4"):
            raise JobError(f"field 'precision': {self.job.precision} is not measured here (the profiler runs plain PyTorch; FP8 "
                           "training runs through Transformer Engine): profile amp-bf16 instead")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not isinstance(self.min_window_steps, int) or self.min_window_steps < 1:
            raise ValueError(f"min_window_steps must be an integer >= 1, got {self.min_window_steps!r}")
        if not isinstance(self.max_window_steps, int) or self.max_window_steps < self.min_window_steps:
            raise ValueError(f"max_window_steps must be an integer >= min_window_steps, got {self.max_window_steps!r}")
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s!r}")
        if not self.sampler_hz > 0:
            raise ValueError(f"sampler_hz must be > 0, got {self.sampler_hz!r}")
        if not isinstance(self.device, str) or not self.device.split(":")[0] in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda', 'cuda:N' or 'cpu', got {self.device!r}")

    def to_dict(self) -> dict:
        """JSON-ready; a module job is refused (its factories are code and cannot cross a process)."""
        if self.job.is_module:
            raise JobError("field 'model': a module job cannot run in an isolated worker (its factories "
                           "are code, not data); run it in-process with run_job or add it to the zoo")
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["job"] = self.job.to_dict()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        data = dict(data)
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"unknown RunSpec field {unknown[0]!r}")
        data["job"] = Job.from_dict(data["job"])
        return cls(**data)
