"""The parallel-plan model against closed forms that hold independently of gpucast's code.

* Model states per ZeRO stage: the ZeRO paper's bytes per parameter (Rajbhandari et al. 2020, sec.
  3.1: ``(2 + 2 + 12) Psi`` for mixed-precision Adam; stage 1 ``4 Psi + 12 Psi / N``, stage 2
  ``2 Psi + 14 Psi / N``, stage 3 ``16 Psi / N``), with ``Psi`` counted by building the Hugging Face
  model on the meta device (not from the trace).
* Activations per layer: Korthikanti et al. 2022: ``sbh(10 + 24/t)`` bytes per layer in half
  precision with the attention core not stored (selective recomputation, or FlashAttention, whose
  fused kernel stores no ``s x s`` tensor: the ``5as/h`` term is absent either way), ``2sbh`` with
  full recomputation.
* Sequence parallelism (their sec. 4.2.2, eq. 4): ``34 sbh / t`` per layer with the attention core
  not stored; its collectives: an all-reduce's bytes as a reduce-scatter and an all-gather, twice the
  calls.
* The 1F1B bubble ``(p-1)/(m+p-1)`` (Narayanan et al. 2021).
* Tensor and pipeline splits conserve the split work: the ranks' FLOPs of split ops add up to the
  replica's.

Small models keep the captures to a few seconds (the trace does not depend on the plan, so each
model is captured once and shared).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpucast.api import predict, trace
from gpucast.estimate.parallel.activations import per_block
from gpucast.estimate.parallel.ranks import OpLayout, stage_blocks, stage_of_ops
from gpucast.job import Job, JobError

# A 1.1B-parameter Llama (TinyLlama-1.1B's shape).
LLAMA_1B = dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
SMALL = dict(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
             num_attention_heads=8, num_key_value_heads=8, vocab_size=1000)
GPT = dict(model_type="gpt2", n_embd=1024, n_head=16, n_layer=4, vocab_size=1000, n_positions=512,
           activation_function="gelu", bos_token_id=0, eos_token_id=0)


def _job(cfg, gpus=1, parallel=None, batch=1, seq=512, precision="bf16", **kw):
    return Job.from_hf_config(cfg, batch_size=batch, seq_len=seq, precision=precision, optimizer="adamw",
                              gpus=gpus, parallel=parallel, **kw)


def _psi(cfg) -> int:
    """Parameters of the architecture, counted on a model built apart from gpucast's capture."""
    import torch
    import transformers

    conf = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("sharding,closed_form", [
    ("zero1", lambda psi, n: 4 * psi + 12 * psi / n),
    ("zero2", lambda psi, n: 2 * psi + 14 * psi / n),
    ("zero3", lambda psi, n: 16 * psi / n),
    ("fsdp-full", lambda psi, n: 16 * psi / n),
    ("ddp", lambda psi, n: 16 * psi),
])
def test_model_states_per_sharding_stage_match_the_zero_paper(sharding, closed_form):
    psi = _psi(LLAMA_1B)
    n = 8
    precision = "amp-bf16" if sharding == "ddp" else "bf16"
    p = predict(_job(LLAMA_1B, gpus=n, parallel={"sharding": sharding}, precision=precision), "h100")
    from gpucast.api import explain

    mem = explain(_job(LLAMA_1B, gpus=n, parallel={"sharding": sharding}, precision=precision), "h100").estimate.memory
    states = mem.breakdown["weights"] + mem.breakdown["gradients"] + mem.breakdown["optimizer_state"]
    assert states == pytest.approx(closed_form(psi, n), rel=0.02)
    assert p.memory_peak_bytes > states  # activations, buffers and the context come on top


def test_a_tied_embedding_is_held_once_by_one_stage_and_by_both_ends_of_a_pipeline():
    from gpucast.api import explain

    psi = _psi(GPT)
    lay = trace(_job(GPT)).layout
    tied = lay.outer_params["shared"]
    assert tied == 1000 * 1024  # the token embedding, used again by the head

    def states(parallel, gpus):
        b = explain(_job(GPT, gpus=gpus, parallel=parallel), "h100").estimate.memory.breakdown
        return b["weights"] + b["gradients"] + b["optimizer_state"]

    assert states({"sharding": "zero3"}, 8) == pytest.approx(16 * psi / 8, rel=1e-6)
    two = explain(_job(GPT, gpus=2, parallel={"pipeline": 2}), "h100").prediction.plan
    assert two["layers_per_stage"] == [2, 2]
    # Each end keeps a copy of the tied embedding (Megatron-LM's shared_embedding).
    assert states({"pipeline": 2}, 2) > states({"sharding": "ddp"}, 1) / 2


