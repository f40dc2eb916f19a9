"""The measured-run row: one row per run, solo or co-located, with its provenance.

Every column is listed in ``COLUMNS`` with its Arrow type and meaning; ``arrow_schema()``
builds the Parquet schema from it, so the dataset, the runner and the readers agree on one
definition. Units are in the names (``_s`` seconds, ``_pct`` percent, ``_bytes``, ``_mhz``,
``_w``). A value that a run could not produce (a crashed run has no step time) is null.

Status values: ``ok`` (measured), ``oom`` (CUDA out of memory: the job does not fit),
``timeout`` (the run outlived its limit), ``crash`` (the child died without a result),
``error`` (the job raised something else; ``error`` holds one line).
"""

from __future__ import annotations

STATUSES = ("ok", "oom", "timeout", "crash", "error")
KINDS = ("solo", "colocated")
SCHEMA_VERSION = 1

# name -> (arrow type name, meaning)
COLUMNS: dict[str, tuple[str, str]] = {
    # identity and provenance
    "schema_version": ("int32", "version of this schema"),
    "run_id": ("string", "unique id of this run"),
    "config_id": ("string", "id of what was measured (job, GPU model, kind, partners): resume skips done ones"),
    "suite": ("string", "name of the suite that ran it, or 'adhoc'"),
    "kind": ("string", "solo | colocated"),
    "group_id": ("string", "co-located runs of one group share it; null for solo"),
    "slot": ("int32", "index of this job within its co-located group (0 for solo)"),
    "status": ("string", "ok | oom | timeout | crash | error"),
    "error": ("string", "one line, for statuses other than ok"),
    "started_at": ("string", "UTC ISO-8601 start of the run"),
    "duration_s": ("float64", "wall time of the whole run, set-up included"),
    "gpu_name": ("string", "gpucast catalog name of the GPU, null if not in the catalog"),
    "gpu_model": ("string", "NVML device name (no UUID, no serial)"),
    "gpu_memory_total_bytes": ("int64", "NVML total device memory"),
    "driver_version": ("string", "NVIDIA driver version"),
    "cuda_version": ("string", "CUDA version torch was built with"),
    "torch_version": ("string", "torch.__version__"),
    "gpucast_version": ("string", "gpucast.__version__"),
    "host_cpu": ("string", "host CPU model string"),
    # the job
    "job_key": ("string", "gpucast Job.key"),
    "job_json": ("string", "the Job spec as JSON"),
    "model": ("string", "zoo name"),
    "batch_size": ("int32", "batch size per GPU"),
    "seq_len": ("int32", "sequence length, null when not set"),
    "input_shape": ("string", "per-sample input shape override, e.g. '3,224,224', null when not set"),
    "precision": ("string", "fp32 | tf32 | amp-fp16 | amp-bf16"),
    "mode": ("string", "train | infer"),
    "optimizer": ("string", "sgd | adam | adamw | none"),
    "input_pipeline_s": ("float64", "emulated host input-pipeline time per step"),
    # method
    "sampler_hz": ("float64", "NVML sampling rate achieved"),
    "warmup_steps": ("int32", "steps run before the window"),
    "window_steps": ("int32", "steps in the steady-state window"),
    "window_s": ("float64", "length of the steady-state window"),
    # step time (CUDA events, per step in the window)
    "step_time_mean_s": ("float64", "mean step time in the window"),
    "step_time_p5_s": ("float64", "5th percentile"),
    "step_time_p50_s": ("float64", "median"),
    "step_time_p95_s": ("float64", "95th percentile"),
    "step_time_std_s": ("float64", "standard deviation"),
    # NVML utilization.gpu over the window
    "util_mean_pct": ("float64", "mean of NVML utilization.gpu samples in the window"),
    "util_p5_pct": ("float64", "5th percentile"),
    "util_p50_pct": ("float64", "median"),
    "util_p95_pct": ("float64", "95th percentile"),
    "util_samples": ("int32", "NVML samples in the window"),
    # memory
    "mem_used_max_bytes": ("int64", "max NVML device memory used during the run (all processes)"),
    "proc_mem_max_bytes": ("int64", "max NVML memory of this run's process"),
    "torch_max_allocated_bytes": ("int64", "torch.cuda.max_memory_allocated"),
    "torch_max_reserved_bytes": ("int64", "torch.cuda.max_memory_reserved"),
    # clocks and power over the window
    "sm_clock_mean_mhz": ("float64", "mean SM clock"),
    "power_mean_w": ("float64", "mean board power"),
    # co-location
    "partners": ("string", "JSON list of the job keys sharing the GPU (co-located runs)"),
    "solo_step_time_s": ("float64", "this job's solo step time (co-located runs)"),
    "slowdown": ("float64", "step_time_mean_s / solo_step_time_s (co-located runs)"),
    "combined_util_mean_pct": ("float64", "NVML utilization of the shared GPU over the group's window"),
    "combined_mem_max_bytes": ("int64", "max NVML memory used on the shared GPU by the group"),
}


def arrow_schema():
    import pyarrow as pa

    types = {"int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(), "string": pa.string()}
    return pa.schema([pa.field(name, types[t], nullable=True) for name, (t, _) in COLUMNS.items()])


def empty_row() -> dict:
    """A row with every column null except the schema version."""
    row = dict.fromkeys(COLUMNS)
    row["schema_version"] = SCHEMA_VERSION
    return row
