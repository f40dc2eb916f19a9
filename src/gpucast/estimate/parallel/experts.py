"""Expert parallelism in training: a mixture-of-experts model's routed experts on ranks of their own.

Megatron-Core's MoE parallel folding (Liu et al. 2025, *MoE Parallel Folding: Heterogeneous
Parallelism Mappings for Efficient Large-Scale MoE Model Training with Megatron Core*): the
attention runs on the plan's tensor x context x data mesh, the MoE layers' routed experts on an
expert-tensor (*etp*) x expert (*e*) x expert-data (*edp*) mesh of the same ``gpus / pipeline``
ranks, ``edp = gpus / (p e etp)``. ``parallel.expert`` is *e*, ``parallel.expert_tensor`` *etp*
(unset: the tensor degree, Megatron-LM's default). Per rank of a stage:

* **weights**: ``E / e`` experts at ``1 / etp`` of their width, the routed experts' parameters
  (:attr:`gpucast.graph.blocks.BlockLayout.block_expert_params`) ``/ (e etp)``; the rest of the
  block (attention, router, shared experts, norms) ``/ t`` as before. The experts' gradients are
  reduced, and the distributed optimizer shards them, over the *edp* ranks; the rest over ``d c``.
* **compute**: with balanced routing every rank gets the same expert work whatever *e* and *etp*
  (its ``n`` tokens sent to *k* experts each, the mesh has as many ranks as the attention's), so the
  trace's grouped GEMMs are split as the layer's other ops, but the expert weights they read or
  write are the rank's own ``1 / (e etp)`` (:func:`rank_view`); what works on the experts' weights
  (FP8 casts, gradient accumulation: :func:`weight_ops`) is split ``e etp`` ways. The layer waits for its busiest rank:
  the expected largest row count of *e* ranks under uniform routing
  (:func:`gpucast.estimate.serving.experts.busiest`) over the mean scales the grouped GEMMs' time
  (:func:`imbalance`).
* **communication** of a MoE layer and micro-batch with ``e > 1`` (Megatron-Core's ``alltoall``
  token dispatcher): the ``n`` tokens a rank holds (``b s / (c t)`` under sequence parallelism,
  ``b s / c`` without) each go to its *k* experts' ranks and come back: a dispatch and a combine
  all-to-all of ``n k h`` elements in forward, two in backward, two more a layer recomputed in
  full, over the *e* ranks of the expert group; with ``etp > 1`` the tokens received are gathered
  over the expert-tensor group and their outputs reduce-scattered back (each of ``etp n k h``).
  The MoE layer runs none of sequence parallelism's all-gather / reduce-scatter around the MLP:
  the dispatcher takes the sequence shard as it is (:func:`gpucast.estimate.parallel.sequence.tp_collectives`).
  With ``e = 1`` Megatron-Core's ``allgather`` dispatcher gathers the tensor group's tokens as a
  dense MLP does: tensor parallelism's collectives, as before.
* **DeepEP** (``parallel.expert_dispatcher: deepep``; Zhao et al. 2025, DeepEP, and DeepSeek-AI
  2024, *DeepSeek-V3 Technical Report*, sec. 3.2.2): across nodes a token goes once to each node
  holding one of its experts (to the GPU of the same local index, which forwards it over NVLink),
  not once per expert: a rank's off-node bytes are ``n h`` times the expected remote nodes a
  token reaches, ``D (N - 1) / N`` with ``D = N (1 - (1 - 1/N)^k)`` distinct nodes of the ``N`` the
  expert group spans under uniform routing, at most the nodes its routing groups allow (DeepSeek's
  ``topk_group`` of ``n_group`` groups, the groups spread evenly over the nodes; :func:`nodes_reached`).
  Inside the node (and inside one node altogether) the all-to-all as above.
* **overlap** (``parallel.ep_overlap``; Megatron-Core's ``--overlap-moe-expert-parallel-comm``, which
  runs one micro-batch's forward beside another's backward so that each one's dispatch and combine
  hide behind the other's compute): the first all-to-all of a micro-batch stays exposed, the rest
  hides while the micro-batch's compute lasts, ``A / n + max(0, A (n - 1) / n - C)`` for ``n``
  all-to-alls of ``A`` seconds in all and compute ``C`` (:func:`overlapped_s`). Default off, as
  Megatron-Core's.
* **placement** (:func:`groups`): Megatron-Core orders the expert mesh's ranks expert-tensor
  fastest, then expert, then expert-data: the expert group sits inside a node when
  ``e etp <= gpus_per_node`` and spans ``e etp / gpus_per_node`` nodes otherwise, its off-node
  shares through the node's NICs (:func:`gpucast.estimate.comm.collective_time`, ``all-to-all``).

Not modelled: the all-to-alls overlapped with compute (Megatron-Core's
``--overlap-moe-expert-parallel-comm``, DeepEP's hooks; off by default), a trained router's skew (hot
experts) beyond uniform routing's, token dropping at a capacity factor, DeepEP's low-latency
kernels (decoding's) and FP8 dispatch, the SMs DeepEP's kernels take from compute, a permutation's padding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpucast.estimate.comm import CommConstants, Group, Links, collective_time
from gpucast.estimate.parallel.overlaps import overlapped_s as hidden


_GROUPED = ("_grouped_mm", "_scaled_grouped_mm")   # transformers' experts, BF16 and FP8 (graph.fp8)


@dataclass(frozen=True)
class ExpertPlan:
    """A plan's expert mesh (module docstring): degrees, communicators, the busiest rank's excess."""

    experts: int           # E routed experts a MoE layer
    top_k: int
    e: int                 # expert-parallel degree
    etp: int               # expert-tensor-parallel degree
    edp: int               # expert-data-parallel degree (the experts' gradient group)
    ep_group: Group
    etp_group: Group
    tokens: float          # tokens a rank sends to the experts a MoE layer and micro-batch
    imbalance: float       # the busiest expert rank's rows over the mean
    dispatcher: str = "alltoall"
    routing_groups: tuple[int, int] = (0, 0)


def plan_of(par, lay, gpus: int, batch_size: int, seq: bool) -> ExpertPlan | None:
    """The expert mesh of a resolved plan ``par`` over ``gpus`` (None for a dense model)."""
    if lay is None or not lay.experts or not any(lay.block_expert_params):
        return None
    t, p, c = par.tensor, par.pipeline, par.context or 1
    e = par.expert or 1
    etp = par.expert_tensor or t
    ep_group, etp_group = groups(e, etp, gpus, p, par.gpus_per_node)
    tokens = batch_size * lay.tokens / c / (t if seq else 1)
    return ExpertPlan(experts=lay.experts, top_k=lay.experts_per_token, e=e, etp=etp, edp=gpus // (p * e * etp),
                      ep_group=ep_group, etp_group=etp_group, tokens=tokens,
                      imbalance=imbalance(lay.experts, lay.experts_per_token, tokens * e, e),
                      dispatcher=par.expert_dispatcher or "alltoall", routing_groups=lay.routing_groups)


def groups(e: int, etp: int, gpus: int, pipeline: int, per_node: int) -> tuple[Group, Group]:
    """(expert group, expert-tensor group) placed as Megatron-Core orders the expert mesh (module docstring)."""
    on_node = min(gpus, per_node)
    etp_group = Group(etp, min(etp, per_node))
    local = max(1, min(e, per_node // etp)) if etp < per_node else 1
    return Group(e, local, concurrent=max(1, on_node // (local * etp))), etp_group


def imbalance(experts: int, top_k: int, tokens: float, e: int) -> float:
    """The busiest of ``e`` ranks' rows over the mean for ``tokens`` tokens routed uniformly (1 for one rank)."""
    if e <= 1 or tokens <= 0:
        return 1.0
    from gpucast.estimate.serving.experts import busiest

    _, rows = busiest(experts, top_k, int(round(tokens)), e)
    mean = tokens * min(top_k, experts) / e
    return max(1.0, rows / mean) if mean > 0 else 1.0


