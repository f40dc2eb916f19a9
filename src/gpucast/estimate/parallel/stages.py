"""One pipeline stage's rank of a parallel plan: its ops, what it holds, its framework's host time.

:func:`build` cuts the replica's trace into stage *k*'s micro-batch (:mod:`.ranks`: its forward,
recomputed and backward ops, each split by the tensor, context and expert degrees the plan's
composition gave the kernel times), with the parameters the rank holds (the routed experts over
``e x expert_tensor`` ranks, the rest over the tensor degree: :mod:`.experts`); :func:`dp_parts`
splits them by the group their gradients are reduced over; :func:`framework_on_stage` and
:func:`framework_step` spread the framework's own Python (:mod:`.framework`) over the stage's ops
and its optimizer step. :mod:`.compose` puts the stages together into the step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpucast.estimate.comm import CommConstants, Links
from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.kernels import PHASE_CODES, OpArrays
from gpucast.estimate.parallel import experts as moe
from gpucast.estimate.parallel.activations import StageActivations
from gpucast.estimate.parallel.collectives import Placement, cp_comm, dp_micro, dp_step, tp_comm
from gpucast.estimate.parallel.constants import ParallelConstants
from gpucast.estimate.parallel.framework import (FrameworkConstants, collective_host_s, framework_host,
                                                 framework_micro_collectives, framework_step_collectives)
from gpucast.estimate.parallel.memory import RankParams
from gpucast.estimate.parallel.ranks import stage_ops, sub_trace, subset
from gpucast.graph.blocks import POST
from gpucast.graph.trace import Trace
from gpucast.job import Job
from gpucast.plan import Parallel


@dataclass
class Stage:
    """Stage ``k``'s rank: its micro-batch sub-trace and what it holds."""

    k: int
    blocks: int
    sub: Trace
    n_fwd: int
    n_re: int
    kt: object
    host: np.ndarray
    params: RankParams
    flops: float  # FLOPs one micro-batch runs on this rank (recompute included)
    attention: np.ndarray  # its ops that are attention kernels (they hide context parallelism's sends)
    gemm: np.ndarray       # its GEMMs (they hide overlapped tensor-parallel collectives)
    offload_bytes: float = 0.0  # saved activations a micro-batch offloads to the host each way (.offload)
    n_moe: int = 0         # its mixture-of-experts layers
    dispatched: int = 0    # of them, those whose tokens go by expert-parallel all-to-all (.experts)
    expert_trainable: float = 0.0  # trainable routed-expert elements on the rank (in params.trainable)


def build(k, blocks_of, stage, ol, kt, host, flops, par, trace, trainable_total, frozen_total, elem, xp=None,
           xmask=None, mtp: int = 0) -> Stage:
    idx, n_fwd, n_re = stage_ops(ol, stage, k, par.recompute, par.recompute_modules)
    lay = trace.layout
    t, p = par.tensor, par.pipeline
    n_moe, x_params, x_trainable = 0, 0.0, 0.0
    depths = mtp if lay is not None else 0   # MTP depths on this rank: the last's, or where a layout puts them
    if depths:
        idx, n_fwd = mtp_ops(ol, idx, n_fwd, n_re, lay.blocks - 1, depths)
    if lay is not None:
        bl = list(blocks_of[k]) + [lay.blocks - 1] * depths
        pick = lambda xs: float(sum(xs[i] for i in bl))  # noqa: E731
        params = pick(lay.block_params) + (lay.outer_params["pre"] if k == 0 else 0) + \
            (lay.outer_params["post"] if k == p - 1 else 0)
        trainable = pick(lay.block_trainable) + (lay.outer_trainable["pre"] if k == 0 else 0) + \
            (lay.outer_trainable["post"] if k == p - 1 else 0)
        pbytes = pick(lay.block_param_bytes) + (lay.outer_param_bytes["pre"] if k == 0 else 0) + \
            (lay.outer_param_bytes["post"] if k == p - 1 else 0)
        if k == 0 and k == p - 1:  # one stage holds both ends: a tied embedding once
            params -= lay.outer_params["shared"]
            trainable -= lay.outer_trainable["shared"]
            pbytes -= lay.outer_param_bytes["shared"]
        frozen = max(0.0, pbytes - elem * trainable)
        biggest = max((lay.block_params[i] for i in bl), default=0)
        biggest_tr = max((lay.block_trainable[i] for i in bl), default=0)
        if xp is not None:  # the routed experts over e x etp ranks, the rest over t (.experts)
            n_moe = moe.moe_blocks(lay, bl)
            x_params, x_trainable = moe.stage_experts(lay, bl, xp)
        share = xp.e * xp.etp if xp is not None else t
        rp = RankParams((params - x_params * share) / t + x_params, (trainable - x_trainable * share) / t + x_trainable,
                        frozen / t, biggest / t, biggest_tr / t)
        nblocks = len(bl)
    else:
        rp = RankParams(float(trace.parameters), trainable_total, frozen_total, float(trace.parameters),
                        trainable_total)
        nblocks = 0
    sub = sub_trace(trace, idx)
    category = OpArrays.of(sub).category
    skt = subset(kt, idx)
    if xp is not None:   # the layer waits for its busiest expert rank
        skt = moe.with_imbalance(skt, xmask[idx], xp.imbalance)
    return Stage(k=k, blocks=nblocks, sub=sub, n_fwd=n_fwd, n_re=n_re, kt=skt, host=host[idx], params=rp,
                  flops=float(flops[idx].sum()), attention=category == "attention", gemm=category == "matmul",
                  n_moe=n_moe, dispatched=n_moe if xp is not None and xp.e > 1 else 0, expert_trainable=x_trainable)


