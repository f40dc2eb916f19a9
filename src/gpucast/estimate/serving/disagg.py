"""Disaggregated prefill and decode: some replicas only prefill, the others only decode.

A disaggregated deployment (vLLM's and SGLang's PD disaggregation, NVIDIA Dynamo, TensorRT-LLM's
disaggregated serving: ``serve.prefill_replicas`` prefill instances of ``serve.prefill_tensor`` tensor-parallel
ranks each (the plan's degree unless set), the deployment's other GPUs decode instances at the plan's degrees; the
pipeline degree is the plan's on both sides; experts spread over all of a prefill instance's ranks where the plan
spreads them over all of its own) runs every request in three steps:

1. a **prefill instance** (requests dealt to the prefill replicas in arrival order) prefills the prompt and
   samples the first token: the engine's scheduler with nothing to decode (:func:`.run.simulate` over the
   requests with one output token each);
2. the prompt's **K/V move** to a decode instance: each decode rank that keeps the request's cache receives its
   share (the prompt's tokens x its K/V bytes a token) and the prefill ranks that hold it send it, over NVLink
   when the deployment fits one node, else over the network, every rank at once
   (:func:`gpucast.estimate.comm.collective_time`'s ``send-recv``, each link carrying the larger of a
   receiver's share and the whole move over the senders: instances of different tensor degrees regroup the
   heads as NIXL's and Mooncake's connectors do; their RDMA reads are taken at the links' rate, with no overlap
   with the prefill's last layers);
3. a **decode instance** admits the request with its K/V already cached (``Requests.cached``) and decodes
   the other tokens, continuous batching as usual.

Time to first token is the prefill side's; the gaps between later tokens include the move and the
decode side's queue, as a client measures them. A closed loop's next request leaves when one returns from
the decode side, which couples the two sides: the run starts from the prefill side's closed loop alone and
re-times the arrivals from the decode side's completions (the ``c``-th request leaves at the ``c - C``-th
return) until they settle (:data:`ROUNDS` at most).

Not modelled: prefill and decode instances of different pipeline degrees or attention layouts, the KV move
overlapped with the prefill (layer by layer), a router that balances by load, prefix-cache-aware routing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpucast.estimate.comm import Group, collective_time
from gpucast.estimate.serving.deploy import links, side
from gpucast.estimate.serving.replicas import run_replicas
from gpucast.estimate.serving.run import Requests, RunResult
from gpucast.estimate.serving.stages import Layout
from gpucast.job import JobError

ROUNDS = 6          # closed loop: re-timings of the arrivals from the decode side's returns at most
SETTLED_S = 1e-4    # ... until no arrival moves by more than this


def run(req: Requests, stage, transfer, concurrency: int | None, share: float):
    """(the merged :class:`RunResult`, the prefill side's, the decode side's, the mean KV move in seconds).
    ``stage(requests, prefill)`` runs one side's replicas over explicit arrivals; ``transfer(prompt tokens)``
    is each move's seconds; ``concurrency``: a closed loop's clients (None: the arrivals as given); ``share``:
    the prefill side's share of the replicas (the merged busy time is per replica, as :func:`.run` gives it)."""
    n = len(req)
    arrival = req.arrival_s.astype(float).copy()
    if concurrency is not None:   # a first guess: every client sends as soon as the prefill side returns
        arrival[:] = 0.0
    move = transfer(req.prompt)
    more = req.output > 1
    for _ in range(ROUNDS if concurrency is not None else 1):
        pre = stage(Requests(arrival, req.prompt, np.ones(n, dtype=np.int64)), True)
        ready = pre.first_token_s + move
        dec = stage(Requests(ready[more], np.zeros(int(more.sum()), dtype=np.int64), req.output[more] - 1,
                             cached=req.prompt[more]), False)
        finish = pre.first_token_s.copy()
        finish[more] = dec.finish_s
        if concurrency is None:
            break
        nxt = _closed_arrivals(finish, concurrency)
        if np.nanmax(np.abs(nxt - arrival)) <= SETTLED_S:
            break
        arrival = nxt
    merged = RunResult(
        start_s=pre.start_s, first_token_s=pre.first_token_s, finish_s=finish,
        iterations=pre.iterations + dec.iterations, busy_s=pre.busy_s * share + dec.busy_s * (1 - share),
        max_batch=max(pre.max_batch, dec.max_batch), mean_batch=dec.mean_batch,
        preemptions=pre.preemptions + dec.preemptions, notes=list(dict.fromkeys(pre.notes + dec.notes)),
        mean_context=dec.mean_context, peak_kv_tokens=max(pre.peak_kv_tokens, dec.peak_kv_tokens),
        arrival_s=arrival, gap_s=dec.gap_s, gap_weight=dec.gap_weight)
    return merged, pre, dec, float(np.mean(move)) if n else 0.0


