"""A parallel plan's communicators and the collectives of one micro-batch and one step.

Where the plan's communicators sit (:func:`placement`, Megatron-LM's rank order: tensor fastest,
then data, then pipeline) and what each parallelism sends over them, as seconds and as
``(count, kind, group)`` calls for NCCL's fixed costs and the host's c10d calls
(:mod:`gpucast.estimate.parallel` composes them into the step; its docstring has the model):
tensor parallelism's all-reduces or, under sequence parallelism, reduce-scatters and all-gathers
(:mod:`.sequence`), context parallelism's ring sends (:mod:`.context`), the sharding strategy's
per-micro-batch and once-a-step collectives (:mod:`.sharding`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.comm import CommConstants, Group, Links, call_latency, collective_time
from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.parallel import context as ring_attention
from gpucast.estimate.parallel import sequence
from gpucast.estimate.parallel.constants import ParallelConstants
from gpucast.estimate.parallel.overlaps import dp_exposed_s
from gpucast.job import Job
from gpucast.plan import Parallel


@dataclass
class Placement:
    """Where the plan's communicators sit (module docstring)."""

    tp: Group
    dp: Group            # the sharding group (inside a node for fsdp-hybrid)
    dp_across: Group     # fsdp-hybrid's replicas across nodes (n = 1 otherwise)
    pp: Group
    nodes: int