def test_activations_per_layer_match_korthikanti():
    tr = trace(_job(GPT, batch=4, seq=512, precision="fp16"))
    s, b, h = 512, 4, 1024
    lay = tr.layout
    assert lay.blocks == 4 and lay.hidden == h and lay.tokens == s
    for t in (1, 2, 4):
        assert per_block(lay, t, "selective") == pytest.approx(s * b * h * (10 + 24 / t), rel=0.10)
    assert per_block(lay, 1, "full") == 2 * s * b * h
    # Tensor parallelism shrinks only the split part: the replicated 10 sbh stay.
    replicated = per_block(lay, 4, "selective") - (per_block(lay, 1, "selective") - per_block(lay, 4, "selective")) / 3
    assert replicated == pytest.approx(10 * s * b * h, rel=0.10)


def test_sequence_parallel_activations_per_layer_match_korthikanti_eq_4():
    tr = trace(_job(GPT, batch=4, seq=512, precision="fp16"))
    s, b, h = 512, 4, 1024
    lay = tr.layout
    for t in (2, 4):
        assert per_block(lay, t, "selective", sequence=True) == pytest.approx(s * b * h * 34 / t, rel=0.10)
        assert per_block(lay, t, "full", sequence=True) == 2 * s * b * h / t
    assert per_block(lay, 1, "selective", sequence=True) == per_block(lay, 1, "selective")


def test_sequence_parallelism_is_megatron_s_default_and_splits_the_replicated_work():
    t, m = 4, 2
    par = {"tensor": t, "grad_accum": m}
    on = predict(_job(SMALL, gpus=t, parallel=par, batch=8, seq=2048), "h100")
    off = predict(_job(SMALL, gpus=t, parallel=dict(par, sequence=False), batch=8, seq=2048), "h100")
    ddp_like = predict(_job(SMALL, gpus=t, parallel=dict(par, framework="torch"), batch=8, seq=2048), "h100")
    assert on.plan["sequence"] is True and off.plan["sequence"] is False and ddp_like.plan["sequence"] is False
    assert on.memory_peak_bytes < off.memory_peak_bytes
    a, b = on.plan["step_breakdown_s"], off.plan["step_breakdown_s"]
    assert a["compute_s"] < b["compute_s"]          # norms, adds and dropouts on a t-th of the tokens
    # A ring all-reduce moves what a reduce-scatter and an all-gather of the same buffer move (Patarasuk
    # and Yuan 2009): the bandwidth part is the same, the calls double, and the last stage adds the
    # output layer's pair (and the first its embedding's reduce-scatter's conjugate).
    layers = SMALL["num_hidden_layers"]
    assert off.plan["comm_calls"] == m * (4 * layers + 1)
    assert on.plan["comm_calls"] == m * 2 * (4 * layers + 2)


def test_overlapped_tensor_parallel_collectives_expose_their_first_chunk():
    # The collective-matmul decomposition (Wang et al. 2022): t chunks, the first cannot hide, the rest
    # hides behind the GEMMs while they last.
    from gpucast.estimate.parallel.sequence import overlapped_s

    assert overlapped_s(1.0, 10.0, 4) == pytest.approx(0.25)
    assert overlapped_s(1.0, 0.5, 4) == pytest.approx(0.25 + 0.25)
    assert overlapped_s(1.0, 0.0, 2) == pytest.approx(1.0)
    par = {"tensor": 4, "grad_accum": 2}
    plain = predict(_job(SMALL, gpus=4, parallel=dict(par, tp_overlap=False), batch=8, seq=2048), "h100").plan
    lapped = predict(_job(SMALL, gpus=4, parallel=dict(par, tp_overlap=True), batch=8, seq=2048), "h100").plan
    assert lapped["tp_overlap"] is True and plain["tp_overlap"] is False
    a, b = plain["step_breakdown_s"]["tensor_parallel_comm_s"], lapped["step_breakdown_s"]["tensor_parallel_comm_s"]
    assert a / 4 <= b < a


