"""A job spread over many GPUs: one replica's trace turned into a parallel plan's step.

``estimate_plan(trace, job, gpu, config, env)`` answers for a job with a ``parallel`` group
(:class:`gpucast.plan.Parallel`): tensor degree *t*, pipeline degree *p*, data-parallel degree
``d = gpus / (t p)``, *m* = ``grad_accum`` micro-batches of ``batch_size`` per optimizer step. The
trace stays one replica's micro-batch on the meta device; nothing is built *N* times.

One optimizer step, on the rank of each pipeline stage *k*:

1. **Compute of a micro-batch** (:mod:`.ranks`): the stage's forward and backward ops with
   tensor-parallel ops split by *t*, recomputed forward ops added, run through the two-clock step
   simulation (:func:`gpucast.estimate.step.simulate`: host dispatch, kernels on one stream) with
   the environment's kernel and host factors. The first stage also carries the data loader.
2. **Exposed communication of a micro-batch** (:mod:`gpucast.estimate.comm`): tensor parallelism's
   all-reduces of the ``b s h`` activation (two per layer in forward, two in backward, two more per
   recomputed layer: Megatron-LM's *f*/*g* operators, not overlapped; reduce-scatters and
   all-gathers under sequence parallelism, :mod:`.sequence`, which also splits the layers' other
   ops and their activations over the *t* ranks), pipeline sends of one
   activation and one gradient (scatter-gathered over the *t* ranks), and the sharding strategy's
   per-micro-batch collectives (:mod:`.sharding`) less the part hidden behind the micro-batch's
   compute (``gather_overlap`` of it for FSDP/ZeRO-3; the first unit's gather never hides).
3. **Pipeline**: 1F1B runs ``m + p - 1`` slots of the slowest stage's micro-batch; the bubble is
   ``(p - 1)`` of them, ``(p-1)/(m+p-1)`` of the pipeline (Narayanan et al. 2021). Interleaved
   (``virtual_pipeline`` *v* chunks per rank, their sec. 2.2): the bubble is ``(p - 1) / v`` slots
   and each micro-batch makes ``v`` times the stage-boundary sends.
4. **Once a step**: DDP's gradient all-reduce (or ZeRO-1's reduce-scatter) less what hides behind
   the last backward (``EstimatorConfig.comm_overlap``), the optimizer over the rank's (sharded)
   parameters, ZeRO-1/2's all-gather of the updated weights.

Per GPU: step time with its breakdown, peak memory of the busiest rank (:mod:`.memory`),
utilization as NVML reads it on each stage's GPUs (NCCL kernels, including a stage waiting in a
pipeline receive, read busy; host gaps read idle as in :mod:`gpucast.estimate.nvml`), MFU and HFU
(:mod:`.flops`), tokens per second per GPU; for the job: GPUs, nodes, global batch, tokens/s.

Communicators are placed as Megatron-LM orders ranks (tensor fastest, then data, then pipeline):
a tensor group sits inside a node when ``t <= gpus_per_node``; a data-parallel group of *d* ranks
has ``gpus_per_node / t`` of them on each node and shares the node's NICs with the other ``t``
groups; pipeline neighbours are on different nodes once ``t d >= gpus_per_node``.

Context parallelism (``context`` *c*, :mod:`.context`): every op on a *c*-th of the tokens, the ring's
key/value sends less what the attention kernels hide, the gradients reduced over ``d c`` ranks.

Tensor-parallel collectives overlapped with the GEMMs (``tp_overlap``, :func:`.sequence.overlapped_s`).

Expert parallelism of a mixture-of-experts model (``expert`` *e*, ``expert_tensor``, :mod:`.experts`):
the routed experts' weights over ``e x expert_tensor`` ranks and their gradients over the expert-data
group, the dispatch and combine all-to-alls, the busiest expert rank's grouped GEMMs.

Megatron-Core's overlaps (:mod:`.overlaps`): the interleaved schedule's sends beside the chunks' compute
(``pp_overlap``), the distributed optimizer's collectives a layer at a time behind the last backward
and the next forward (``dp_overlap``).

CPU activation offloading (``offload`` layers a stage, :mod:`.offload`): their saved activations off the
GPU, the copies' time beyond the compute they run beside.

Not modelled: overlap of the pipeline's sends with compute, straggling ranks, the data loader of the stages after the first.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpucast import pipeline_layout as layout
from gpucast.estimate import Estimate, _bottleneck, prepare
from gpucast.estimate.comm import DEFAULT_COMM, CommConstants, Links, collective_time
from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.environment import Environment
from gpucast.estimate.loader import loader_cost
from gpucast.estimate.kernels import OpArrays, kernel_times
from gpucast.estimate.memory import cublas_workspace_bytes, cuda_context_bytes, library_handle_bytes
from gpucast.estimate.nvml import held_share, reported_share
from gpucast.estimate.parallel import context as ring_attention
from gpucast.estimate.parallel import experts as moe
from gpucast.estimate.parallel import fp8_params
from gpucast.estimate.parallel import graphs as cuda_graphs
from gpucast.estimate.parallel import offload as cpu_offload
from gpucast.estimate.parallel import overlaps
from gpucast.estimate.parallel import sequence
from gpucast.estimate.parallel import stages as stages_mod
from gpucast.estimate.parallel.activations import per_block, stage_activations
from gpucast.estimate.parallel.collectives import act_bytes, cp_comm, dp_micro, dp_step, fixed_cost, placement, tp_comm
from gpucast.estimate.parallel.checks import check_plan
from gpucast.estimate.parallel.constants import DEFAULT_PARALLEL, ParallelConstants
from gpucast.estimate.parallel.flops import convention, model_flops_per_sample, peak_flops
from gpucast.estimate.parallel.framework import FrameworkConstants, framework_of, framework_stack
from gpucast.estimate.parallel.memory import rank_memory
from gpucast.estimate.parallel.ranks import (OpLayout, optimizer_share, split_times, stage_blocks, stage_of_ops,
                                             sub_trace, subset)
from gpucast.estimate.parallel.sharding import HALF, STRATEGIES, comm_bytes_per_param, grad_dtype, model_states
from gpucast.estimate.stack import host_factor, kernel_scales, torch_host_factor
from gpucast.estimate.step import simulate
from gpucast.formats import ELEMENT_BYTES
from gpucast.graph.trace import FP8_WEIGHT_WORK, WEIGHT_COPIES, Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job


def estimate_plan(trace: Trace, job: Job, gpu: GpuSpec, config: EstimatorConfig | None = None,
                  env: Environment | None = None, window_s: float | None = None,
                  consts: ParallelConstants | None = None, comm: CommConstants | None = None,
                  corners: bool = True, framework: FrameworkConstants | None = None) -> Estimate:
    """The parallel plan's step, memory and utilization (module docstring) as an :class:`Estimate`
    whose ``plan`` holds the breakdown. ``consts``/``comm``/``framework`` override the published and
    fitted constants (fitting does); ``corners=False`` skips the intervals' extra runs (they are then
    the point)."""
    env = env or Environment.default()
    consts = consts or DEFAULT_PARALLEL
    comm = comm or DEFAULT_COMM
    par = job.parallel.resolved(gpu)
    fw_name = framework_of(par)
    seq = sequence.enabled(par, fw_name)
    tp_hide = sequence.overlap_enabled(par, seq, fw_name, gpu)
    notes = check_plan(trace, par) + sequence.notes(par)
    job = job.with_(stack=framework_stack(fw_name, job.stack, gpu))  # the framework's kernels (.framework)
    prep = prepare(trace, job, gpu, config, env)
    cfg = prep.cfg
    t, p, m = par.tensor, par.pipeline, par.grad_accum
    v = par.virtual_pipeline or 1
    c = par.context or 1
    d = job.gpus // (t * p * c)   # replicas; the gradients' group is d x c wide (.context)
    strat = STRATEGIES[par.sharding]
    place = placement(par, job.gpus, strat.hybrid)
    links = Links.of(gpu, par.network_spec())
    lay = trace.layout
    ol = OpLayout.of(trace)
    mtp_model = lay.mtp_layers if lay is not None and fw_name == "megatron" else 0
    laid = layout.of_plan(par, lay.blocks, mtp_model) if lay is not None else None   # (checked by check_plan)
    ranks_laid = layout.ranks(laid, p) if laid else None
    blocks_of = ([np.array(b, dtype=int) for b in ranks_laid.blocks] if ranks_laid else
                 stage_blocks(lay.blocks, p, par.first_stage_layers, par.last_stage_layers) if lay is not None
                 else [np.zeros(0, dtype=int)])
    stage = stage_of_ops(ol, blocks_of) if lay is not None else np.where(ol.phase == 3, -1, 0)
    div = sequence.op_divisor(ol, t, seq) * ring_attention.op_divisor(ol, c)
    xp = moe.plan_of(par, lay, job.gpus, job.batch_size, seq)
    if xp is not None:   # a rank's own experts' weights (.experts)
        div = np.where(moe.weight_ops(trace, xp.experts), float(xp.e * xp.etp), div)
    kt = (kernel_times(moe.rank_view(trace, xp, div) if xp else trace, gpu, job.precision, cfg,
                       prep.surroundings.stack, prep.scales, split=div)
          if t > 1 or c > 1 or xp is not None else prep.kt)  # a rank's narrower GEMMs on the same SMs (.tiles)
    stack = prep.surroundings.stack
    host = prep.host * torch_host_factor(stack.torch, env)
    if not strat.gathers:   # TE's FP8 weight casts and transposes run once a step (.fp8_params)
        kt, host = fp8_params.once_a_step(kt, host, ol.tagged((FP8_WEIGHT_WORK,)), m)
    flops = np.fromiter((o.flops for o in trace.ops), dtype=np.float64, count=len(trace.ops)) / div

    trainable_total = float(trace.trainable_parameters)
    elem = trace.gradient_bytes / trainable_total if trainable_total else 4.0  # bytes of a trainable weight
    frozen_total = max(0.0, trace.parameter_bytes - elem * trainable_total)
    opt_per_param = (trace.memory.totals.get("optimizer_state", 0) / trainable_total * 4.0 / elem
                     if trainable_total else 0.0)  # at fp32, whatever dtype the trace's optimizer ran in
    notes += moe.notes(xp, par) + overlaps.notes(par)
    pp_hide = overlaps.pp_enabled(par, fw_name)
    dp_chunks = (overlaps.dp_chunks(lay.blocks if lay is not None else 1, v, p)
                 if overlaps.dp_enabled(par, fw_name) else 0)
    xmask = moe.expert_ops(trace) if xp is not None else None
    mtp = par.mtp_layers if par.mtp_layers is not None else mtp_model
    mtp_at = (ranks_laid.mtp if ranks_laid and sum(ranks_laid.mtp) else [0] * (p - 1) + [mtp])  # depths per rank
    stages = [stages_mod.build(k, blocks_of, stage, ol, kt, host, flops, par, trace, trainable_total, frozen_total,
                               elem, xp, xmask, mtp_at[k]) for k in range(p)]
    xplace = placement(replace(par, tensor=xp.e * xp.etp), job.gpus, strat.hybrid) if xp else None
    if par.offload and lay is not None:   # the saved activations each micro-batch sends to the host (.offload)
        one = per_block(lay, t, par.recompute, seq, par.recompute_modules) / c
        for st in stages:
            st.offload_bytes = cpu_offload.offloaded_blocks(st.blocks, par.offload) * one
    opt_idx = np.flatnonzero(ol.phase == 3)
    opt_sub = sub_trace(trace, opt_idx) if len(opt_idx) else None
    lc = loader_cost(prep.surroundings, trace, gpu, env, cfg.host_link_efficiency, job.input_pipeline_s)
    micro_cfg = cfg.replace(step_overhead_s=0.0, param_overhead_s=0.0, step_end_sync=False)
    job1 = job.with_(gpus=1, parallel=None)
    hf = host_factor(stack, env)

    def kf_of(sub) -> float | np.ndarray:  # per-op kernel multipliers of a sub-trace (the release's libraries)
        return kernel_scales(stack, gpu.name, env, OpArrays.of(sub).library)

    stage_kf = [kf_of(st.sub) for st in stages]
    opt_kf = kf_of(opt_sub) if opt_sub is not None else 1.0
    gather_b, reduce_b = comm_bytes_per_param(strat, job.precision, par.grad_dtype)
    # the share of the parameters in Transformer Engine's FP8 layers: the trace saved one byte, the FP8
    # weight's transpose, per such parameter (gpucast.graph.te)
    fp8_layers = trace.memory.at_backward_start.get(WEIGHT_COPIES, 0) / max(trace.parameters, 1)
    fp8_param = fp8_layers > 0 and fp8_params.enabled(par, fw_name, job.precision, job.stack.fp8_recipe)
    if par.fp8_param and not fp8_layers:
        notes.append("parallel.fp8_param: no Transformer Engine FP8 layers kept their weights here (they are "
                     "Megatron-Core's, framework megatron): off")
    if fp8_param:   # the updated weights all-gathered in FP8 (.fp8_params)
        gather_b = fp8_params.gather_bytes(gather_b, fp8_layers, ELEMENT_BYTES[job.precision])
    act_b = 2 if job.precision in HALF else 4
    shard = place.dp.n
    torch_hf = torch_host_factor(stack.torch, env)
    graphed = bool(par.cuda_graphs) and lay is not None
    if graphed:   # the layers as CUDA graphs: a launch a layer and direction, not their ops' dispatch (.graphs)
        launch = (cfg.python_op_s + cfg.launch_s) * torch_hf
        for st in stages:
            blocks = np.fromiter((o.block for o in st.sub.ops), dtype=np.int64, count=len(st.sub.ops))
            st.host = cuda_graphs.host_s(st.host, blocks, st.n_fwd, st.n_re, launch)
    fw = [stages_mod.framework_on_stage(st, fw_name, trace, lay, job, par, strat, act_b, gather_b, reduce_b, place,
                                        links, comm, consts, cfg, framework, seq, xp, graphed) for st in stages]
    for st, (extra, _) in zip(stages, fw):
        st.host = st.host + extra * torch_hf
    fw_step = stages_mod.framework_step(fw_name, par, strat, stages, trace, lay, place, links, comm, cfg, gather_b,
                                        reduce_b, framework)
    if len(opt_idx):
        host = host.copy()
        host[opt_idx] += fw_step * torch_hf / len(opt_idx)

    def compose(kscale: float = 1.0, hscale: float = 1.0) -> dict:
        per = []
        for st, kf in zip(stages, stage_kf):
            tl = simulate(st.sub, job1, gpu, micro_cfg, st.kt, st.host, kscale * kf, hscale * hf,
                          lc if st.k == 0 else None, env.idle_kernel_s)
            scaled = st.kt.time * (kscale * kf)
            re_busy = float(scaled[st.n_fwd:st.n_fwd + st.n_re].sum())
            fwd_busy = float(scaled[:st.n_fwd].sum())
            bwd_busy = max(0.0, tl.gpu_busy_s - fwd_busy)
            calls: list = []  # (count, kind, group) of the micro-batch's collectives, for their fixed costs
            tp_c = tp_comm(st, lay, job, par, act_b, place, links, comm, calls, seq)
            if tp_hide:   # chunks beside the stage's GEMMs (.sequence)
                tp_c = sequence.overlapped_s(tp_c, float(scaled[st.gemm].sum()), t)
            p2p = 0.0
            if p > 1:
                p2p = 2 * v * collective_time("send-recv", act_bytes(lay, job, act_b, c) / t, place.pp, links, comm)
                calls.append((2 * v, "send-recv", place.pp))
                if pp_hide:   # on their own stream beside the chunks' compute (.overlaps)
                    p2p = overlaps.overlapped_s(p2p, 2 * v, tl.gpu_busy_s)
            cp_c = cp_comm(st, lay, job, par, act_b, float(scaled[st.attention].sum()), links, comm, calls)
            ep_c = moe.ep_comm(xp, st.n_moe, lay.hidden, act_b, par.recompute, links, comm, calls) if xp else 0.0
            if par.ep_overlap:   # hidden behind another micro-batch's compute (.experts)
                ep_c = moe.overlapped_s(ep_c, tl.gpu_busy_s, moe.ep_calls(xp, st.n_moe, par.recompute))
            dp_m = sum(dp_micro(strat, s_, gather_b, reduce_b, fwd_busy, bwd_busy, pl, links, comm, consts, cfg, calls)
                       for s_, pl in stages_mod.dp_parts(st, place, xplace))
            off = cpu_offload.exposed_s(st.offload_bytes, gpu.host_link_gbs, cfg.host_link_efficiency, fwd_busy,
                                        bwd_busy)
            per.append(dict(tl=tl, re=re_busy, tp=tp_c, p2p=p2p, cp=cp_c, ep=ep_c, dp=dp_m, off=off, bwd=bwd_busy,
                            fwd=fwd_busy,
                            calls=calls, micro=tl.step_time_s + tp_c + p2p + cp_c + ep_c + dp_m + off))
        slow = max(range(p), key=lambda i: per[i]["micro"])
        t_slow = per[slow]["micro"]
        bubble = (p - 1) / v * t_slow if p > 1 else 0.0   # interleaved: (p-1)/v slots (Narayanan et al. 2021)
        pipe = m * t_slow + bubble if p > 1 else m * per[0]["micro"]
        st = stages[slow]
        step_calls: list = []
        dp_s = sum(dp_step(strat, s_, gather_b, reduce_b, per[slow]["bwd"], pl, links, comm, cfg, step_calls,
                           dp_chunks, per[slow]["fwd"])
                   for s_, pl in stages_mod.dp_parts(st, place, xplace))
        opt = 0.0
        opt_busy = 0.0
        if opt_sub is not None:
            share = sum(optimizer_share(s_.params.trainable, trainable_total)
                        / (pl.dp.n if strat.shards_optimizer else 1) for s_, pl in stages_mod.dp_parts(st, place, xplace))
            okt = split_times(subset(prep.kt, opt_idx), np.full(len(opt_idx), 1.0 / max(share, 1e-12)),
                              cfg.compute_ramp_s, 0.0)
            otl = simulate(opt_sub, job1, gpu, cfg, okt, host[opt_idx], kscale * opt_kf, hscale * hf, None,
                           env.idle_kernel_s)
            opt, opt_busy = otl.step_time_s, otl.gpu_busy_s
        step = pipe + dp_s + opt
        fixed = m * fixed_cost(per[slow]["calls"], links, comm) + fixed_cost(step_calls, links, comm)
        n_calls = m * sum(n for n, _, _ in per[slow]["calls"]) + sum(n for n, _, _ in step_calls)
        return dict(per=per, slow=slow, step=step, pipe=pipe, dp_step=dp_s, opt=opt, opt_busy=opt_busy,
                    bubble=bubble, fixed=fixed, n_calls=n_calls)

    base = compose()
    corners = [compose(k, h) for k in cfg.kernel_time_range for h in cfg.host_time_range] if corners else [base]
    step = base["step"]

    # ------------------------------------------------------------------ utilization per stage
    def utils(c: dict) -> tuple[list[float], list[float]]:
        out, held = [], []
        for i, pr in enumerate(c["per"]):
            tl = pr["tl"]
            read = reported_share(tl.step_time_s, tl.gpu_busy_s, tl.gap_lengths, env.nvml_tick_s) * tl.step_time_s
            comm_t = pr["tp"] + pr["p2p"] + pr["cp"] + pr["ep"] + pr["dp"]
            wait = max(0.0, c["pipe"] - m * pr["micro"])  # in a pipeline receive: an NCCL kernel spins
            busy_read = m * (read + comm_t) + wait + c["dp_step"] + c["opt_busy"]
            out.append(env.util_response(min(1.0, busy_read / c["step"])))
            held.append(held_share(c["step"], m * (tl.gpu_busy_s + comm_t) + c["dp_step"] + c["opt_busy"]))
        return out, held

    u, h = utils(base)
    corner_u = [utils(c) for c in corners]
    # ------------------------------------------------------------------ memory of the busiest rank
    context = cuda_context_bytes(gpu, env, prep.surroundings) + sum(
        library_handle_bytes(trace, gpu, env, prep.surroundings).values())
    workspaces = cublas_workspace_bytes(gpu, cfg, job.mode)
    communicators = int(t > 1) + int(p > 1) + int(d > 1) + int(place.dp_across.n > 1)
    # Transformer Engine's FP8 weights and transposes, 2 elements a parameter of its FP8 layers, held once
    fp8_share = fp8_layers * ELEMENT_BYTES.get(job.precision, 1.0)   # in the recipe's bytes an element
    opt_dtypes = (par.optimizer_moments, par.master_weights, par.grad_dtype)   # the state's dtypes (.sharding)
    mems = []
    for st in stages:
        states = model_states(strat, job.precision, st.params.trainable - st.expert_trainable, st.params.frozen_bytes,
                              opt_per_param, shard, *opt_dtypes)
        if xplace is not None:   # the routed experts' states, sharded over the expert-data group (.experts)
            x = model_states(strat, job.precision, st.expert_trainable, 0.0, opt_per_param, xplace.dp.n, *opt_dtypes)
            states = type(states)(weights=states.weights + x.weights, gradients=states.gradients + x.gradients,
                                  optimizer=states.optimizer + x.optimizer)
        if fp8_param:   # no bf16 copy of the FP8 layers' weights (.fp8_params)
            states = replace(states, weights=fp8_params.weight_bytes(states.weights, fp8_layers))
        acts = (stage_activations(lay, st.blocks, st.k, p, m, t, par.recompute, v, seq, c, par.recompute_modules,
                                  par.offload or 0, mtp_at[st.k])
                if lay is not None
                else stages_mod.whole_activations(trace))
        mems.append(rank_memory(states, acts, st.params, strat, gather_b, reduce_b, communicators, context,
                                workspaces, consts, weight_cache=2 * fp8_share * st.params.params,
                                contiguous=fw_name == "megatron"))
    busiest = max(range(p), key=lambda i: mems[i].total_bytes)
    mem = mems[busiest]
    lo, hi = cfg.memory_range
    # ------------------------------------------------------------------ throughput and FLOPs
    samples = job.batch_size * m * d
    tokens_per_sample = lay.tokens if lay is not None else 1
    adapter = job.adapter is not None
    model_flops = model_flops_per_sample(trace, int(trainable_total), adapter) * samples
    peak = peak_flops(gpu, job.precision)
    hw_flops = sum(st.flops for st in stages) * t * c * d * m
    slow = base["slow"]
    pr = base["per"][slow]
    tl = pr["tl"]
    breakdown = {
        "compute_s": m * max(0.0, tl.gpu_busy_s - pr["re"]),
        "recompute_s": m * pr["re"],
        "host_gaps_s": m * max(0.0, tl.step_time_s - tl.gpu_busy_s),
        "tensor_parallel_comm_s": m * pr["tp"],
        "pipeline_p2p_s": m * pr["p2p"],
        "context_parallel_comm_s": m * pr["cp"],
        "expert_parallel_comm_s": m * pr["ep"],
        "offload_s": m * pr["off"],
        "data_parallel_comm_s": m * pr["dp"] + base["dp_step"],
        "pipeline_bubble_s": base["bubble"],
        "optimizer_s": base["opt"],
    }
    nodes = place.nodes
    plan = {
        "tensor": t, "sequence": seq, "tp_overlap": tp_hide, "pp_overlap": pp_hide,
        "dp_overlap": bool(dp_chunks), "context": c, "expert": xp.e if xp else 1,
        "expert_tensor": xp.etp if xp else None, "expert_data": xp.edp if xp else None,
        "expert_imbalance": xp.imbalance if xp else None, "pipeline": p, "virtual_pipeline": v, "data": d,
        "sharding": par.sharding, "recompute": par.recompute, "recompute_modules": list(par.recompute_modules or ()),
        "offload": par.offload or 0, "mtp_layers": sum(mtp_at), "fp8_param": fp8_param, "cuda_graphs": graphed,
        "optimizer_moments": par.optimizer_moments or "fp32", "master_weights": par.master_weights or "fp32",
        "grad_dtype": grad_dtype(strat, job.precision, par.grad_dtype),
        "grad_accum": m, "micro_batch": job.batch_size, "global_batch": samples,
        "gpus": job.gpus, "gpus_per_node": par.gpus_per_node, "nodes": nodes, "network": par.network,
        "layers_per_stage": [int(s.blocks) for s in stages],
        "step_breakdown_s": breakdown,
        "comm_fixed_s": base["fixed"],
        "comm_calls": base["n_calls"],
        "framework": fw_name,
        "framework_host_s": (m * fw[slow][1] + fw_step) * torch_hf * hf,
        "bubble_fraction": (p - 1) / v / (m + (p - 1) / v) if p > 1 else 0.0,
        "slowest_stage": slow, "busiest_memory_stage": busiest,
        "memory_per_stage_bytes": [mm.total_bytes for mm in mems],
        "util_per_stage_pct": [round(100 * x, 2) for x in u],
        "tokens_per_s": samples * tokens_per_sample / step,
        "tokens_per_s_per_gpu": samples * tokens_per_sample / step / job.gpus,
        "samples_per_s": samples / step,
        "model_flops_per_step": model_flops, "hardware_flops_per_step": hw_flops,
        "mfu": model_flops / (step * job.gpus * peak), "hfu": hw_flops / (step * job.gpus * peak),
        "flops_convention": convention(trace, adapter),
        "links": {"intra": f"{links.intra_kind} {links.intra_gbs:g} GB/s per GPU",
                  "network": f"{links.net_kind} {links.node_gbs:g} GB/s per node" if nodes > 1 else "-"},
    }
    label, reason = _plan_bottleneck(breakdown, step, job, tl, u[slow], stages[slow].kt, lc)
    steps = [c["step"] for c in corners] + [step]
    ulist = [min(cu[0]) for cu in corner_u] + [max(cu[0]) for cu in corner_u] + [min(u), max(u)]
    notes = notes + ([] if window_s is None else
                     ["a parallel plan's utilization is the steady state (window_s is not applied to plans)"])
    plan["notes"] = notes
    return Estimate(
        step_time_s=step, gpu_busy_s=m * (tl.gpu_busy_s + pr["tp"] + pr["p2p"] + pr["cp"] + pr["ep"] + pr["dp"])
        + base["dp_step"]
        + base["opt_busy"], gpu_util_pct=100.0 * float(np.mean(u)), host_time_s=m * tl.host_time_s,
        memory=mem, bottleneck=label, bottleneck_reason=reason,
        step_time_interval=(min(steps), max(steps)),
        gpu_util_interval=(100.0 * min(ulist), 100.0 * max(ulist)),
        memory_interval=(int(mem.total_bytes * lo), int(mem.total_bytes * hi)),
        time_by_phase={}, time_by_category={}, costed_time_share=1.0, timeline=tl, kernel_times=prep.kt,
        surroundings=prep.surroundings, loader=lc, util_basis="steady-state",
        gpu_held_pct=100.0 * min(float(np.mean(h)), float(np.mean(u))),
        gpu_held_interval=(100.0 * min(min(ch[1]) for ch in corner_u), 100.0 * max(max(ch[1]) for ch in corner_u)),
        prepared=prep, plan=plan,
    )

def _plan_bottleneck(breakdown: dict, step: float, job, tl, util, kt, lc) -> tuple[str, str]:
    comm = (breakdown["tensor_parallel_comm_s"] + breakdown["pipeline_p2p_s"] + breakdown["data_parallel_comm_s"]
            + breakdown["expert_parallel_comm_s"])
    if comm > 0.3 * step:
        return "communication-bound", (f"{comm / step:.0%} of the step waits for collectives not hidden "
                                       f"behind compute")
    if breakdown["pipeline_bubble_s"] > 0.3 * step:
        return "pipeline-bound", f"the pipeline bubble is {breakdown['pipeline_bubble_s'] / step:.0%} of the step"
    return _bottleneck(job, tl, util, kt, lc)
