"""A deployment's replicas and streams run side by side, merged into one result.

Requests are dealt to the deployment's schedulers in arrival order, round robin (a load balancer that routes by
count): one per replica, per attention data-parallel rank (each keeps its own requests and KV cache) and per
pipeline stream; a closed loop's clients are shared among them, a stream per client at most. Each runs the
engine's scheduler (:func:`.run.simulate`, or :func:`.run.static_batches` for an engine of static batches); the
merged result's busy time is one GPU's.

Not modelled: load balancers that route by load or by prefix.
"""

from __future__ import annotations

import numpy as np

from gpucast.estimate.serving import speculative
from gpucast.estimate.serving.run import Requests, RunResult, simulate, static_batches
from gpucast.estimate.serving.stages import Layout, shares, split
from gpucast.serving import Serve


def run_replicas(req: Requests, cost, engine, kv_tokens: int, serve: Serve, batch: int, lay: Layout,
                 seq_blocks: int = 0, window: tuple = ()) -> RunResult:
    """The run of every replica and pipeline stream (:mod:`.stages`), merged into one result."""
    if engine.continuous:
        streams = lay.replicas * lay.dp * lay.streams   # attention-DP ranks are schedulers of their own
        if serve.load == "closed":  # a stream per client at most
            streams = min(streams, serve.concurrency)
        # vLLM and SGLang cap the running sequences of all streams; TensorRT-LLM each micro-batch's (engines.py)
        seqs = engine.max_num_seqs if engine.micro_batch_loop else max(1, engine.max_num_seqs // lay.streams)
        kv = kv_tokens // lay.streams

        def one(sub: Requests, k: int) -> RunResult:
            return simulate(sub, cost, seqs, engine.max_num_batched_tokens, kv, engine.block_size,
                            engine.chunked_prefill, serve.load, clients[k] if clients else None,
                            speculative.of(serve), seq_blocks, window, engine.no_evict)
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