def test_tp_overlap_defaults_to_the_recipes_on_hopper_under_megatron():
    # NeMo's and Megatron-Bridge's performance recipes overlap every TP > 1 plan on H100/B200 with
    # userbuffers (sequence.py's docstring); Megatron-LM's own default, and the A100, stay off.
    def plan(gpu, **par):
        return predict(_job(SMALL, gpus=2, parallel=dict({"tensor": 2}, **par), batch=4, seq=1024), gpu).plan

    assert plan("h100")["tp_overlap"] is True
    assert plan("a100-80gb")["tp_overlap"] is False
    assert plan("h100", sequence=False)["tp_overlap"] is False   # nothing chunked to overlap
    assert plan("h100", tp_overlap=False)["tp_overlap"] is False


def test_tp_overlap_needs_sequence_parallelism():
    with pytest.raises(JobError, match="tp_overlap.*needs parallel.sequence"):
        predict(_job(SMALL, gpus=2, parallel={"tensor": 2, "tp_overlap": True, "sequence": False}), "h100")
    with pytest.raises(JobError, match="tp_overlap.*needs parallel.sequence"):
        predict(_job(SMALL, gpus=2, parallel={"tensor": 2, "tp_overlap": True, "framework": "torch"}), "h100")
    alone = predict(_job(SMALL, gpus=2, parallel={"tp_overlap": True}), "h100").plan
    assert any("tp_overlap has no tensor-parallel collectives" in n for n in alone["notes"])


