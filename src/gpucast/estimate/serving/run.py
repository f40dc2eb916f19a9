"""An iteration-level simulation of an engine serving a stream of requests.

Each iteration the scheduler (vLLM's, which SGLang and TensorRT-LLM follow in kind) forms a batch of
at most ``max_num_seqs`` sequences and ``max_num_batched_tokens`` tokens: every running sequence whose
prompt is done decodes one token; sequences still in prefill continue with a chunk of what is left of
the token budget (``chunked_prefill``; without it a prompt is taken whole or waits); waiting requests
are admitted first come, first served while there is room in the batch and in the KV cache. A decode
that finds no free KV block preempts the most recently admitted sequence, whose cache is dropped and
recomputed later as a prefill of its prompt and the tokens it had generated (vLLM's default,
``preemption_mode=recompute``). An engine that guarantees no eviction (``no_evict``: TensorRT-LLM's default
capacity policy, ``GUARANTEED_NO_EVICT``) admits a request only when the cache can also hold every token it
will reach (its prompt and all its output), counting what the running ones will reach, so it never preempts. A request that arrives with its K/V (``Requests.cached``: a disaggregated
deployment's decode instance, :mod:`.disagg`) is admitted with those tokens' blocks and decodes from the next
iteration; preempted, it recomputes them. A model with linear-attention layers also holds a fixed state per
running sequence (``seq_blocks`` blocks of the pool: vLLM V1's hybrid allocator gives each request one state
page per group of linear layers), taken at admission and given back at preemption or finish; sliding windows an
engine frees (``window``: each window size's ``(tokens held at most, blocks a token)``) hold a sequence's
tokens up to their window, block by block as it grows. The iteration's duration comes from ``cost`` (the engine's forward at that shape:
:mod:`gpucast.estimate.serving.iteration`); the first token of a request is sampled by the iteration that
finishes its prefill.

Loads: ``static`` (every request at time 0), ``closed`` (``concurrency`` in flight, a finished request
replaced at once), ``poisson`` (arrivals at ``request_rate``). A non-continuous engine (``hf``'s
``generate``) runs the requests in static batches of ``batch``: one prefill of the batch padded to its
longest prompt, then decode steps until its longest output is done.

The inter-token latency (ITL) a benchmark reports is the gap between a request's consecutive tokens:
each decode iteration gives every decoding sequence a token, so its duration is one gap for each of
them (``RunResult.gap_s`` weighted by ``gap_weight``); a preempted sequence's longer gap is counted as
its iterations' gaps.

Not modelled: the scheduler's fairness policies beyond first come first served, priorities, prefix-cache
hits beyond a uniform share of each prompt (``prefix_hit_rate``), swapping to CPU memory, the
detokeniser's latency after the last token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Requests:
    arrival_s: np.ndarray
    prompt: np.ndarray     # tokens to prefill (after prefix-cache hits)
    output: np.ndarray     # tokens to generate
    cached: np.ndarray | None = None   # tokens whose K/V arrive with the request (a disaggregated decode)

    def __len__(self) -> int:
        return len(self.prompt)


@dataclass
class RunResult:
    start_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    iterations: int
    busy_s: float
    max_batch: int
    mean_batch: float
    preemptions: int
    notes: list = field(default_factory=list)
    mean_context: float = 0.0   # decoding sequences' mean context over the run's decode steps
    peak_kv_tokens: int = 0     # the most tokens the cache held at once (whole blocks)
    arrival_s: np.ndarray | None = None  # when each request arrived (a closed loop's follow its predecessors)
    # inter-token gaps: each decode iteration's seconds and the sequences it gave a token (ITL weights)
    gap_s: np.ndarray | None = None
    gap_weight: np.ndarray | None = None


Cost = Callable[..., tuple[float, float]]
"""(tokens in the iteration, decoding sequences, their mean context, prefill tokens, the prefills' mean
context, the prefilling sequences) -> (wall seconds, GPU-busy seconds)."""


def simulate(req: Requests, cost: Cost, max_num_seqs: int, max_num_batched_tokens: int, kv_tokens: int,
             block: int, chunked: bool, load: str = "static", concurrency: int | None = None,
             spec=None, seq_blocks: int = 0, window: tuple = (), no_evict: bool = False) -> RunResult:
    """Continuous batching over ``req`` (module docstring); ``seq_blocks``: blocks a running sequence holds
    whatever its length (a linear-attention state); ``spec``: speculative decoding
    (:class:`gpucast.estimate.serving.speculative.Speculation`): a decode step takes ``k + 1`` of the token
    budget and emits the tokens :func:`~gpucast.estimate.serving.speculative.tokens_this_step` gives."""
    from gpucast.estimate.serving.speculative import tokens_this_step

    width = spec.tokens + 1 if spec is not None else 1   # budget tokens a decode takes (verified drafts)
    steps = [0] * len(req)                                 # a sequence's speculative steps so far
    n = len(req)
    arrival = req.arrival_s.astype(float).copy()
    prompt = [int(v) for v in req.prompt]
    out = [int(v) for v in req.output]
    held = [int(v) for v in req.cached] if req.cached is not None else [0] * n
    sent = n
    if load == "closed":  # the first `concurrency` requests at 0; each later one when another returns
        sent = min(concurrency or n, n)
        arrival[:] = np.inf
        arrival[:sent] = 0.0
    # plain lists: the loop touches single entries, where numpy's scalar access costs more than the work
    done_prefill = [0] * n   # prompt tokens (incl. recomputed ones) prefilled so far
    kv = [0] * n             # tokens whose K/V the cache holds for the request
    target = list(prompt)    # prompt tokens to prefill (grows on preemption)
    generated = [0] * n
    nan = float("nan")
    first = [nan] * n
    finish = [nan] * n
    start = [nan] * n
    running: list[int] = []
    waiting: list[int] = []
    next_arrival = 0
    order = np.argsort(arrival, kind="stable").tolist()
    arrival_l = arrival.tolist()
    scheduled = sent if load == "closed" else n  # requests whose arrival the order holds
    t = 0.0
    busy = 0.0
    iterations = preemptions = max_batch = 0
    batch_sum = 0
    finished = 0
    blk = max(block, 1)

    if window:
        def blocks(tokens: int) -> int:
            return -(-tokens // blk) + sum(-(-int(min(tokens, cap) * per) // blk) for cap, per in window)
    else:   # the common case, called in the loop's every step: kept a bare division
        def blocks(tokens: int) -> int:
            return -(-tokens // blk)

    used_blocks = peak_blocks = 0
    ctx_sum, dec_sum = 0.0, 0
    gap_s: list[float] = []
    gap_w: list[int] = []
    cap_blocks = kv_tokens // blk
    # no_evict: blocks the running sequences will hold at their end, reserved as each is admitted
    reserved = 0

    def final_blocks(r: int) -> int:
        return blocks(prompt[r] + held[r] + out[r]) + seq_blocks

    def reserve(r: int) -> bool:
        """Under no_evict, reserve ``r``'s blocks at its end if the cache has them (False: it must wait)."""
        nonlocal reserved
        if no_evict:
            need = final_blocks(r)
            if reserved + need > cap_blocks:
                return False
            reserved += need
        return True
    notes = []
    if cap_blocks <= 0:
        return RunResult(np.array(start), np.array(first), np.array(finish), 0, 0.0, 0, 0.0, 0,
                         ["no KV cache fits: nothing can run"])

    def gain(r: int) -> int:   # tokens a speculative decode of ``r`` emits this iteration (1 without)
        return min(tokens_this_step(spec.acceptance, steps[r]), max(1, out[r] - generated[r]))

    while finished < n:
        while next_arrival < scheduled and arrival_l[order[next_arrival]] <= t:
            waiting.append(order[next_arrival])
            next_arrival += 1
        if spec is None and not waiting and running:
            # Only decodes until the next arrival or the next finish: iterations whose scheduling is known
            # (every running sequence decodes one token, nobody is admitted, preempted or finished) run
            # here without the scheduler; each costs what the loop below would charge it
            steps = _decode_run(running, done_prefill, target, out, generated, kv, blocks, cap_blocks - used_blocks)
            if steps > 1:
                nd = len(running)
                kv0 = sum(map(kv.__getitem__, running))
                ahead = arrival_l[order[next_arrival]] if next_arrival < scheduled else float("inf")
                s = 0
                while s < steps and ahead > t:   # ahead > t on entry (arrivals up to t are in waiting): s >= 1
                    dctx = (kv0 + s * nd) / nd
                    dt, b = cost(nd, nd, dctx, 0, 0.0, 0)
                    ctx_sum += dctx * nd
                    dec_sum += nd
                    gap_s.append(dt)
                    gap_w.append(nd)
                    t += dt
                    busy += b
                    s += 1
                for r in running:
                    used_blocks += blocks(kv[r] + s) - blocks(kv[r])
                    generated[r] += s
                    kv[r] += s
                peak_blocks = max(peak_blocks, used_blocks)
                iterations += s
                batch_sum += nd * s
                max_batch = max(max_batch, nd)
                continue
        budget = max_num_batched_tokens
        joined = False
        dec = []
        pre: list[tuple[int, int]] = []
        # decodes first (each needs room for one more token), preempting the newest when the cache is full.
        # A sequence needs a new block when its tokens fill whole blocks (kv % blk == 0); when the free
        # blocks cover every decode's need at once, no preemption can happen: take them all (fast path)
        dec = [r for r in running if done_prefill[r] >= target[r]]
        if spec is None and not window:
            need_all = sum(1 for r in dec if kv[r] % blk == 0) if blk > 1 else len(dec)
        elif spec is None:   # sliding windows grow their own blocks too
            need_all = sum(blocks(kv[r] + 1) - blocks(kv[r]) for r in dec)
        else:
            need_all = sum(blocks(kv[r] + gain(r)) - blocks(kv[r]) for r in dec)
        if need_all <= cap_blocks - used_blocks:
            used_blocks += need_all
            budget -= len(dec) * width
            i = len(running)
        else:
            dec = []
            i = 0
        while i < len(running):
            r = running[i]
            if done_prefill[r] < target[r]:
                i += 1
                continue
            need = blocks(kv[r] + (gain(r) if spec is not None else 1)) - blocks(kv[r])
            while need > cap_blocks - used_blocks and running[-1] != r:
                v = running.pop()
                used_blocks -= blocks(kv[v]) + seq_blocks
                kv[v] = 0
                target[v] = prompt[v] + held[v] + generated[v]
                done_prefill[v] = 0
                waiting.insert(0, v)
                preemptions += 1
            if need > cap_blocks - used_blocks:
                break
            used_blocks += need
            dec.append(r)
            budget -= width
            i += 1
        # prefills already under way, then new requests
        for r in running:
            if budget <= 0:
                break
            left = target[r] - done_prefill[r]
            if left > 0:
                take = min(left, budget) if chunked else (left if left <= budget else 0)
                grow = blocks(kv[r] + take) - blocks(kv[r])
                if take > 0 and grow <= cap_blocks - used_blocks:
                    pre.append((r, take))
                    used_blocks += grow
                    budget -= take
        while waiting and budget > 0 and len(running) < max_num_seqs:
            r = waiting[0]
            left = target[r] - done_prefill[r]
            if left <= 0 and held[r] and not kv[r]:   # arrives with its K/V: decodes from the next iteration
                grow = blocks(held[r]) + seq_blocks
                if grow > cap_blocks - used_blocks or not reserve(r):
                    break
                waiting.pop(0)
                running.append(r)
                if start[r] != start[r]:
                    start[r] = t
                kv[r] = held[r]
                used_blocks += grow
                joined = True
                continue
            take = min(left, budget) if chunked else (left if left <= budget else 0)
            grow = blocks(kv[r] + take) - blocks(kv[r]) + seq_blocks
            if take <= 0 or grow > cap_blocks - used_blocks or not reserve(r):
                break
            waiting.pop(0)
            running.append(r)
            if start[r] != start[r]:
                start[r] = t
            pre.append((r, take))
            used_blocks += grow
            budget -= take
        if not dec and not pre:
            if joined:   # requests that came with their K/V decode in the next iteration
                continue
            if running and not waiting and next_arrival >= scheduled:
                notes.append("a sequence needs more KV cache than the whole cache: it cannot finish")
                break
            if next_arrival < scheduled:
                t = max(t, arrival_l[order[next_arrival]])
                continue
            notes.append("requests larger than the KV cache never start")
            break
        ntok = len(dec) * width + sum(take for _, take in pre)
        dctx = sum(map(kv.__getitem__, dec)) / len(dec) if dec else 0.0
        ptok = sum(take for _, take in pre)
        pctx = sum(done_prefill[r] for r, _ in pre) / len(pre) if pre else 0.0
        dt, b = cost(ntok, len(dec), dctx, ptok, pctx, len(pre))
        ctx_sum += dctx * len(dec)
        dec_sum += len(dec)
        if dec:   # each decoding sequence waited this iteration for its next token
            gap_s.append(dt)
            gap_w.append(len(dec))
        peak_blocks = max(peak_blocks, used_blocks)
        t += dt
        busy += b
        iterations += 1
        batch = len(dec) + len(pre)
        batch_sum += batch
        max_batch = max(max_batch, batch)
        if spec is None:   # the hot path: one token each
            for r in dec:
                generated[r] += 1
                kv[r] += 1
        else:
            for r in dec:
                g = gain(r)
                generated[r] += g
                kv[r] += g
                steps[r] += 1
        for r, take in pre:
            done_prefill[r] += take
            kv[r] += take
            if done_prefill[r] >= target[r]:  # the iteration that ends a prefill samples a token
                generated[r] += 1
                if first[r] != first[r]:
                    first[r] = t
        # only sequences of this iteration can have finished in it
        done = [r for r in dec if generated[r] >= out[r]]
        done += [r for r, _ in pre if generated[r] >= out[r] and done_prefill[r] >= target[r]]
        if done:
            gone = set(done)
            for r in running:  # in running order, as the requests' clients return
                if r not in gone:
                    continue
                finish[r] = t
                finished += 1
                used_blocks -= blocks(kv[r]) + seq_blocks
                if no_evict:
                    reserved -= final_blocks(r)
                if load == "closed" and sent < n:
                    # the client sends its next request when this one returns (requests in index order)
                    arrival[sent] = t
                    waiting.append(sent)
                    sent += 1
            running = [r for r in running if r not in gone]
    return RunResult(np.array(start), np.array(first), np.array(finish), iterations, busy, max_batch,
                     batch_sum / iterations if iterations else 0.0, preemptions, notes,
                     ctx_sum / dec_sum if dec_sum else 0.0, peak_blocks * blk, arrival,
                     np.array(gap_s), np.array(gap_w, dtype=np.float64))


