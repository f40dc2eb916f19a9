"""One side of a deployment resolved on a GPU: its engine, what each rank holds and the cost of an iteration.

For a layout of the served model (:class:`.stages.Layout`: tensor, pipeline, replicas, expert, attention data
parallelism): the engine's defaults for that layout and GPU (:mod:`.engines`, sized to the run's lengths as the
benchmark tools size it: :mod:`.bench`), the bytes a rank keeps (weights by format and split, K/V a token, the state
a running sequence holds whatever its length, the activations of the largest chunk: :mod:`.memory`) and the cost of
one iteration of a stream (:mod:`.iteration` under :mod:`.stages`). A plain deployment resolves one side; a
disaggregated one two, its prefill instances' and its decode instances' (:mod:`.disagg`), each at its own degrees.

Not modelled here: what the sides' schedulers then do with the requests (:mod:`.replicas`, :mod:`.run`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from gpucast.estimate.comm import Links
from gpucast.estimate.serving import bench, speculative
from gpucast.estimate.serving.engines import Engine, resolve, sglang_max_requests
from gpucast.estimate.serving.iteration import QUANT_SHARE, iteration_model
from gpucast.estimate.serving.served import served
from gpucast.estimate.serving.memory import (ServingMemory, expert_bytes, kv_per_rank, plan, weight_bytes,
                                             window_groups, windowed)
from gpucast.estimate.serving.run import Requests
from gpucast.estimate.serving.stages import Layout, send_time, stage_kv, stage_weights, staged
from gpucast.graph.windows import windows_of
from gpucast.job import JobError
from gpucast.plan import Parallel
from gpucast.serving import Serve


@dataclass(frozen=True)
class Side:
    """A deployment's instances of one kind resolved on a GPU (module docstring)."""

    lay: Layout
    engine: Engine
    mem: ServingMemory
    cost: Callable            # (ntok, ndec, dctx, ptok, pctx[, npre]) -> (wall s, one GPU's busy s)
    kv_token: int             # a rank's K/V bytes a token: its heads' share of its stage's layers
    state: int                # bytes a running sequence holds on a rank whatever its length
    window: tuple             # sliding windows freed as they pass: ((tokens held at most, pool tokens a token), ...)
    sized_note: str | None    # how the engine was sized to the run, when it was


def links(gpu, job) -> tuple[Links, int]:
    """The deployment's links and GPUs a node."""
    par = (job.parallel or Parallel()).resolved(gpu)
    return Links.of(gpu, par.network_spec()), par.gpus_per_node


def staged_cost(job, gpu, engine, env, cfg, lay: Layout, shape: dict):
    """The cost of one iteration of a stream of the deployment (:mod:`.iteration` under :mod:`.stages`)."""
    serve = job.serve or Serve()
    kv = serve.kv_element_bytes
    model = iteration_model(job, gpu, engine, env, cfg, lay.tensor, serve.weights, kv / 2 if kv else 1.0,
                            lay.expert, lay.attention_dp, speculative.of(serve),
                            job.parallel.expert_dispatcher if job.parallel is not None else None, lay.pipeline)
    if lay.pipeline <= 1:
        return model.cost
    net, per_node = links(gpu, job)
    return staged(model, lay, lambda n: send_time(n, shape["hidden"], lay, net, per_node),
                  sequential=not engine.continuous, micro_batch_loop=engine.micro_batch_loop)