def placement(par: Parallel, gpus: int, hybrid: bool) -> Placement:
    t, p, g = par.tensor, par.pipeline, par.gpus_per_node
    d = gpus // (t * p)
    on_node = min(gpus, g)
    # a node's tensor groups communicate at once: over PCIe they share its host (gpucast.estimate.comm)
    tp = Group(t, min(t, g), concurrent=max(1, on_node // t) if t < g else 1)
    r_dp = max(1, min(d, g // t)) if t < g else 1
    concurrent = max(1, on_node // r_dp) if t < g else 1
    if hybrid:
        dp, across = Group(r_dp, r_dp), Group(max(1, d // r_dp), 1, concurrent=max(1, on_node))
    else:
        dp, across = Group(d, r_dp, concurrent=concurrent), Group(1, 1)
    cross_pp = t * d >= g
    pp = Group(2, 1, concurrent=on_node) if cross_pp else Group(2, 2)
    return Placement(tp=tp, dp=dp, dp_across=across, pp=pp, nodes=-(-gpus // g))


def act_bytes(lay, job: Job, act_b: int, context_degree: int = 1) -> float:
    """One micro-batch's hidden state on a rank, ``b (s / c) h`` elements."""
    if lay is None:
        return 0.0
    return job.batch_size * lay.tokens / context_degree * lay.hidden * act_b


def fixed_cost(calls: list, links: Links, comm: CommConstants) -> float:
    """NCCL's fixed costs of ``calls`` ((count, kind, group) each): base latency and ring steps."""
    return sum(n * call_latency(kind, group, links, comm) for n, kind, group in calls)


def tp_comm(st, lay, job: Job, par: Parallel, act_b: int, place: Placement, links: Links,
            comm: CommConstants, calls: list, seq: bool) -> float:
    """Tensor parallelism's collectives of a micro-batch on stage ``st`` (:func:`.sequence.tp_collectives`;
    ``st.dispatched`` MoE layers' tokens go by all-to-all instead, :mod:`.experts`)."""
    if par.tensor <= 1 or lay is None:
        return 0.0
    out = 0.0
    for count, kind in sequence.tp_collectives(st.blocks, st.k == 0, st.k == par.pipeline - 1, par.recompute, seq,
                                               st.dispatched):
        calls.append((count, kind, place.tp))
        out += count * collective_time(kind, act_bytes(lay, job, act_b, par.context or 1), place.tp, links, comm)
    return out


def cp_comm(st, lay, job: Job, par: Parallel, act_b: int, attention_s: float, links: Links,
            comm: CommConstants, calls: list) -> float:
    """Context parallelism's exposed ring sends of a micro-batch on stage ``st`` (:mod:`.context`);
    ``attention_s``: the stage's attention kernel seconds, which hide the sends."""
    c = par.context or 1
    if c <= 1 or lay is None:
        return 0.0
    nbytes = ring_attention.kv_bytes(job.batch_size, lay.tokens, lay.hidden, lay.heads, lay.kv_heads, par.tensor, c,
                                     act_b)
    return ring_attention.exposed_s(st.blocks, c, nbytes, attention_s,
                                    ring_attention.ring(par.tensor, c, par.gpus_per_node), links, comm, calls)


def dp_micro(strat, st, gather_b, reduce_b, fwd_busy, bwd_busy, place: Placement, links: Links,
             comm: CommConstants, consts: ParallelConstants, cfg: EstimatorConfig, calls: list) -> float:
    """Exposed per-micro-batch collectives of sharded gradients/weights (module docstring, step 2).
    FSDP and ZeRO-3 gather and reduce one unit (a block) at a time: one collective per unit, each
    paying its latency."""
    if place.dp.n <= 1 and place.dp_across.n <= 1:
        return 0.0
    rp = st.params
    weights = rp.trainable * gather_b + rp.frozen_bytes  # frozen weights travel as stored (bf16, 4-bit)
    grads = rp.trainable * reduce_b
    units = max(st.blocks, 1)

    def per_unit(kind: str, nbytes: float, group: Group) -> float:
        if nbytes > 0 and group.n > 1:
            calls.append((units, kind, group))
        return units * collective_time(kind, nbytes / units, group, links, comm)

    exposed = 0.0
    bwd_comm = 0.0
    if strat.gathers:
        ag = per_unit("all-gather", weights, place.dp)
        exposed += max(ag / units, ag - consts.gather_overlap * fwd_busy)
        bwd_comm = ag if strat.gathers == "fwd+bwd" else 0.0
        if strat.gathers == "fwd+bwd" and weights > 0:  # the backward gathers every unit again
            calls.append((units, "all-gather", place.dp))
    if strat.grads_per_micro_batch:
        bwd_comm += per_unit("reduce-scatter", grads, place.dp)
        if strat.hybrid and place.dp_across.n > 1:
            bwd_comm += per_unit("all-reduce", grads / max(place.dp.n, 1), place.dp_across)
        overlap = consts.gather_overlap if strat.gathers else cfg.comm_overlap
        exposed += max(bwd_comm / units, bwd_comm - overlap * bwd_busy)
    return exposed


def dp_step(strat, st, gather_b, reduce_b, bwd_busy, place: Placement, links: Links,
            comm: CommConstants, cfg: EstimatorConfig, calls: list, chunks: int = 0, fwd_busy: float = 0.0) -> float:
    """Exposed once-a-step collectives: DDP's all-reduce / ZeRO-1's reduce-scatter behind the last
    backward, ZeRO-1/2's all-gather of the updated weights. ``chunks`` > 0: Megatron-Core's
    overlapped distributed optimizer, each cut into that many chunks beside the last backward and
    the first forward (:mod:`.overlaps`)."""
    if place.dp.n <= 1:
        return 0.0
    grads = st.params.trainable * reduce_b
    out = 0.0
    if not strat.grads_per_micro_batch:
        kind = strat.grad_collective
        c = collective_time(kind, grads, place.dp, links, comm)
        calls.append((1, kind, place.dp))
        if chunks:
            out += dp_exposed_s(c, chunks, bwd_busy)
        else:
            last_bucket = c * min(1.0, cfg.ddp_bucket_bytes / grads) if grads > 0 else 0.0
            out += max(last_bucket, c - cfg.comm_overlap * bwd_busy)
    if strat.gather_after_step:
        ag = collective_time("all-gather", st.params.trainable * gather_b, place.dp, links, comm)
        out += dp_exposed_s(ag, chunks, fwd_busy) if chunks else ag
        calls.append((1, "all-gather", place.dp))
    return out