def moe_blocks(lay, blocks) -> int:
    """How many of ``blocks`` (block indices) have routed experts."""
    return sum(1 for i in blocks if lay.block_expert_params[i] > 0)


def stage_experts(lay, blocks, xp: ExpertPlan | None) -> tuple[float, float]:
    """(routed experts' elements, trainable elements) a rank of the stage holding ``blocks`` keeps."""
    if xp is None:
        return 0.0, 0.0
    share = xp.e * xp.etp
    return (float(sum(lay.block_expert_params[i] for i in blocks)) / share,
            float(sum(lay.block_expert_trainable[i] for i in blocks)) / share)


def nodes_reached(top_k: int, nodes: int, routing_groups: tuple[int, int] = (0, 0)) -> float:
    """Expected distinct nodes a token's ``top_k`` experts lie on, the experts spread evenly over
    ``nodes`` and drawn uniformly, at most ``topk_group`` groups' nodes under group-limited routing
    (module docstring, DeepEP)."""
    if nodes <= 1:
        return 1.0
    d = nodes * (1.0 - (1.0 - 1.0 / nodes) ** top_k)
    n_group, topk_group = routing_groups
    if n_group and topk_group:
        d = min(d, topk_group * max(1.0, nodes / n_group))
    return d


def _a2a_s(xp: ExpertPlan, nbytes: float, hidden_bytes: float, links: Links, comm: CommConstants) -> float:
    """One dispatch or combine: an all-to-all, or DeepEP's once-per-node sends across nodes."""
    g = xp.ep_group
    if xp.dispatcher != "deepep" or g.nodes <= 1:
        return collective_time("all-to-all", nbytes, g, links, comm)
    n_nodes = g.nodes
    remote = nodes_reached(xp.top_k, n_nodes, xp.routing_groups) * (n_nodes - 1) / n_nodes
    nic = links.node_gbs * 1e9 * comm.net_efficiency / g.concurrent
    inter = g.local * xp.tokens * hidden_bytes * remote / nic
    intra = collective_time("all-to-all", nbytes / n_nodes, Group(g.local, g.local), links, comm)
    return comm.base_latency_s + max(intra, inter) + comm.net_latency_s


