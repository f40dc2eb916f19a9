"""A served model's answer on a GPU: the checks of the job against its engine, the deployment resolved at the
plan's degrees (:mod:`.deploy`), its schedulers run over the requests (:mod:`.replicas`, or :mod:`.disagg` for
separate prefill and decode instances) and the figures a benchmark client reports (:mod:`.figures`).

:func:`predict_serving` returns ``Prediction.serving``: a dict whose keys are listed in :data:`KEYS` (and more
where the deployment has them: ``disagg``, the memory plan's terms). :func:`decode_step` is one decode iteration
alone, for the training-style figures a served model also gets.
"""

from __future__ import annotations

from dataclasses import replace

from gpucast.estimate.serving import disagg
from gpucast.estimate.serving.deploy import side, staged_cost
from gpucast.estimate.serving.engines import VLLM_V1, resolve
from gpucast.estimate.serving.figures import figures
from gpucast.estimate.serving.replicas import run_replicas
from gpucast.estimate.serving.requests import requests_of
from gpucast.estimate.serving.served import served
from gpucast.estimate.serving.stages import layout
from gpucast.job import JobError
from gpucast.serving import NVFP4_KV_ENGINES, Serve, release_key, release_line

# vLLM's V1 engine (0.10-0.11) serves a model with Mamba or linear-attention layers without prefix caching: its
# hybrid model config (vllm/model_executor/models/config.py) turns it off and logs "Hybrid or mamba-based model
# detected: disabling prefix caching since it is not yet supported" (as 0.10.2 and 0.11.0 print it at start-up).
NO_PREFIX_NOTE = ("serve.prefix_hit_rate not applied: vLLM 0.11 disables prefix caching for a model with "
                  "linear-attention or Mamba layers, so every prompt is prefilled whole")

KEYS = ("engine", "load", "requests", "latency_s", "ttft_s", "ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "tpot_s",
        "tpot_mean_s", "tpot_p90_s", "tpot_p99_s", "itl_mean_s", "itl_p50_s", "itl_p99_s", "e2e_p50_s", "e2e_p90_s",
        "e2e_p99_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user",
        "requests_per_s", "kv_cache_tokens", "kv_bytes_per_token", "max_batch", "mean_batch", "preemptions",
        "iterations", "gpu_busy_share", "memory")


def release_note(serve, engine) -> list[str]:
    """A note where the job's ``engine_version`` is not itself a modelled release (gpucast.serving.RELEASE_LINES)."""
    asked = serve.engine_version
    if not asked or release_key(asked) == release_key(engine.release):
        return []
    _modelled, first, until = release_line(engine.name, asked)
    if release_key(first) == (0,):   # the oldest line: every earlier release
        span = f"before {until}"
    else:
        span = f"{first} to before {until}" if until else f"{first} on"
    return [f"{engine.name} {asked} runs with {engine.name} {engine.release}'s defaults, the modelled release of its "
            f"line ({engine.name} {span}: gpucast.serving.RELEASE_LINES)"]


def decode_step(job, gpu, cfg, env, batch: int, context: float) -> tuple[float, float]:
    """(wall, one GPU's busy seconds) of a decode iteration of ``batch`` sequences at ``context`` tokens."""
    shape = served(job).shape
    lay = layout(job, shape)
    engine = resolve(job.serve, env, gpu, job.parallel)
    return staged_cost(job, gpu, engine, env, cfg, lay, shape)(batch, batch, context, 0, 0.0)