def test_sequence_parallelism_without_tensor_parallelism_is_off_with_a_note():
    p = predict(_job(SMALL, gpus=2, parallel={"sequence": True}), "h100")
    assert p.plan["sequence"] is False
    assert any("parallel.sequence needs tensor parallelism" in n for n in p.plan["notes"])

    p, m = 4, 8
    pred = predict(_job(SMALL, gpus=p, parallel={"pipeline": p, "grad_accum": m}), "h100")
    pl = pred.plan
    assert pl["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1))
    bd = pl["step_breakdown_s"]
    pipeline_part = pred.step_time_s - bd["optimizer_s"] - bd["data_parallel_comm_s"]
    assert bd["pipeline_bubble_s"] == pytest.approx(pipeline_part * (p - 1) / (m + p - 1), rel=1e-9)
    assert pl["layers_per_stage"] == [2, 2, 2, 2]


def test_interleaved_stages_shrink_the_bubble_and_multiply_the_sends():
    # Narayanan et al. 2021, sec. 2.2: v chunks per rank cut the bubble to (p-1)/v micro-batch slots
    # and send each micro-batch across v times as many stage boundaries.
    p, m, v = 4, 8, 2
    plain = predict(_job(SMALL, gpus=p, parallel={"pipeline": p, "grad_accum": m}), "h100").plan
    inter = predict(_job(SMALL, gpus=p, parallel={"pipeline": p, "grad_accum": m, "virtual_pipeline": v,
                                                  "pp_overlap": False}), "h100").plan
    assert inter["virtual_pipeline"] == v and plain["virtual_pipeline"] == 1
    assert inter["bubble_fraction"] == pytest.approx(((p - 1) / v) / (m + (p - 1) / v))
    a, b = plain["step_breakdown_s"], inter["step_breakdown_s"]
    assert b["pipeline_p2p_s"] == pytest.approx(v * a["pipeline_p2p_s"], rel=1e-9)
    slot = (a["pipeline_bubble_s"] / (p - 1))  # one micro-batch slot of the slowest stage, without interleaving
    slot_v = b["pipeline_bubble_s"] / ((p - 1) / v)
    assert slot_v > slot                       # the same slot plus its extra sends
    assert inter["memory_per_stage_bytes"][0] > plain["memory_per_stage_bytes"][0]   # more micro-batches in flight
    # Megatron-Bridge overlaps the interleaved schedule's sends with compute (overlap_p2p_comm = vp > 1): by
    # default the first of a micro-batch's 2v sends stays exposed, the rest hide behind its compute
    hidden = predict(_job(SMALL, gpus=p, parallel={"pipeline": p, "grad_accum": m, "virtual_pipeline": v}), "h100").plan
    assert hidden["pp_overlap"] is True and inter["pp_overlap"] is False and plain["pp_overlap"] is False
    exposed = hidden["step_breakdown_s"]["pipeline_p2p_s"]
    assert b["pipeline_p2p_s"] / (2 * v) <= exposed * (1 + 1e-9) and exposed < b["pipeline_p2p_s"]


def test_interleaved_in_flight_micro_batches_follow_megatron_s_warm_up():
    from gpucast.estimate.parallel.activations import stage_activations

    lay = trace(_job(SMALL)).layout
    p, v = 4, 2
    first = stage_activations(lay, 2, 0, p, 64, 1, "none", v)
    assert first.in_flight == pytest.approx(p * (1 + (p - 1) / (p * v)))   # Korthikanti et al. 2022, 4.2.3
    last = stage_activations(lay, 2, p - 1, p, 64, 1, "none", v)
    assert last.in_flight == pytest.approx(((v - 1) * p + 1) / v)
    assert stage_activations(lay, 2, 0, p, 1, 1, "none", v).in_flight == 1      # never more than m
    assert stage_activations(lay, 2, 0, p, 64, 1, "none").in_flight == p        # plain 1F1B


def test_the_head_is_held_for_one_micro_batch_and_the_embeddings_split_under_sequence_parallelism():
    # the last rank runs each micro-batch's backward right after its forward through the head (1F1B, and
    # the interleaved schedule's steady state), so the logits and the loss's saved tensors count once
    # whatever the micro-batches in flight; the embeddings' output is scattered over the tensor ranks
    from gpucast.estimate.parallel.activations import per_block, stage_activations

    lay = trace(_job(SMALL)).layout
    post, pre = lay.activations.get("post", 0), lay.activations.get("pre", 0)
    assert post > 0 and pre > 0
    p, t = 4, 2
    for v in (1, 2):
        last = stage_activations(lay, 2, p - 1, p, 64, t, "none", v, sequence=True)
        blocks = 2 * per_block(lay, t, "none", True)
        assert last.total == pytest.approx(blocks * last.in_flight + post / t)
    first = stage_activations(lay, 2, 0, p, 64, t, "none", 2, sequence=True)
    plain = stage_activations(lay, 2, 0, p, 64, t, "none", 2, sequence=False)
    assert first.per_micro_batch == pytest.approx(2 * per_block(lay, t, "none", True) + pre / t)
    assert plain.per_micro_batch == pytest.approx(2 * per_block(lay, t, "none", False) + pre)


@pytest.mark.parametrize("parallel,message", [
    ({"virtual_pipeline": 2}, "needs parallel.pipeline > 1"),
    ({"pipeline": 2, "virtual_pipeline": 3}, "do not split into 2 x 3 equal chunks"),
])
def test_an_impossible_interleaving_is_one_clear_error(parallel, message):
    from gpucast.job import JobError
    from gpucast.surroundings import SpecError

    with pytest.raises((SpecError, JobError), match=message):
        predict(_job(SMALL, gpus=2, parallel=parallel), "h100")


def test_tensor_and_pipeline_splits_conserve_the_split_flops():
    tr = trace(_job(SMALL))
    lay = OpLayout.of(tr)
    flops = np.array([o.flops for o in tr.ops], dtype=float)
    step = lay.phase < 3  # forward, loss, backward (the optimizer is costed per rank apart)
    for t, p in ((1, 4), (2, 2), (4, 1), (8, 8)):
        stage = stage_of_ops(lay, stage_blocks(tr.layout.blocks, p))
        per_rank = [flops[(stage == k) & lay.sharded].sum() / t for k in range(p)]
        assert sum(per_rank) * t == pytest.approx(flops[step & lay.sharded].sum(), rel=1e-12)
        whole = [flops[stage == k].sum() for k in range(p)]  # without the tensor split, every op once
        assert sum(whole) == pytest.approx(flops[step].sum(), rel=1e-12)
    assert flops[step & lay.sharded].sum() > 0.9 * flops[step].sum()  # the matmuls are split


def test_hardware_flops_of_a_plan_are_the_replicas_times_its_copies():
    tr = trace(_job(SMALL))
    fwd_bwd = sum(o.flops for o in tr.ops if o.phase != "optim")
    pred = predict(_job(SMALL, gpus=8, parallel={"pipeline": 2, "grad_accum": 3}), "h100")
    assert pred.plan["hardware_flops_per_step"] == pytest.approx(fwd_bwd * 4 * 3, rel=1e-9)  # d = 4, m = 3
    full = predict(_job(SMALL, gpus=8, parallel={"pipeline": 2, "grad_accum": 3, "recompute": "full"}), "h100")
    assert full.plan["hardware_flops_per_step"] > pred.plan["hardware_flops_per_step"]
    assert full.plan["model_flops_per_step"] == pred.plan["model_flops_per_step"]  # MFU counts the model's work
    assert full.plan["hfu"] > full.plan["mfu"]


def test_a_slow_network_makes_the_multi_node_plan_slower():
    par = {"sharding": "fsdp-full", "network": "eth-100"}
    one = predict(_job(LLAMA_1B, gpus=8, parallel={**par, "gpus_per_node": 8}), "a100-80gb")
    two = predict(_job(LLAMA_1B, gpus=8, parallel={**par, "gpus_per_node": 4}), "a100-80gb")
    assert one.plan["nodes"] == 1 and two.plan["nodes"] == 2
    assert two.step_time_s > one.step_time_s
    assert two.plan["step_breakdown_s"]["data_parallel_comm_s"] > one.plan["step_breakdown_s"]["data_parallel_comm_s"]


def test_recompute_trades_memory_for_time_and_accumulation_scales_the_step():
    base = predict(_job(LLAMA_1B, gpus=8, parallel={"sharding": "fsdp-full"}, batch=4), "h100")
    full = predict(_job(LLAMA_1B, gpus=8, parallel={"sharding": "fsdp-full", "recompute": "full"}, batch=4), "h100")
    sel = predict(_job(LLAMA_1B, gpus=8, parallel={"sharding": "fsdp-full", "recompute": "selective"}, batch=4), "h100")
    assert full.memory_peak_bytes < sel.memory_peak_bytes <= base.memory_peak_bytes
    assert full.step_time_s > sel.step_time_s >= base.step_time_s
    acc = predict(_job(LLAMA_1B, gpus=8, parallel={"sharding": "fsdp-full", "grad_accum": 4}, batch=4), "h100")
    assert 3.5 * base.step_time_s < acc.step_time_s < 4.0 * base.step_time_s  # the optimizer runs once
    assert acc.plan["global_batch"] == 4 * base.plan["global_batch"]


def test_sharding_more_ways_needs_less_memory_per_gpu():
    mems = [predict(_job(LLAMA_1B, gpus=g, parallel={"sharding": "fsdp-full"}), "h100").memory_peak_bytes
            for g in (8, 32, 128)]
    assert mems[0] > mems[1] > mems[2]


def test_llama_3_8b_fits_where_practitioners_run_it():
    cfg = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192)
    one = predict(_job(cfg, seq=4096, precision="amp-bf16"), "h100")
    fsdp = predict(_job(cfg, seq=4096, gpus=8, parallel={"sharding": "fsdp-full"}), "h100")
    lora = predict(_job(cfg, seq=4096, precision="amp-bf16", adapter={"kind": "lora"}), "h100")
    qlora = predict(_job(cfg, seq=4096, precision="amp-bf16", adapter={"kind": "qlora"},
                         parallel={"recompute": "full"}), "rtx-4090")
    assert not one.fits_in_memory
    assert fsdp.fits_in_memory and lora.fits_in_memory and qlora.fits_in_memory