def _decode_run(running, done_prefill, target, out, generated, kv, blocks, free_blocks: int) -> int:
    """Iterations in which every running sequence only decodes and none finishes (one fewer than the
    fewest tokens any still has to generate) whose new blocks the free ones hold; 0 when a running
    sequence is still prefilling or the cache cannot hold them."""
    steps = min(out[r] - generated[r] for r in running) - 1
    if steps < 2 or any(done_prefill[r] < target[r] for r in running):
        return 0
    need = sum(blocks(kv[r] + steps) - blocks(kv[r]) for r in running)
    return steps if need <= free_blocks else 0


def static_batches(req: Requests, cost: Cost, batch: int) -> RunResult:
    """Hugging Face ``generate``: requests in arrival order, ``batch`` at a time, each batch padded to its
    longest prompt and decoding until its longest output is done (module docstring)."""
    n = len(req)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    start = np.full(n, np.nan)
    t = 0.0
    busy = 0.0
    iterations = 0
    gap_s, gap_w = [], []
    for s in range(0, n, batch):
        idx = np.arange(s, min(n, s + batch))
        t = max(t, float(req.arrival_s[idx].max()))
        start[idx] = t
        p = int(req.prompt[idx].max())
        o = int(req.output[idx].max())
        dt, b = cost(len(idx) * p, 0, 0.0, len(idx) * p, 0.0, len(idx))
        t += dt
        busy += b
        iterations += 1
        first[idx] = t
        steps = o - 1
        if steps > 0:
            # decode steps at contexts p+1 .. p+o-1: the cost is linear in the context to first order, so
            # the mean of the two ends times the steps (checked in the tests against the sum)
            d0, b0 = cost(len(idx), len(idx), float(p + 1), 0, 0.0)
            d1, b1 = cost(len(idx), len(idx), float(p + steps), 0, 0.0)
            t_dec = (d0 + d1) / 2 * steps
            out_i = req.output[idx]
            finish[idx] = first[idx] + t_dec * (out_i - 1) / steps
            t += t_dec
            busy += (b0 + b1) / 2 * steps
            iterations += steps
            gap_s += [d0, d1]   # the steps' gaps grow from the first's to the last's, each half of them
            gap_w += [len(idx) * steps / 2] * 2
        else:
            finish[idx] = t
    longest = int((req.prompt + req.output).max()) if n else 0
    return RunResult(start, first, finish, iterations, busy, min(batch, n), float(min(batch, n)), 0, [],
                     float(req.prompt.mean() + req.output.mean() / 2) if n else 0.0, longest * min(batch, n),
                     None, np.array(gap_s), np.array(gap_w, dtype=np.float64))