def predict_serving(job, gpu, cfg, env, context_bytes: int) -> dict:
    """``Prediction.serving`` for a ``mode: serve`` job on ``gpu`` (module docstring)."""
    serve = job.serve or Serve()
    engine = resolve(serve, env, gpu, job.parallel)
    model = served(job)
    shape = model.shape
    lay = layout(job, shape)
    t = lay.tensor
    if lay.attention_dp and not engine.continuous:
        raise JobError(f"field 'parallel.attention_dp' needs an engine with its own scheduler per rank (vllm, sglang "
                       f"or trtllm), not '{engine.name}'")
    if serve.spec_method is not None and not engine.continuous:
        raise JobError(f"speculative decoding (serve.spec_method) runs in vllm, sglang or trtllm, not '{engine.name}'")
    if serve.weights == "mxfp4" and not shape["experts"]:
        raise JobError("field 'serve.weights': mxfp4 keeps a mixture-of-experts model's routed experts in MXFP4 (as "
                       "GPT-OSS ships them); this model has no experts (int8 or int4 quantise every linear layer)")
    if shape.get("mla") and engine.name == "hf":
        raise JobError("engine 'hf' with multi-head latent attention (kv_lora_rank): transformers decompresses "
                       "the whole cache every step, which is not modelled; choose vllm, sglang or trtllm")
    if serve.load != "static" and not engine.continuous:
        raise JobError(f"engine '{engine.name}' runs static batches (model.generate): set no concurrency or "
                       f"request_rate, or choose vllm, sglang or trtllm")
    hybrid_uncached = (bool(serve.prefix_hit_rate) and engine.name == "vllm" and engine.release in VLLM_V1
                       and model.state_bytes_per_sequence() > 0)
    if hybrid_uncached:   # vLLM turns prefix caching off for a model with linear-attention states (NO_PREFIX_NOTE)
        serve = replace(serve, prefix_hit_rate=None)
    req = requests_of(job, serve, serve.max_model_len or shape["max_context"] or (1 << 30))
    if serve.kv_cache_dtype == "nvfp4" and (engine.name not in NVFP4_KV_ENGINES or not gpu.fp4_tflops):
        raise JobError(f"field 'serve.kv_cache_dtype': an NVFP4 KV cache needs FP4 tensor cores (Blackwell) and "
                       f"{' or '.join(NVFP4_KV_ENGINES)} (got {engine.name} on {gpu.name})")
    d = side(job, gpu, env, cfg, context_bytes, shape, lay, req)
    engine, mem, state = d.engine, d.mem, d.state
    if serve.prefill_replicas:
        res, split_out = disagg.deploy(job, gpu, env, cfg, context_bytes, shape, req, d)
    else:
        res = run_replicas(req, d.cost, engine, mem.kv_cache_tokens, serve, job.batch_size, lay, mem.state_blocks,
                           d.window)
        split_out = {}
    if not engine.continuous:
        need = int((req.prompt.max() + req.output.max()) * min(len(req), -(-job.batch_size // lay.replicas)))
        if need > mem.kv_cache_tokens:
            res.notes.append(f"the batch's cache needs {need} tokens, more than the {mem.kv_cache_tokens} that fit")
    arrival = res.arrival_s if res.arrival_s is not None else req.arrival_s
    fig = figures(arrival, res.first_token_s, res.finish_s, req.output, res.gap_s, res.gap_weight, job.gpus)
    makespan = fig["latency_s"]
    out = {
        "engine": engine.name, "load": serve.load, "requests": int(len(req)), **fig,
        "kv_cache_tokens": mem.kv_cache_tokens, "kv_bytes_per_token": mem.kv_bytes_per_token,
        "max_batch": res.max_batch, "mean_batch": round(res.mean_batch, 2), "preemptions": res.preemptions,
        "iterations": res.iterations, "gpu_busy_share": min(1.0, res.busy_s / makespan) if makespan > 0 else 0.0,
        "memory": mem.to_dict(), "tensor": t, "pipeline": lay.pipeline,
        "replicas": lay.replicas, "expert": lay.expert, "attention_dp": lay.attention_dp,
        "notes": list(res.notes) + ([d.sized_note] if d.sized_note else [])
        + ([f"linear-attention state: {state / 2**20:.1f} MiB a running sequence per rank ({mem.state_blocks} KV "
            f"blocks of the pool), whatever its length"] if state else [])
        + ([f"sliding windows: up to {mem.window_bytes_per_sequence / 2**20:.1f} MiB a running sequence per rank "
            f"(its tokens up to each sliding layer's window and a block)"] if d.window else [])
        + ([f"{req.clipped} of {len(req)} drawn requests were longer than the model's context and were cut to it"]
           if getattr(req, "clipped", 0) else [])
        + ([NO_PREFIX_NOTE] if hybrid_uncached else [])
        + release_note(serve, engine),
        "arrival_span_s": float(arrival.max() - arrival.min()) if len(arrival) else 0.0,
        "mean_context": round(res.mean_context, 1), "peak_kv_tokens": int(res.peak_kv_tokens),
        **split_out,
    }
    return out
