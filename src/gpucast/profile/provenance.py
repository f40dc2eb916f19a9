"""The provenance columns of a run's row: the job, the software (gpucast, torch, CUDA), the host
CPU, the GPU as NVML names it, and when the run started. Nothing here measures anything.
"""

from __future__ import annotations

import datetime as _dt
import platform
import uuid

from gpucast.profile.schema import empty_row
from gpucast.profile.spec import RunSpec
from gpucast.version import __version__

__all__ = ["host_cpu", "now_iso", "base_row", "gpu_provenance"]


def host_cpu() -> str:
    """The host CPU's model name (/proc/cpuinfo), for provenance and benchmark machine lines."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def now_iso() -> str:
    """The wall-clock time now, ISO 8601 in UTC with milliseconds (the rows' ``started_at``)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def base_row(spec: RunSpec) -> dict:
    """A row with the job's columns and the software provenance filled; no measurement."""
    job = spec.job
    row = empty_row()
    row.update(
        run_id=uuid.uuid4().hex, suite="adhoc", kind="solo", slot=spec.slot,
        gpucast_version=__version__, host_cpu=host_cpu(),
        job_key=job.key, job_json=job.to_json(),
        model=job.model, batch_size=job.batch_size, seq_len=job.seq_len,
        input_shape=",".join(map(str, job.input_shape)) if job.input_shape else None,
        precision=job.precision, mode=job.mode, optimizer=job.optimizer,
        input_pipeline_s=job.input_pipeline_s, warmup_steps=spec.warmup_steps,
    )
    try:
        import torch

        row["torch_version"] = str(torch.__version__)
        row["cuda_version"] = torch.version.cuda
    except ImportError:  # pragma: no cover - torch is always there where jobs run
        pass
    return row


def gpu_provenance(backend) -> dict:
    """The GPU columns of a row (its NVML name, catalog name, memory, driver) from ``backend``."""
    from gpucast.hardware import from_nvml_name

    name = backend.device_name()
    spec = from_nvml_name(name)
    return dict(gpu_model=name, gpu_name=spec.name if spec is not None else None,
                gpu_memory_total_bytes=int(backend.memory_total()), driver_version=backend.driver_version())