def side(job, gpu, env, cfg, context_bytes: int, shape: dict, lay: Layout, req: Requests) -> Side:
    """The instances of ``job``'s served model at ``lay``'s degrees on ``gpu`` (module docstring)."""
    model = served(job)
    serve = job.serve or Serve()
    engine = resolve(serve, env, gpu, lay)
    t = lay.tensor
    kv_token_bytes = model.kv_bytes_per_token(serve.kv_element_bytes)
    layers = (windows_of(job), shape["attention_layers"], engine.block_size)
    kept, window_bytes = windowed(kv_token_bytes, *layers) if engine.windowed_kv else (kv_token_bytes, 0)

    def on_rank(kv_bytes) -> int:   # a rank's share of K/V bytes: its heads of its stage's layers
        return stage_kv(kv_per_rank(kv_bytes, shape["kv_heads"], lay.attention_tensor), lay)
    draft_weights, draft_kv = _drafter(job, serve, shape, lay)
    kv_token = on_rank(kept) + draft_kv
    state = stage_kv(model.state_bytes_per_sequence() // lay.attention_tensor, lay)   # linear layers' heads split
    window = tuple((cap, on_rank(per) / kv_token)
                   for cap, per in (window_groups(kv_token_bytes, *layers) if window_bytes else ()))
    if state and engine.name == "hf":
        raise JobError("engine 'hf' with linear-attention layers (gated delta-nets, Mamba-2): transformers runs its "
                       "torch fallback, which is not modelled; choose vllm, sglang or trtllm")
    engine, sized_note = bench.sized(engine, serve, job.precision, shape["parameters"],
                                     kv_per_rank(kv_token_bytes, shape["kv_heads"], t) * t, gpu.memory_bytes,
                                     t, lay.pipeline, float(req.prompt.mean()), float(req.output.mean()))
    if engine.paged:
        chunk = int(min(engine.max_num_batched_tokens, max(req.prompt.max(), 1)))
        act_tr = model.trace(1, chunk, 0, "paged")
    else:
        act_tr = model.trace(int(min(len(req), job.batch_size)), int(req.prompt.max()), 0, "dynamic")
    weights = stage_weights(_rank_weights(job, serve, shape, lay, act_tr.parameter_bytes), shape["parameters"],
                            shape, lay)
    activations = int(act_tr.memory.at_peak.get("activations", 0)
                      + act_tr.memory.at_peak.get("temporaries", 0)) // lay.attention_tensor
    mem = plan(gpu.memory_bytes, weights, kv_token, activations, context_bytes, engine, engine.cuda_graphs, state,
               draft_weights, on_rank(window_bytes))
    if (engine.name, engine.release) == ("sglang", "0.5") and serve.max_num_seqs is None:
        context_len = serve.max_model_len or shape["max_context"] or 4096
        engine = replace(engine, max_num_seqs=sglang_max_requests(mem.kv_cache_tokens, context_len))
    cost = staged_cost(job, gpu, engine, env, cfg, lay, shape)
    return Side(lay, engine, mem, cost, kv_token, state, window, sized_note)


def _rank_weights(job, serve: Serve, shape: dict, lay: Layout, traced_bytes: int) -> int:
    """A tensor-parallel rank's weight bytes of the whole model (before pipeline stages split it)."""
    t = lay.tensor
    ends = shape["vocab"] * shape["hidden"] * 2 * (1 if shape.get("tied") else 2)  # embedding and head, 16-bit
    low = max(0, traced_bytes - ends) if job.precision in QUANT_SHARE else 0   # quantised linear weights
    share = QUANT_SHARE.get(job.precision, 0.5)
    experts = shape.get("expert_parameters", 0)
    if lay.attention_dp:   # every weight on every rank but the routed experts', 1/t of those (.stages)
        whole = weight_bytes(traced_bytes, shape["parameters"], 1, serve.weights, low, share, experts)
        ex = expert_bytes(traced_bytes, shape["parameters"], experts, serve.weights, share if low else 1.0)
        return int(whole - ex * (1 - 1 / t))
    return weight_bytes(traced_bytes, shape["parameters"], t, serve.weights, low, share, experts)


def _drafter(job, serve: Serve, shape: dict, lay: Layout) -> tuple[int, int]:
    """(a rank's weight bytes, its K/V bytes a token) of the job's separate draft model (:mod:`.speculative`),
    split over the target's tensor-parallel ranks and charged to every pipeline stage (an engine keeps it on
    one: not modelled); (0, 0) without one."""
    drafter = speculative.drafter_job(job, speculative.of(serve))
    if drafter is None:
        return 0, 0
    draft = served(drafter)
    dshape = draft.shape
    if dshape["vocab"] != shape["vocab"]:
        raise JobError(f"field 'serve.draft_model': the drafter's vocab_size ({dshape['vocab']}) must be the "
                       f"target's ({shape['vocab']}): its tokens are verified as the target's")
    dlay = replace(lay, tensor=lay.attention_tensor, pipeline=1, expert=1, attention_dp=False,
                   layers=dshape["layers"])
    if dshape["heads"] % dlay.tensor:
        raise JobError(f"field 'serve.draft_model': the drafter's {dshape['heads']} attention heads must split "
                       f"over the target's {dlay.tensor} tensor-parallel ranks")
    traced = draft.trace(1, 1, 0, "paged").parameter_bytes
    kv = kv_per_rank(draft.kv_bytes_per_token(serve.kv_element_bytes), dshape["kv_heads"], dlay.tensor)
    return _rank_weights(drafter, Serve(), dshape, dlay, traced), kv
