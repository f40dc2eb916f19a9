"""What an LLM deployment serves: time to first token, time per output token, throughput, KV capacity.

For a job with ``mode: serve`` (:class:`gpucast.serving.Serve`): the engine
(:mod:`.engines`), the memory each rank gives the KV cache (:mod:`.memory`), the cost of one iteration
from the model's traced forward (:mod:`.iteration`) and the engine's scheduler run over the requests
(:mod:`.run`). :func:`predict_serving` returns ``Prediction.serving``: a dict whose keys are listed in
:data:`KEYS`.

How the deployment spans its GPUs (tensor-parallel ranks, pipeline stages and their streams of
batches, replicas behind a round-robin load balancer, expert parallelism) is :mod:`.stages` and
:mod:`.experts`.

Speculative decoding is :mod:`.speculative`. Not modelled: disaggregated prefill/decode, load balancers
that route by load or prefix.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from gpucast.estimate.serving import bench, disagg, speculative
from gpucast.estimate.serving.engines import resolve, sglang_max_requests
from gpucast.estimate.serving.figures import figures
from gpucast.estimate.serving.iteration import QUANT_SHARE, iteration_model, model_job
from gpucast.estimate.comm import Group, Links, collective_time
from gpucast.estimate.serving.memory import expert_bytes, kv_per_rank, plan, weight_bytes, windowed
from gpucast.estimate.serving.run import Requests, RunResult, simulate, static_batches
from gpucast.estimate.serving.stages import Layout, layout, send_time, shares, split, stage_kv, stage_weights, staged
from gpucast.graph.windows import windows_of
from gpucast.plan import Parallel
from gpucast.job import JobError
from gpucast.serving import NVFP4_KV_ENGINES, Serve, parse_length

KEYS = ("engine", "load", "requests", "latency_s", "ttft_s", "ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "tpot_s",
        "tpot_mean_s", "tpot_p90_s", "tpot_p99_s", "itl_mean_s", "itl_p50_s", "itl_p99_s", "e2e_p50_s", "e2e_p90_s",
        "e2e_p99_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user",
        "requests_per_s", "kv_cache_tokens", "kv_bytes_per_token", "max_batch", "mean_batch", "preemptions",
        "iterations", "gpu_busy_share", "memory")
DEFAULT_OUTPUT_LEN = 256
DEFAULT_INPUT_LEN = 1024
DEFAULT_STREAM = 1000  # requests of a Poisson run unless num_requests says otherwise
CLOSED_ROUNDS = 10     # requests of a closed loop: 10 per client unless num_requests says otherwise


def _lengths(spec, default: int, n: int, rng) -> np.ndarray:
    kind, mean, sigma = parse_length(spec if spec is not None else default, "length")
    if kind == "fixed" or sigma == 0:
        return np.full(n, int(round(mean)), dtype=np.int64)
    mu = math.log(mean) - sigma * sigma / 2  # a lognormal whose mean is ``mean``
    return np.maximum(1, np.round(rng.lognormal(mu, sigma, n))).astype(np.int64)


# How each engine serves requests longer than the model's configured context (the error names it).
LONGER_CONTEXT = {
    "vllm": "--max-model-len with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    "sglang": "--context-length with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    "trtllm": "max_seq_len",
    "hf": "max_length (transformers generates past max_position_embeddings without a check)",
}


def requests_of(job, serve: Serve, max_context: int) -> Requests:
    """The run's requests: lengths (fixed, or drawn with a seed from the job's key) and arrivals;
    ``max_context`` the longest request the engine takes (``serve.max_model_len``, else the model's)."""
    rng = np.random.default_rng(int(job.key[:8], 16))
    load = serve.load
    if load == "static":
        n = job.batch_size
    elif load == "closed":
        n = serve.num_requests or min(100_000, CLOSED_ROUNDS * serve.concurrency)
    else:
        n = serve.num_requests or DEFAULT_STREAM
    prompt = _lengths(serve.input_len, DEFAULT_INPUT_LEN, n, rng)
    output = _lengths(serve.output_len, DEFAULT_OUTPUT_LEN, n, rng)
    drawn = any(isinstance(v, str) for v in (serve.input_len, serve.output_len))
    clipped = 0
    if drawn:  # a drawn length's tail past the context is cut to it, as a client truncates its prompt
        over = prompt + output > max_context
        clipped = int(over.sum())
        output = np.minimum(output, max(1, max_context // 2))
        prompt = np.maximum(1, np.minimum(prompt, max_context - output))
    longest = int((prompt + output).max())
    if longest > max_context:
        what = (f"serve.max_model_len ({max_context})" if serve.max_model_len else
                f"the model's {max_context} (set serve.max_model_len to serve longer requests, as the engine's "
                f"{LONGER_CONTEXT.get(serve.engine or 'vllm', 'setting')} does)")
        raise JobError(f"a request of {int(prompt.max())} prompt tokens and {int(output.max())} generated ones "
                       f"needs {longest} tokens of context, more than {what}")
    hit = serve.prefix_hit_rate or 0.0
    if hit:
        prompt = np.maximum(1, np.round(prompt * (1 - hit))).astype(np.int64)
    if load == "poisson":
        arrival = np.cumsum(rng.exponential(1.0 / serve.request_rate, n))
        arrival -= arrival[0]
    else:
        arrival = np.zeros(n)
    req = Requests(arrival, prompt, output)
    req.clipped = clipped
    return req


def _links(gpu, job) -> tuple[Links, int]:
    par = (job.parallel or Parallel()).resolved(gpu)
    return Links.of(gpu, par.network_spec()), par.gpus_per_node


def _disaggregated(job, gpu, engine, serve: Serve, req: Requests, cost, mem, lay: Layout, kv_token: int):
    """The run of a disaggregated deployment (:mod:`.disagg`) and its output fields."""
    p = serve.prefill_replicas
    if not engine.continuous:
        raise JobError(f"field 'serve.prefill_replicas': disaggregated prefill and decode run in vllm, sglang or "
                       f"trtllm, not '{engine.name}'")
    if p >= lay.replicas:
        raise JobError(f"field 'serve.prefill_replicas' ({p}) must leave at least one of the deployment's "
                       f"{lay.replicas} replicas (gpus / (tensor x pipeline)) to decode")
    lay_p, lay_d = disagg.sides(lay, p)
    explicit = replace(serve, concurrency=None, request_rate=serve.request_rate or 1.0)   # arrivals as given

    def stage(sub: Requests, prefill: bool) -> RunResult:
        return _run(sub, cost, engine, mem.kv_cache_tokens, explicit, job.batch_size, lay_p if prefill else lay_d,
                    mem.state_blocks)
    links, per_node = _links(gpu, job)
    one_node = job.gpus <= per_node
    group = Group(2, 2 if one_node else 1, concurrent=1 if one_node else lay.tensor)

    def transfer(prompt: np.ndarray) -> np.ndarray:   # each rank sends its share of the prompt's K/V
        lengths, each = np.unique(prompt, return_inverse=True)
        return np.array([collective_time("send-recv", float(n) * kv_token, group, links) for n in lengths])[each]
    res, _, _, move = disagg.run(req, stage, transfer, serve.concurrency if serve.load == "closed" else None,
                                 p / lay.replicas)
    res.notes.append(f"disaggregated: {p} prefill and {lay.replicas - p} decode replicas; the K/V move takes "
                     f"{move * 1e3:.2f} ms a request on average ({'NVLink' if one_node else 'the network'})")
    return res, {"disagg": {"prefill_replicas": p, "decode_replicas": lay.replicas - p, "kv_move_s": move}}


def _run(req: Requests, cost, engine, kv_tokens: int, serve: Serve, batch: int, lay: Layout,
         seq_blocks: int = 0) -> RunResult:
    """The run of every replica and pipeline stream (:mod:`.stages`), merged into one result."""
    if engine.continuous:
        streams = lay.replicas * lay.dp * lay.streams   # attention-DP ranks are schedulers of their own
        if serve.load == "closed":  # a stream per client at most
            streams = min(streams, serve.concurrency)
        seqs = max(1, engine.max_num_seqs // lay.streams)
        kv = kv_tokens // lay.streams

        def one(sub: Requests, k: int) -> RunResult:
            return simulate(sub, cost, seqs, engine.max_num_batched_tokens, kv, engine.block_size,
                            engine.chunked_prefill, serve.load, clients[k] if clients else None,
                            speculative.of(serve), seq_blocks)
        clients = shares(serve.concurrency, streams) if serve.load == "closed" else None
    else:
        streams = lay.replicas
        each = shares(batch, streams)

        def one(sub: Requests, k: int) -> RunResult:
            return static_batches(sub, cost, max(1, each[k]))
    if streams == 1:
        return one(req, 0)
    order = np.argsort(req.arrival_s, kind="stable")
    parts = [ix for ix in split(order, streams) if len(ix)]
    subs = [one(Requests(req.arrival_s[ix], req.prompt[ix], req.output[ix],
                         None if req.cached is None else req.cached[ix]), k) for k, ix in enumerate(parts)]
    n = len(req)
    start, first, finish, arrival = (np.full(n, np.nan) for _ in range(4))
    for ix, r in zip(parts, subs):
        start[ix], first[ix], finish[ix] = r.start_s, r.first_token_s, r.finish_s
        arrival[ix] = r.arrival_s if r.arrival_s is not None else req.arrival_s[ix]
    its = sum(r.iterations for r in subs)
    notes = list(dict.fromkeys(note for r in subs for note in r.notes))
    # streams of one replica share its GPUs (each busy for its stage of every stream); replicas have their own
    per_replica = lay.streams if engine.continuous else 1
    return RunResult(
        start, first, finish, its, sum(r.busy_s for r in subs) / (lay.replicas * lay.dp),
        max(r.max_batch for r in subs),
        sum(r.mean_batch * r.iterations for r in subs) / its if its else 0.0,
        sum(r.preemptions for r in subs), notes,
        (sum(r.mean_context * r.iterations for r in subs) / its) if its else 0.0,
        max(r.peak_kv_tokens for r in subs) * per_replica, arrival,
        np.concatenate([r.gap_s for r in subs if r.gap_s is not None] or [np.array([])]),
        np.concatenate([r.gap_weight for r in subs if r.gap_weight is not None] or [np.array([])]))


def staged_cost(job, gpu, engine, env, cfg, lay: Layout, shape: dict):
    """The cost of one iteration of a stream of the deployment (:mod:`.iteration` under :mod:`.stages`)."""
    serve = job.serve or Serve()
    kv = serve.kv_element_bytes
    model = iteration_model(job, gpu, engine, env, cfg, lay.tensor, serve.weights, kv / 2 if kv else 1.0,
                            lay.expert, lay.attention_dp, speculative.of(serve),
                            job.parallel.expert_dispatcher if job.parallel is not None else None)
    if lay.pipeline <= 1:
        return model.cost
    links, per_node = _links(gpu, job)
    return staged(model.cost, lay, engine.host_per_iteration_s,
                  lambda n: send_time(n, shape["hidden"], lay, links, per_node), sequential=not engine.continuous)


def decode_step(job, gpu, cfg, env, batch: int, context: float) -> tuple[float, float]:
    """(wall, one GPU's busy seconds) of a decode iteration of ``batch`` sequences at ``context`` tokens."""
    from gpucast.graph.serving import model_shape

    shape = model_shape(job)
    lay = layout(job, shape)
    engine = resolve(job.serve, env, gpu, job.parallel)
    return staged_cost(job, gpu, engine, env, cfg, lay, shape)(batch, batch, context, 0, 0.0)


def predict_serving(job, gpu, cfg, env, context_bytes: int) -> dict:
    """``Prediction.serving`` for a ``mode: serve`` job on ``gpu`` (module docstring)."""
    from gpucast.graph.serving import kv_bytes_per_token, model_shape, state_bytes_per_sequence, trace_iteration

    serve = job.serve or Serve()
    engine = resolve(serve, env, gpu, job.parallel)
    shape = model_shape(job)
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
    req = requests_of(job, serve, serve.max_model_len or shape["max_context"] or (1 << 30))
    if serve.kv_cache_dtype == "nvfp4" and (engine.name not in NVFP4_KV_ENGINES or not gpu.fp4_tflops):
        raise JobError(f"field 'serve.kv_cache_dtype': an NVFP4 KV cache needs FP4 tensor cores (Blackwell) and "
                       f"{' or '.join(NVFP4_KV_ENGINES)} (got {engine.name} on {gpu.name})")
    kv_token_bytes = kv_bytes_per_token(job, serve.kv_element_bytes)
    kept, window_bytes = (windowed(kv_token_bytes, windows_of(job), shape["attention_layers"], engine.block_size)
                          if engine.windowed_kv else (kv_token_bytes, 0))
    kv_rank = kv_per_rank(kept, shape["kv_heads"], lay.attention_tensor)
    kv_token = stage_kv(kv_rank, lay)
    state = stage_kv(state_bytes_per_sequence(job) // lay.attention_tensor   # linear layers' heads split too
                     + kv_per_rank(window_bytes, shape["kv_heads"], lay.attention_tensor), lay)
    if state and engine.name == "hf":
        raise JobError("engine 'hf' with linear-attention layers (gated delta-nets, Mamba-2): transformers runs its "
                       "torch fallback, which is not modelled; choose vllm, sglang or trtllm")
    engine, sized_note = bench.sized(engine, serve, job.precision, shape["parameters"],
                                     kv_per_rank(kv_token_bytes, shape["kv_heads"], t) * t, gpu.memory_bytes,
                                     t, lay.pipeline, float(req.prompt.mean()), float(req.output.mean()))
    if engine.paged:
        chunk = int(min(engine.max_num_batched_tokens, max(req.prompt.max(), 1)))
        act_tr = trace_iteration(model_job(job), 1, chunk, 0, "paged")
    else:
        act_tr = trace_iteration(model_job(job), int(min(len(req), job.batch_size)), int(req.prompt.max()), 0,
                                 "dynamic")
    ends = shape["vocab"] * shape["hidden"] * 2 * (1 if shape.get("tied") else 2)  # embedding and head, 16-bit
    low = max(0, act_tr.parameter_bytes - ends) if job.precision in QUANT_SHARE else 0   # quantised linear weights
    share = QUANT_SHARE.get(job.precision, 0.5)
    experts = shape.get("expert_parameters", 0)
    if lay.attention_dp:   # every weight on every rank but the routed experts', 1/t of those (.stages)
        whole = weight_bytes(act_tr.parameter_bytes, shape["parameters"], 1, serve.weights, low, share, experts)
        ex = expert_bytes(act_tr.parameter_bytes, shape["parameters"], experts, serve.weights,
                          share if low else 1.0)
        rank_weights = int(whole - ex * (1 - 1 / t))
    else:
        rank_weights = weight_bytes(act_tr.parameter_bytes, shape["parameters"], t, serve.weights, low, share,
                                    experts)
    weights = stage_weights(rank_weights, shape["parameters"], shape, lay)  # the traced model's bytes
    activations = int(act_tr.memory.at_peak.get("activations", 0)
                      + act_tr.memory.at_peak.get("temporaries", 0)) // lay.attention_tensor
    cuda_graphs = engine.cuda_graphs
    mem = plan(gpu.memory_bytes, weights, kv_token, activations, context_bytes, engine, cuda_graphs, state)
    if (engine.name, engine.release) == ("sglang", "0.5") and serve.max_num_seqs is None:
        context_len = serve.max_model_len or shape["max_context"] or 4096
        engine = replace(engine, max_num_seqs=sglang_max_requests(mem.kv_cache_tokens, context_len))
    cost = staged_cost(job, gpu, engine, env, cfg, lay, shape)
    held = [what for what, on in (("linear-attention state", shape.get("linear")), ("sliding windows", window_bytes))
            if on]
    if serve.prefill_replicas:
        res, split_out = _disaggregated(job, gpu, engine, serve, req, cost, mem, lay, kv_token)
    else:
        res, split_out = _run(req, cost, engine, mem.kv_cache_tokens, serve, job.batch_size, lay, mem.state_blocks), {}
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
        "notes": list(res.notes) + ([sized_note] if sized_note else [])
        + ([f"{' and '.join(held)}: {state / 2**20:.1f} MiB a running sequence per rank ({mem.state_blocks} KV "
            f"blocks of the pool), whatever its length"] if state else [])
        + ([f"{req.clipped} of {len(req)} drawn requests were longer than the model's context and were cut to it"]
           if getattr(req, "clipped", 0) else []),
        "arrival_span_s": float(arrival.max() - arrival.min()) if len(arrival) else 0.0,
        "mean_context": round(res.mean_context, 1), "peak_kv_tokens": int(res.peak_kv_tokens),
        **split_out,
    }
    return out
