"""The Python API: ``predict(job, gpu)`` and ``explain(job, gpu)``.

Both run the one flow of DESIGN.md: the job is traced once (cached by its key; module jobs by
their factories too), the trace is estimated on the GPU, and the estimate becomes a
:class:`~gpucast.prediction.Prediction`. The prediction
is the analytic estimate (``model_version = analytic-<version>``, ``+env.<label>@<digest>`` when a
calibrated environment made it; its intervals are then split-conformal from that calibration's
held-out residuals).

A job that names its own data (``data.dataset``/``collate``/``environment``, user code) has it
measured on this CPU first (:func:`gpucast.probe.dataset.resolve_job`: cached in this process);
the prediction is of that measured job (its ``job`` and ``job_key`` carry the measured
``per_sample_s``), and a note says what was measured. The trace is the job's own (the graph does
not depend on the data's cost).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

from gpucast.version import __version__
from gpucast.estimate import DEFAULT, Estimate, EstimatorConfig, estimate
from gpucast.estimate.kernels import absent, run_totals
from gpucast.estimate.environment import Environment
from gpucast.estimate.stack import host_factor
from gpucast.graph.trace import Trace
from gpucast.graph.precision import te_layers_of
from gpucast.hardware import GpuSpec, get_gpu
from gpucast import formats
from gpucast.job import Job, JobError
from gpucast.prediction import Prediction
from gpucast.surroundings import Data

MODEL_VERSION = f"analytic-{__version__}"


def model_version(env: Environment | None = None) -> str:
    """``analytic-<version>`` with the default environment; ``analytic-<version>+env.<label>@<digest>``
    with a calibrated one (:func:`gpucast.learn.artifacts.load_environment`)."""
    if env is None or env.label == "default":
        return MODEL_VERSION
    return f"{MODEL_VERSION}+env.{env.label}"


def _intervals(est: Estimate, env: Environment | None):
    """The estimate's intervals: split-conformal from the environment's held-out residuals where it
    has them, the constants' corners elsewhere; and a line saying which is which."""
    util, mem, step = est.gpu_util_interval, est.memory_interval, est.step_time_interval
    conformal = {q: (level, h, n) for q, level, h, n in (env.conformal if env is not None else ())}
    if not conformal:
        return util, mem, step, "constant corners (no measurements): a sensitivity band, not a calibrated interval"
    from gpucast.learn.intervals import interval

    said = []
    if "util_pct" in conformal:
        util = interval("util_pct", est.gpu_util_pct, conformal["util_pct"][1])
        said.append("utilization")
    if "memory_mib" in conformal:
        lo, hi = interval("memory_mib", est.memory.total_bytes, conformal["memory_mib"][1])
        mem = (int(lo), int(hi))
        said.append("memory")
    if "step_time_s" in conformal:
        step = interval("step_time_s", est.step_time_s, conformal["step_time_s"][1])
        said.append("step time")
    level, _, n = next(iter(conformal.values()))
    rest = [q for q, k in (("utilization", "util_pct"), ("memory", "memory_mib"), ("step time", "step_time_s"))
            if k not in conformal]
    return util, mem, step, (f"split-conformal {level:.0%} for {', '.join(said)} from {n} held-out rows of "
                             f"{env.label}" + (f"; constant corners for {', '.join(rest)}" if rest else ""))
_TRACE_CACHE_SIZE = 64
_traces: OrderedDict = OrderedDict()
_traces_lock = threading.Lock()


def _cache_key(job: Job):
    # The captured step is one replica's micro-batch: neither the GPU count nor the parallel plan
    # is in the graph (gpucast.estimate.parallel turns it into per-rank work), so every plan shares
    # one capture.
    if job.gpus != 1 or job.parallel is not None:
        job = job.with_(gpus=1, parallel=None)
    # Nor is the host: the loop, the loader and the host's speed and cores change what the step costs on
    # the host, not what it runs on the GPU (of the data, only sequence packing shapes the graph).
    packed = job.data.packed_sample_len if job.data is not None else None
    host = {"loop": None, "input_pipeline_s": 0.0, "data": None if packed is None else Data(packed_sample_len=packed)}
    if job.stack is not None and (job.stack.cpu_speed is not None or job.stack.cpu_cores is not None):
        host["stack"] = replace(job.stack, cpu_speed=None, cpu_cores=None)
    if any(getattr(job, k) != v for k, v in host.items()):
        job = job.with_(**host)
    if job.is_module:
        return (job, id(job.model_fn), id(job.input_fn), id(job.loss_fn))
    return job