def overlapped_s(comm_s: float, compute_s: float, calls: int) -> float:
    """Exposed seconds of ``calls`` all-to-alls of ``comm_s`` in all beside ``compute_s`` of another
    micro-batch's compute (module docstring, overlap)."""
    return hidden(comm_s, calls, compute_s)


def ep_calls(xp: ExpertPlan | None, n_moe: int, recompute: str) -> int:
    """How many dispatch and combine all-to-alls a micro-batch makes on a stage of ``n_moe`` MoE layers."""
    if xp is None or xp.e <= 1:
        return 0
    return n_moe * (4 + (2 if recompute == "full" else 0))


def ep_comm(xp: ExpertPlan | None, n_moe: int, hidden: int, act_b: int, recompute: str, links: Links,
            comm: CommConstants, calls: list) -> float:
    """Seconds of a micro-batch's dispatch and combine collectives on a stage with ``n_moe`` MoE layers
    (module docstring); appends their ``(count, kind, group)`` to ``calls``."""
    n = ep_calls(xp, n_moe, recompute)
    if n == 0:
        return 0.0
    nbytes = xp.tokens * xp.top_k * hidden * act_b
    out = n * _a2a_s(xp, nbytes, hidden * act_b, links, comm)
    calls.append((n, "all-to-all", xp.ep_group))
    if xp.etp > 1:
        for kind in ("all-gather", "reduce-scatter"):
            count = n // 2
            out += count * collective_time(kind, nbytes * xp.etp, xp.etp_group, links, comm)
            calls.append((count, kind, xp.etp_group))
    return out