def mtp_ops(ol, idx: np.ndarray, n_fwd: int, n_re: int, last: int, mtp: int) -> tuple[np.ndarray, int]:
    """A rank's ops with ``mtp`` multi-token-prediction depths (DeepSeek-V3's MTP modules, Megatron-Core's
    ``--mtp-num-layers``; the last stage's, or where a pipeline layout puts them) run as the model's last
    layer's and the head's ops again: each depth's forward after the main
    forward, its backward before the main backward (the MTP loss's gradient reaches the main model's last hidden
    state). Its projection of two hidden states into one (``2h x h``) is not counted."""
    fwd = PHASE_CODES["bwd"]
    extra_f = np.flatnonzero(((ol.block == last) & (ol.phase == PHASE_CODES["fwd"])) | ((ol.block == POST)
                                                                                        & (ol.phase < fwd)))
    extra_b = np.flatnonzero(((ol.block == POST) | (ol.block == last)) & (ol.phase == fwd))
    out = np.concatenate([idx[:n_fwd], np.tile(extra_f, mtp), idx[n_fwd:n_fwd + n_re], np.tile(extra_b, mtp),
                          idx[n_fwd + n_re:]]).astype(np.int64)
    return out, n_fwd + mtp * len(extra_f)


def dp_parts(st: Stage, place: Placement, xplace: Placement | None) -> list[tuple[Stage, Placement]]:
    """The stage's parameters by the group their gradients are reduced over: all of them over the data-parallel
    group, or, with routed experts (:mod:`.experts`), the rest there and the experts' over the expert-data group."""
    if xplace is None:
        return [(st, place)]
    dense = replace(st, params=replace(st.params, trainable=st.params.trainable - st.expert_trainable))
    routed = replace(st, params=replace(st.params, trainable=st.expert_trainable, frozen_bytes=0.0))
    return [(dense, place), (routed, xplace)]


def framework_on_stage(st: Stage, name: str, trace: Trace, lay, job: Job, par: Parallel, strat, act_b: int,
                        gather_b, reduce_b, place: Placement, links: Links, comm: CommConstants,
                        consts: ParallelConstants, cfg: EstimatorConfig,
                        fc: FrameworkConstants | None, seq: bool, xp=None,
                        graphed: bool = False) -> tuple[np.ndarray, float]:
    """The framework's host seconds on stage ``st``'s ops (:mod:`.framework`): each phase's share
    spread over that phase's ops, the micro-batch's on its first op, the c10d calls of the
    micro-batch's collectives over all its ops; and their sum (seconds a micro-batch). ``graphed``:
    the layers run as CUDA graphs, their Python and their collectives' calls inside them (:mod:`.graphs`)."""
    calls: list = []
    if not graphed:
        tp_comm(st, lay, job, par, act_b, place, links, comm, calls, seq)
        cp_comm(st, lay, job, par, act_b, 0.0, links, comm, calls)
    if xp is not None and not graphed:
        moe.ep_comm(xp, st.n_moe, lay.hidden, act_b, par.recompute, links, comm, calls)
    if par.pipeline > 1:
        calls.append((2, "send-recv", place.pp))
    dp_micro(strat, st, gather_b, reduce_b, 0.0, 0.0, place, links, comm, consts, cfg, calls)
    n_calls = sum(n for n, _, _ in calls) + framework_micro_collectives(name, par.tensor, place.dp.n)
    tensors = trace.param_tensors * (st.blocks / lay.blocks if lay is not None and lay.blocks else 1.0)
    fh = framework_host(name, par.sharding, par.recompute, 0 if graphed else st.blocks, tensors, cfg, fc)
    n = len(st.host)
    extra = np.zeros(n)
    n_bwd = n - st.n_fwd - st.n_re
    for lo, count, secs in ((0, st.n_fwd, fh.forward_s), (st.n_fwd, st.n_re, fh.recompute_s),
                            (st.n_fwd + st.n_re, n_bwd, fh.backward_s)):
        if count:
            extra[lo:lo + count] += secs / count
    if n:
        extra[0] += fh.micro_batch_s
        extra += collective_host_s(n_calls, cfg, fc) / n
    return extra, float(extra.sum())


def framework_step(name: str, par: Parallel, strat, stages: list, trace: Trace, lay, place: Placement, links: Links,
                    comm: CommConstants, cfg: EstimatorConfig, gather_b, reduce_b,
                    fc: FrameworkConstants | None) -> float:
    """The framework's host seconds once a step (its optimizer's loops, the once-a-step collectives'
    c10d calls), on the first stage's rank."""
    st = stages[0]
    calls: list = []
    dp_step(strat, st, gather_b, reduce_b, 0.0, place, links, comm, cfg, calls)
    n_calls = sum(n for n, _, _ in calls) + framework_step_collectives(name)
    tensors = trace.param_tensors * (st.blocks / lay.blocks if lay is not None and lay.blocks else 1.0)
    fh = framework_host(name, par.sharding, par.recompute, st.blocks, tensors, cfg, fc)
    return fh.step_s + collective_host_s(n_calls, cfg, fc)


def whole_activations(trace: Trace) -> StageActivations:
    """A model without blocks: what the trace saved for its backward, one micro-batch in flight."""
    return StageActivations(per_micro_batch=trace.memory.at_backward_start.get("activations", 0), in_flight=1,
                            working=0.0)