def capture_job(job: Job) -> Job:
    """The job as its trainer captures it: a plan under Megatron runs Transformer Engine's fused layers
    (``stack.kernels: transformer-engine``, :mod:`gpucast.graph.te`) unless its stack says otherwise."""
    if job.parallel is None or (job.stack is not None and job.stack.kernels is not None):
        return job
    from gpucast.estimate.parallel.framework import framework_of
    from gpucast.surroundings import Stack

    if framework_of(job.parallel) != "megatron":
        return job
    return job.with_(stack=(job.stack or Stack()).merged(Stack(kernels="transformer-engine")))


def trace(job: Job) -> Trace:
    """The job's captured step (cached), with its trainer's kernels (:func:`capture_job`)."""
    from gpucast.graph import capture

    job = capture_job(job)
    key = _cache_key(job)
    with _traces_lock:
        hit = _traces.get(key)
        if hit is not None:
            _traces.move_to_end(key)
            return hit
    tr = capture(job)  # outside the lock: captures in several threads run side by side
    with _traces_lock:
        _traces[key] = tr
        if len(_traces) > _TRACE_CACHE_SIZE:
            _traces.popitem(last=False)
    return tr


def _as_job(job) -> Job:
    if isinstance(job, Job):
        return job
    if isinstance(job, str):
        return Job(model=job)
    if isinstance(job, dict):
        return Job.from_dict(job)
    raise TypeError(f"job must be a Job, a zoo name or a dict, got {type(job).__name__}")


def _measured(job: Job):
    """The job with its own dataset or environment measured on this CPU (gpucast.probe), and the
    measurement; the job and None when it names no such code."""
    if job.data is None or not job.data.has_code:
        return job, None
    from gpucast.probe.dataset import resolve_job

    return resolve_job(job)


def predict(job: Job | str | dict, gpu: str | GpuSpec = "a100-80gb",
            config: EstimatorConfig | None = None, env: Environment | None = None,
            window_s: float | None = None, learned=None) -> Prediction:
    """Predict utilization, peak memory and step time of ``job`` on ``gpu``.

    ``env`` holds the cluster's host and stack constants (default: :meth:`Environment.default`);
    ``window_s`` asks for the utilization a monitor averages over the first ``window_s`` seconds
    of the run instead of the steady state; ``learned`` a hybrid model (:func:`explain`)."""
    return explain(job, gpu, config, env, window_s, learned).prediction


@dataclass
class Explanation:
    """A prediction with the trace and estimate behind it: where time and memory go."""

    prediction: Prediction
    trace: Trace
    estimate: Estimate
    gpu: GpuSpec

    def by_phase_and_category(self) -> list[dict]:
        """Rows of (phase, category): ops, kernels, FLOPs, bytes and estimated GPU time."""
        rows: dict[tuple, dict] = {}
        gone = absent(self.trace, self.gpu, DEFAULT)   # kernels this GPU does not run (.estimate.kernels)
        for op, t, skip in zip(self.trace.ops, self.estimate.kernel_times.time, gone):
            if skip:
                continue
            r = rows.setdefault((op.phase, op.category), {"phase": op.phase, "category": op.category, "ops": 0,
                                                          "kernels": 0, "flops": 0, "bytes": 0, "gpu_time_s": 0.0})
            r["ops"] += 1
            r["kernels"] += op.kernels
            r["flops"] += op.flops
            r["bytes"] += op.bytes
            r["gpu_time_s"] += float(t)
        return sorted(rows.values(), key=lambda r: -r["gpu_time_s"])