@pytest.mark.parametrize("parallel,gpus,message", [
    ({"tensor": 3}, 3, "must divide the 8 attention heads"),
    ({"pipeline": 16}, 16, "more stages than the 8 layers"),
    ({"tensor": 4}, 6, "must be a multiple of parallel.tensor x parallel.pipeline"),
    ({"pipeline": 2, "sharding": "zero3"}, 4, "pipeline parallelism"),
    ({"gpus_per_node": 73}, 2, "between 1 and 72"),
])
def test_impossible_plans_are_one_line_errors(parallel, gpus, message):
    with pytest.raises(JobError) as err:
        predict(_job(SMALL, gpus=gpus, parallel=parallel), "h100")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_model_without_repeated_blocks_refuses_tensor_parallelism():
    with pytest.raises(JobError, match="no repeated blocks"):
        predict(Job(model="mlp-small", gpus=2, parallel={"tensor": 2}), "h100")


def test_sharding_a_model_without_blocks_still_answers():
    p = predict(Job(model="resnet50", batch_size=32, gpus=8, precision="amp-bf16",
                    parallel={"sharding": "zero2"}), "a100-80gb")
    assert p.plan["data"] == 8 and p.fits_in_memory and p.step_time_s > 0


def test_the_plan_counts_each_collective_calls_fixed_costs():
    # FSDP FULL_SHARD gathers each unit (a block) in the forward and again in the backward, and
    # reduce-scatters its gradients once (PyTorch FSDP's docs): 3 calls per unit per micro-batch,
    # each paying NCCL's base latency and its ring's steps over the 16 ranks of 2 nodes.
    from gpucast.estimate.comm import Group, Links, call_latency
    from gpucast.hardware import get_gpu
    from gpucast.plan import parse_network

    m, units = 2, SMALL["num_hidden_layers"]
    par = {"sharding": "fsdp-full", "grad_accum": m, "gpus_per_node": 8, "network": "ib-200/gpu"}
    pl = predict(_job(SMALL, gpus=16, parallel=par), "h100").plan
    links = Links.of(get_gpu("h100"), parse_network("ib-200/gpu", 8))
    group = Group(16, 8)
    one = call_latency("all-gather", group, links) * 2 + call_latency("reduce-scatter", group, links)
    assert pl["comm_calls"] == m * 3 * units
    assert pl["comm_fixed_s"] == pytest.approx(m * units * one, rel=1e-9)
    # one GPU: no collective, nothing fixed
    alone = predict(_job(SMALL, gpus=1, parallel={"grad_accum": m}), "h100").plan
    assert alone["comm_fixed_s"] == 0.0 and alone["comm_calls"] == 0