def _closed_arrivals(finish: np.ndarray, clients: int) -> np.ndarray:
    """A closed loop's send times: the first ``clients`` requests at 0, each later one when the next request
    returns (the returns in time order, as :func:`.run.simulate` hands them to waiting clients)."""
    n = len(finish)
    out = np.zeros(n)
    if n > clients:
        returns = np.sort(np.where(np.isfinite(finish), finish, np.inf))
        out[clients:] = returns[: n - clients]
    return out


def sides(lay: Layout, gpus: int, prefill: int, tensor: int | None, shape: dict) -> tuple[Layout, Layout]:
    """(the prefill side's layout, the decode side's): ``prefill`` instances of ``tensor`` ranks (the plan's
    degree unless set) and the other GPUs at the plan's degrees; one error line where they do not fit."""
    t = tensor or lay.tensor
    if t == lay.tensor:
        if prefill >= lay.replicas:
            raise JobError(f"field 'serve.prefill_replicas' ({prefill}) must leave at least one of the deployment's "
                           f"{lay.replicas} replicas (gpus / (tensor x pipeline)) to decode")
        return replace(lay, replicas=prefill), replace(lay, replicas=lay.replicas - prefill)
    if shape["heads"] % t and not lay.attention_dp:
        raise JobError(f"field 'serve.prefill_tensor' ({t}) must divide the model's {shape['heads']} attention heads")
    per = lay.tensor * lay.pipeline
    rest = gpus - prefill * t * lay.pipeline
    if rest < per or rest % per:
        raise JobError(f"fields 'serve.prefill_replicas' and 'serve.prefill_tensor': {prefill} prefill instances "
                       f"of {t} x {lay.pipeline} GPUs leave {rest} of the {gpus}, which must be a whole number (at "
                       f"least one) of decode instances of {lay.tensor} x {lay.pipeline}")
    expert = lay.expert
    if expert > 1 and expert == lay.tensor:   # experts over all of an instance's ranks, on both sides
        expert = t
    if expert > 1 and (t % expert or shape["experts"] % expert):
        raise JobError(f"field 'serve.prefill_tensor' ({t}): the plan's {lay.expert} expert ranks must divide it, "
                       f"and it the model's {shape['experts']} experts")
    return replace(lay, tensor=t, replicas=prefill, expert=expert), replace(lay, replicas=rest // per)


def deploy(job, gpu, env, cfg, context_bytes: int, shape: dict, req: Requests, plain):
    """The run of a disaggregated deployment and its output fields: ``plain`` the deployment resolved at the
    plan's degrees (a :class:`.deploy.Side`, which the decode side is)."""
    serve = job.serve
    lay, engine = plain.lay, plain.engine
    p = serve.prefill_replicas
    if not engine.continuous:
        raise JobError(f"field 'serve.prefill_replicas': disaggregated prefill and decode run in vllm, sglang or "
                       f"trtllm, not '{engine.name}'")
    lay_p, lay_d = sides(lay, job.gpus, p, serve.prefill_tensor, shape)
    pre = plain if lay_p.tensor == lay.tensor else side(job, gpu, env, cfg, context_bytes, shape, lay_p, req)
    dec = replace(plain, lay=lay_d)
    explicit = replace(serve, concurrency=None, request_rate=serve.request_rate or 1.0)   # arrivals as given

    def stage(sub: Requests, prefill: bool) -> RunResult:
        s = pre if prefill else dec
        return run_replicas(sub, s.cost, s.engine, s.mem.kv_cache_tokens, explicit, job.batch_size, s.lay,
                            s.mem.state_blocks, s.window)
    net, per_node = links(gpu, job)
    one_node = job.gpus <= per_node
    group = Group(2, 2 if one_node else 1, concurrent=1 if one_node else max(lay_p.tensor, lay_d.tensor))
    # a receiver's share, or the whole move over the ranks that send it, whichever is more
    each = max(dec.kv_token, dec.kv_token * lay_d.attention_tensor / lay_p.attention_tensor)

    def transfer(prompt: np.ndarray) -> np.ndarray:
        lengths, at = np.unique(prompt, return_inverse=True)
        return np.array([collective_time("send-recv", float(n) * each, group, net) for n in lengths])[at]
    prefill_gpus = p * lay_p.tensor * lay_p.pipeline
    res, _, _, move = run(req, stage, transfer, serve.concurrency if serve.load == "closed" else None,
                          prefill_gpus / (prefill_gpus + lay_d.replicas * lay_d.tensor * lay_d.pipeline))
    res.notes.append(f"disaggregated: {p} prefill instances of tensor {lay_p.tensor} and {lay_d.replicas} decode "
                     f"instances of tensor {lay_d.tensor}; the K/V move takes {move * 1e3:.2f} ms a request on "
                     f"average ({'NVLink' if one_node else 'the network'})")
    return res, {"disagg": {"prefill_replicas": p, "decode_replicas": lay_d.replicas, "prefill_tensor": lay_p.tensor,
                            "kv_move_s": move}}