def expert_ops(trace) -> np.ndarray:
    """Which ops of the trace are the routed experts' grouped GEMMs (transformers' ``grouped_mm`` experts)."""
    return _cached(trace, ("expert_ops",), lambda: np.fromiter((o.op in _GROUPED for o in trace.ops), dtype=bool,
                                                               count=len(trace.ops)))


def weight_ops(trace, experts: int) -> np.ndarray:
    """Which ops of the layers work on the stacked experts' weights or their gradients (an output of
    ``experts`` x ... elements: FP8 weight casts and transposes, gradient accumulation), grouped GEMMs
    aside: a rank does them for its own ``E / e`` experts at ``1 / etp`` of their width."""
    def of(o) -> bool:
        out = o.out_shapes[0] if o.out_shapes else ()
        return (o.block >= 0 and len(out) == 3 and out[0] == experts
                and o.op not in ("_grouped_mm", "_scaled_grouped_mm"))

    return _cached(trace, ("weight_ops", experts),
                   lambda: np.fromiter((of(o) for o in trace.ops), dtype=bool, count=len(trace.ops)))


def _cached(trace, key, make):
    """A per-trace mask made once (a plan search estimates many plans of one trace)."""
    cache = trace.__dict__.setdefault("_expert_masks", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]




def _weight_bytes(o, experts: int, itemsize: dict) -> float:
    """Bytes of a grouped GEMM's expert-stacked operands and output (``experts`` x ... shapes)."""
    shapes = [sh for sh in tuple(o.shapes) + tuple(o.out_shapes) if isinstance(sh, tuple) and len(sh) == 3
              and sh[0] == experts and all(isinstance(x, int) for x in sh)]
    return float(sum(np.prod(sh) for sh in shapes)) * itemsize.get(o.dtype, 2)


def rank_view(trace, xp: ExpertPlan, div: np.ndarray):
    """The trace with each grouped GEMM's expert-weight bytes scaled so that, split ``div`` ways as the
    tokens are, they come to the rank's own ``1 / (e etp)`` of them (module docstring, compute)."""
    from gpucast.estimate.serving.experts import ITEMSIZE   # here: the serving package is not needed before

    def change(i, o):
        if o.op not in _GROUPED:
            return o
        w = min(_weight_bytes(o, xp.experts, ITEMSIZE), float(o.bytes))
        cut = max(0.0, w - w * div[i] / (xp.e * xp.etp))
        read_share = o.bytes_read / o.bytes if o.bytes else 1.0
        return replace(o, bytes_read=int(max(0, o.bytes_read - cut * read_share)),
                       bytes_written=int(max(0, o.bytes_written - cut * (1 - read_share))))

    return trace.view(("experts", xp.experts, xp.e * xp.etp, div.tobytes()), change)


def with_imbalance(kt, mask: np.ndarray, factor: float):
    """Kernel times with the ops under ``mask`` ``factor`` times longer (the busiest expert rank)."""
    if factor == 1.0 or not mask.any():
        return kt
    scale = np.where(mask, factor, 1.0)
    return replace(kt, time=kt.time * scale, compute=kt.compute * scale, memory=kt.memory * scale)


def notes(xp: ExpertPlan | None, par=None) -> list[str]:
    if par is not None and par.ep_overlap and (xp is None or xp.e <= 1):
        return ["parallel.ep_overlap has no expert-parallel all-to-alls to overlap (expert 1): off"]
    if xp is None or xp.e <= 1:
        return []
    return [f"expert parallelism: {xp.experts} experts over {xp.e} ranks ({xp.experts // xp.e} each, expert-tensor "
            f"{xp.etp}, expert-data {xp.edp}, {xp.dispatcher} dispatch); the busiest rank gets {xp.imbalance:.3f}x "
            f"the mean rows under uniform routing (a trained router's skew is not modelled)"]
