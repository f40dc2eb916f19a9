"""Disaggregated prefill and decode: some replicas only prefill, the others only decode.

A disaggregated deployment (vLLM's and SGLang's PD disaggregation, NVIDIA Dynamo, TensorRT-LLM's
disaggregated serving: ``serve.prefill_replicas`` of the deployment's replicas, each with the plan's
tensor and pipeline degrees) runs every request in three steps:

1. a **prefill instance** (requests dealt to the prefill replicas in arrival order) prefills the prompt and
   samples the first token: the engine's scheduler with nothing to decode (:func:`.run.simulate` over the
   requests with one output token each);
2. the prompt's **K/V move** to a decode instance: each tensor-parallel rank sends its share (the prompt's
   tokens x a rank's K/V bytes a token) to its peer, over NVLink when the deployment fits one node, else over
   the network, every rank at once (:func:`gpucast.estimate.comm.collective_time`'s ``send-recv``; NIXL's
   RDMA reads are taken at the links' rate, with no overlap with the prefill's last layers);
3. a **decode instance** admits the request with its K/V already cached (``Requests.cached``) and decodes
   the other tokens, continuous batching as usual.

Time to first token is the prefill side's; the gaps between later tokens include the move and the
decode side's queue, as a client measures them. A closed loop's next request leaves when one returns from
the decode side, which couples the two sides: the run starts from the prefill side's closed loop alone and
re-times the arrivals from the decode side's completions (the ``c``-th request leaves at the ``c - C``-th
return) until they settle (:data:`ROUNDS` at most).

Not modelled: prefill and decode instances of different degrees, the KV move overlapped with the prefill
(layer by layer), a router that balances by load, prefix-cache-aware routing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpucast.estimate.serving.run import Requests, RunResult

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


def sides(lay, prefill: int):
    """(the prefill side's layout, the decode side's): ``prefill`` replicas and the rest."""
    return replace(lay, replicas=prefill), replace(lay, replicas=lay.replicas - prefill)