def explain(job: Job | str | dict, gpu: str | GpuSpec = "a100-80gb",
            config: EstimatorConfig | None = None, env: Environment | None = None,
            window_s: float | None = None, learned=None) -> Explanation:
    """The prediction with its trace and estimate. ``learned`` is a hybrid model from
    :func:`gpucast.learn.artifacts.load_model` that corrects one quantity (``gpucast learn fit``)."""
    job = _as_job(job)
    spec = get_gpu(gpu)
    if window_s is not None and not (isinstance(window_s, (int, float)) and window_s > 0):
        raise ValueError(f"window_s must be positive seconds, got {window_s!r}")
    if job.mode == "serve":  # an LLM deployment: the engine's run over its requests
        from gpucast.api_serving import serving_prediction

        unsupported = formats.unsupported(job.precision, spec)
        if unsupported:
            raise JobError(f"field 'precision': {unsupported}")

        pred, tr, est = serving_prediction(job, spec, config, env, model_version(env))
        return Explanation(prediction=pred, trace=tr, estimate=est, gpu=spec)
    unsupported = formats.unsupported(job.precision, spec)
    if unsupported:
        raise JobError(f"field 'precision': {unsupported}")
    fed, measured = _measured(job)  # before the (slower) capture: a failing dataset fails fast
    tr = trace(job)
    if job.data is not None and job.data.packed_sample_len:   # attention per packed sample (gpucast.graph.packing)
        from gpucast.graph import packing

        tr = packing.view(tr, job)
    if te_layers_of(capture_job(job)):   # fused attention skips a sliding window's masked tiles (gpucast.graph.windows)
        from gpucast.graph import windows

        tr = windows.view(tr, job)
    job = fed
    if job.parallel is not None:
        from gpucast.estimate.parallel import estimate_plan

        est = estimate_plan(tr, job, spec, config, env, window_s)
    else:
        est = estimate(tr, job, spec, config, env, window_s)
    notes = list(tr.notes) + (est.plan["notes"] if est.plan else [])
    if measured is not None:
        notes.append(measured.note())
    if job.precision in ("amp-bf16", "bf16") and not spec.supports_bf16:
        notes.append(f"{spec.name} has no bf16 tensor cores: bf16 math is costed at the fp32 rate")
    if job.precision == "fp8" and spec.fp8_tflops is None:
        notes.append(f"{spec.name} has no FP8 tensor cores (Ada, Hopper and Blackwell have them; Transformer Engine "
                     f"refuses fp8 elsewhere): its FP8 GEMMs are costed at the fp16 rate")
    if job.precision == "tf32" and spec.tf32_tflops is None:
        notes.append(f"{spec.name} has no tf32 tensor cores: tf32 runs as fp32")
    fits = est.memory.total_bytes <= spec.memory_bytes
    if not fits:
        notes.append(f"needs {est.memory.total_bytes / 2**30:.1f} GiB, more than the {spec.memory_bytes / 2**30:.1f} "
                     f"GiB of a {spec.name}: the job would fail with out-of-memory")
    util_iv, mem_iv, step_iv, basis = _intervals(est, env)
    ops, launches, moved = run_totals(tr, spec, config or DEFAULT)   # what this GPU runs of the trace
    pred = Prediction(
        job=job.to_dict(), job_key=job.key, gpu=spec.name,
        gpu_util_pct=round(est.gpu_util_pct, 2),
        gpu_util_interval=tuple(round(v, 2) for v in util_iv),
        memory_peak_bytes=est.memory.total_bytes, memory_interval=mem_iv,
        step_time_s=est.step_time_s, step_time_interval=step_iv,
        gpu_busy_s=est.gpu_busy_s, host_time_s=est.host_time_s,
        flops=tr.flops, bytes=moved, kernels=launches, ops=ops,
        parameters=tr.parameters, memory_allocated_peak_bytes=est.memory.allocated_peak_bytes, fits_in_memory=fits,
        bottleneck=est.bottleneck, bottleneck_reason=est.bottleneck_reason,
        op_coverage=round(tr.coverage, 4), time_coverage=round(est.costed_time_share, 4),
        uncosted_ops=tr.uncosted, model_version=model_version(env),
        samples_per_s=(est.plan["samples_per_s"] if est.plan else
                       job.batch_size * job.gpus / est.step_time_s if est.step_time_s > 0 else 0.0),
        notes=tuple(notes), surroundings=est.surroundings.to_dict(),
        loader_time_s=est.loader.loader_s * host_factor(est.surroundings.stack, env or Environment.default()),
        util_basis=est.util_basis,
        interval_basis=basis, gpu_idle_gaps=est.timeline.idle_gaps if est.timeline is not None else 0,
        gpu_held_pct=round(est.gpu_held_pct, 2), gpu_held_interval=tuple(round(v, 2) for v in est.gpu_held_interval),
        gpu_syncs=est.timeline.syncs if est.timeline is not None else 0,
        plan=est.plan or {},
    )
    if learned is not None:
        from gpucast.learn.apply import apply

        pred = apply(pred, learned, est.prepared, env)
    return Explanation(prediction=pred, trace=tr, estimate=est, gpu=spec)
