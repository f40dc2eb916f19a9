"""``predict`` for ``mode: serve`` jobs: the Prediction of an LLM deployment.

The serving model (:mod:`gpucast.estimate.serving`) gives ``Prediction.serving``; the Prediction's
other fields keep their meanings for the deployment: ``step_time_s`` is one decode iteration of the
run's mean batch at its mean context, ``gpu_util_pct`` the share of the run the GPUs are busy (what
NVML's ``utilization.gpu`` averages to over it), ``gpu_held_pct`` the same share (what a neighbour
would compete for), ``memory_peak_bytes`` what the engine takes on each GPU (paged engines: their
``gpu_memory_utilization`` share of the GPU up front; ``hf``: weights, cache and activations),
``fits_in_memory`` whether one request's cache fits beside the weights. The standard estimator runs on
the decode iteration's trace for the counts (FLOPs, bytes, kernels) and the bottleneck.

Not modelled here: intervals from measurements (the point is given as its own interval until
serving rows are measured: ``interval_basis`` says so).
"""

from __future__ import annotations

from gpucast.estimate import estimate
from gpucast.estimate.environment import Environment
from gpucast.estimate.constants import DEFAULT
from gpucast.estimate.serving import decode_step, predict_serving
from gpucast.estimate.serving.engines import resolve
from gpucast.estimate.serving.iteration import grid
from gpucast.estimate.serving.served import model_job, served
from gpucast.prediction import Prediction


_ESTIMATES: dict = {}  # the decode traces' estimates, by (model, shape, GPU, environment, constants)
_ESTIMATES_MAX = 64


def _estimate(job, shape: tuple, spec, cfg, env):
    """gpucast's estimator on a memoised iteration trace (``shape``: batch, new tokens, context, cache)."""
    base = model_job(job)
    key = (base.key, shape, spec, id(env), cfg)
    got = _ESTIMATES.get(key)
    if got is None:
        tr = served(base).trace(*shape)
        infer = job.with_(mode="infer", serve=None, parallel=None, gpus=1, optimizer="none")
        got = (tr, estimate(tr, infer, spec, cfg, env))
        if len(_ESTIMATES) >= _ESTIMATES_MAX:
            _ESTIMATES.pop(next(iter(_ESTIMATES)))
        _ESTIMATES[key] = got
    return got


def serving_prediction(job, spec, config, env, version: str):
    """(Prediction, decode-iteration trace, its estimate) of a ``mode: serve`` job on ``spec``."""
    cfg = config or DEFAULT
    env = env or Environment.default()
    # a decode step's estimate first: its memory gives the CUDA context the engine runs beside
    _, est0 = _estimate(job, (1, 1, 1024, "paged"), spec, cfg, env)
    context = int(est0.memory.breakdown.get("cuda_context", 0))
    serving = predict_serving(job, spec, cfg, env, context)
    mem = serving["memory"]
    mean_batch = max(1, int(round(serving["mean_batch"] or 1)))
    total_ctx = max(1, int(round(serving.get("mean_context") or 1024)))
    cache = "paged" if serving["engine"] != "hf" else "dynamic"
    # the counts (FLOPs, bytes, kernels) of a decode step near the run's mean shape: batch to a power of
    # two and context to the iteration grid, so deployments of one model share the trace
    tr, est = _estimate(job, (1 << (mean_batch.bit_length() - 1), 1, grid(total_ctx)[0], cache), spec, cfg, env)
    engine = resolve(job.serve, env, spec, job.parallel)
    step, busy = decode_step(job, spec, cfg, env, mean_batch, float(total_ctx))
    util = round(100.0 * serving["gpu_busy_share"], 2)
    if engine.gpu_memory_utilization is not None:
        peak = int(mem["budget_bytes"] + mem["non_torch_bytes"])
    else:
        peak = int(mem["weights_bytes"] + mem["activation_bytes"] + mem["non_torch_bytes"]
                   + serving["peak_kv_tokens"] * mem["kv_bytes_per_token"])
    fits = serving["kv_cache_tokens"] > 0 and peak <= spec.memory_bytes and serving["finished"] == serving["requests"]
    notes = list(tr.notes) + list(serving["notes"])
    if not fits:
        notes.append(f"the deployment does not fit a {spec.name}: {serving['kv_cache_tokens']} KV tokens fit and "
                     f"{serving['finished']} of {serving['requests']} requests finish")
    pred = Prediction(
        job=job.to_dict(), job_key=job.key, gpu=spec.name, gpu_util_pct=util, gpu_util_interval=(util, util),
        memory_peak_bytes=peak, memory_interval=(peak, peak), step_time_s=step, step_time_interval=(step, step),
        gpu_busy_s=busy, host_time_s=max(0.0, step - busy), flops=tr.flops, bytes=tr.bytes, kernels=tr.kernels,
        ops=len(tr.ops), parameters=tr.parameters, memory_allocated_peak_bytes=peak, fits_in_memory=fits,
        bottleneck=est.bottleneck, bottleneck_reason=est.bottleneck_reason, op_coverage=round(tr.coverage, 4),
        time_coverage=round(est.costed_time_share, 4), uncosted_ops=tr.uncosted, model_version=version,
        samples_per_s=serving["output_tokens_per_s"], notes=tuple(notes), surroundings=est.surroundings.to_dict(),
        util_basis="serving run (busy share)", interval_basis="point (no measured serving rows)",
        gpu_held_pct=util, gpu_held_interval=(util, util), serving=serving)
    return pred, tr, est