def test_the_distributed_optimizers_collectives_hide_behind_the_layers_a_chunk_at_a_time():
    from gpucast.estimate.parallel.overlaps import dp_chunks, dp_exposed_s

    # Megatron-Bridge: "exposes only one DP communication chunk" (a layer; a virtual stage under PP)
    assert dp_exposed_s(1.0, 8, 10.0) == pytest.approx(1 / 8) and dp_exposed_s(1.0, 8, 0.5) == pytest.approx(0.5)
    assert dp_chunks(32, 1, 1) == 32 and dp_chunks(32, 4, 2) == 4
    par = {"sharding": "zero1", "framework": "megatron", "grad_accum": 2}
    on = predict(_job(SMALL, gpus=8, parallel=par), "h100").plan
    off = predict(_job(SMALL, gpus=8, parallel=dict(par, dp_overlap=False)), "h100").plan
    assert on["dp_overlap"] is True and off["dp_overlap"] is False
    assert on["step_breakdown_s"]["data_parallel_comm_s"] < off["step_breakdown_s"]["data_parallel_comm_s"]
    # DDP keeps its own bucketed all-reduce model
    assert predict(_job(SMALL, gpus=8, parallel={"grad_accum": 2}), "h100").plan["dp_overlap"] is False


def test_megatron_s_flat_parameter_and_gradient_buffer_is_not_fragmented():
    # Megatron-Core's ParamAndGradBuffer holds a rank's weights and gradients in one flat tensor each
    # (parallel/memory.py's docstring): the allocator's per-tensor overhead applies to the rest only.
    from gpucast.estimate.parallel.activations import StageActivations
    from gpucast.estimate.parallel.constants import DEFAULT_PARALLEL
    from gpucast.estimate.parallel.memory import RankParams, rank_memory
    from gpucast.estimate.parallel.sharding import STRATEGIES, ModelStates
    from gpucast.graph.memory import FRAGMENTATION

    states = ModelStates(weights=10e9, gradients=10e9, optimizer=30e9)
    acts = StageActivations(per_micro_batch=1e9, in_flight=4, working=0.5e9)
    rp = RankParams(params=5e9, trainable=5e9, frozen_bytes=0.0, largest_block=1e8, largest_block_trainable=1e8)
    args = (states, acts, rp, STRATEGIES["zero1"], 2.0, 2.0, 2, 0, 0, DEFAULT_PARALLEL)
    loose, flat = rank_memory(*args), rank_memory(*args, contiguous=True)
    # its collectives run in place on those buffers: no DeepSpeed-style buckets (2 x 5e8 elements x 2 bytes
    # here), NCCL's own buffers per communicator only
    assert loose.breakdown["communication_buffers"] == 2 * 500_000_000 * 2.0 + 2 * DEFAULT_PARALLEL.nccl_buffer_bytes
    assert flat.breakdown["communication_buffers"] == 2 * DEFAULT_PARALLEL.nccl_buffer_bytes
    buckets = 2e9
    saved = loose.breakdown["allocator_overhead"] - flat.breakdown["allocator_overhead"]
    assert saved == pytest.approx(FRAGMENTATION * (20e9 + buckets), rel=1e-6)
    assert loose.total_bytes - flat.total_bytes == pytest.approx(saved + buckets, abs=2)
