"""Expert parallelism in training (gpucast.estimate.parallel.experts) on real transformers MoE models
traced on the meta device: the routed experts found in each block, their weights and states placed
on Megatron-Core's expert mesh, the dispatch and combine all-to-alls, the errors. Expected values
come from the configs' own arithmetic and the closed forms the module cites, not from a run."""

from __future__ import annotations

import pytest

import gpucast
from gpucast.api import trace
from gpucast.estimate.comm import Group, Links, collective_time
from gpucast.estimate.parallel.experts import imbalance
from gpucast.hardware import get_gpu
from gpucast.job import Job, JobError
from gpucast.plan import parse_network

H, MOE_FFN, LAYERS, E, K, VOCAB = 1024, 256, 4, 16, 4, 1024
QWEN3_MOE = dict(model_type="qwen3_moe", hidden_size=H, intermediate_size=2048, moe_intermediate_size=MOE_FFN,
                 num_hidden_layers=LAYERS, num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                 num_experts=E, num_experts_per_tok=K, vocab_size=VOCAB, max_position_embeddings=4096)
DEEPSEEK_V3 = dict(model_type="deepseek_v3", hidden_size=H, intermediate_size=2048, moe_intermediate_size=MOE_FFN,
                   num_hidden_layers=LAYERS, first_k_dense_replace=1, num_attention_heads=16, num_key_value_heads=16,
                   n_routed_experts=E, n_shared_experts=1, num_experts_per_tok=K, n_group=4, topk_group=2,
                   q_lora_rank=256, kv_lora_rank=128, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64,
                   vocab_size=VOCAB, max_position_embeddings=4096)
ROUTED = E * 3 * H * MOE_FFN   # a layer's routed experts: gate, up and down projections of each
SEQ, MBS, ACCUM = 1024, 2, 2


def _job(cfg=QWEN3_MOE, gpus=8, **par):
    par = dict(dict(framework="megatron", sharding="zero1", grad_accum=ACCUM, gpus_per_node=8, network="ib-400/gpu"),
               **par)
    return Job.from_hf_config(cfg, batch_size=MBS, seq_len=SEQ, precision="bf16", optimizer="adamw", gpus=gpus,
                              parallel=par)


def _estimate(job):
    from gpucast.estimate.parallel import estimate_plan

    return estimate_plan(trace(job), job, get_gpu("h100"))


def test_the_layout_finds_each_blocks_routed_experts():
    lay = trace(_job()).layout
    assert (lay.experts, lay.experts_per_token) == (E, K)
    assert lay.block_expert_params == [ROUTED] * LAYERS == lay.block_expert_trainable
    # DeepSeek-V3's first layers are dense (first_k_dense_replace); its shared expert is not routed
    ds = trace(_job(DEEPSEEK_V3)).layout
    assert ds.block_expert_params == [0] + [ROUTED] * (LAYERS - 1) and ds.moe_blocks == [1, 2, 3]


def test_experts_spread_their_weights_and_keep_the_optimizers_shard():
    lay = trace(_job()).layout
    dense = sum(lay.block_params) - LAYERS * ROUTED   # attention, router, norms of the blocks (one stage holds all)
    one, eight = (gpucast.predict(_job(expert=e), "h100").plan["memory_per_stage_bytes"] for e in (1, 8))
    m1, m8 = (_estimate(_job(expert=e)).memory.breakdown for e in (1, 8))
    outer = sum(lay.outer_params[k] for k in ("pre", "post")) - lay.outer_params["shared"]
    # each rank keeps E/8 experts: the weights shrink as (rest + X/8) / (rest + X)
    rest = dense + outer
    assert m8["weights"] / m1["weights"] == pytest.approx((rest + LAYERS * ROUTED / 8) / (rest + LAYERS * ROUTED),
                                                          rel=1e-3)
    # the distributed optimizer shards the experts' state over the expert-data group (8 / 8 = 1 rank) and the
    # rest over all 8: (rest / 8 + X / 8 / 1) = (rest + X) / 8 either way
    assert m8["optimizer_state"] == pytest.approx(m1["optimizer_state"], rel=1e-3)
    assert eight[0] < one[0]


def test_the_dispatch_and_combine_all_to_alls_per_moe_layer():
    p = gpucast.predict(_job(expert=8), "h100").plan
    gpu = get_gpu("h100")
    links = Links.of(gpu, parse_network("ib-400/gpu"))
    # each rank's 2 x 1024 tokens, each to 4 experts, 1024 bf16 values: 4 all-to-alls a layer (two each way)
    a2a = collective_time("all-to-all", MBS * SEQ * K * H * 2, Group(8, 8), links)
    assert p["step_breakdown_s"]["expert_parallel_comm_s"] == pytest.approx(ACCUM * LAYERS * 4 * a2a, rel=1e-9)
    assert p["expert"] == 8 and p["expert_tensor"] == 1 and p["expert_data"] == 1
    assert gpucast.predict(_job(expert=1), "h100").plan["step_breakdown_s"]["expert_parallel_comm_s"] == 0
    # across two nodes the shares for the other node leave through the NICs: slower than inside one
    two = gpucast.predict(_job(gpus=16, expert=16), "h100").plan["step_breakdown_s"]["expert_parallel_comm_s"]
    assert two > p["step_breakdown_s"]["expert_parallel_comm_s"]


def test_a_moe_layer_under_expert_parallelism_skips_the_mlps_tensor_collectives():
    # tensor 2 with sequence parallelism: a dense layer makes 4 all-gathers and 4 reduce-scatters a
    # micro-batch, a MoE layer whose tokens go by all-to-all only its attention's 2 + 2
    tp_only = gpucast.predict(_job(tensor=2, expert=1), "h100").plan
    with_ep = gpucast.predict(_job(tensor=2, expert=4, expert_tensor=1), "h100").plan
    ratio = (with_ep["step_breakdown_s"]["tensor_parallel_comm_s"]
             / tp_only["step_breakdown_s"]["tensor_parallel_comm_s"])
    # one stage holds both ends: the embedding's and the head's one of each kind stay, (2 L + 2) / (4 L + 2)
    assert ratio == pytest.approx((2 * LAYERS + 2) / (4 * LAYERS + 2), rel=1e-9)


def test_the_busiest_expert_rank_under_uniform_routing():
    assert imbalance(E, K, 1e9, 1) == 1.0
    few, many = imbalance(E, K, 64, 8), imbalance(E, K, 65536, 8)
    assert few > many > 1.0 and many < 1.02   # the relative spread shrinks as 1 / sqrt(rows)


def test_mfu_counts_the_parameters_a_token_meets():
    p = gpucast.predict(_job(expert=8), "h100")
    t = trace(_job())
    active = t.parameters - LAYERS * ROUTED * (1 - K / E)
    per_token = 6 * active + 12 * LAYERS * H * SEQ
    assert p.plan["model_flops_per_step"] == pytest.approx(per_token * SEQ * MBS * ACCUM * 8, rel=1e-9)


@pytest.mark.parametrize("par, gpus, err, needle", [
    (dict(expert=3), 6, JobError, "must divide the 16 routed experts"),
    (dict(expert=4, expert_tensor=4), 8, JobError, "must divide the 8 GPUs of a pipeline stage"),
    (dict(expert=4, tensor=2, expert_tensor=2, pipeline=2), 8, JobError, "4 GPUs of a pipeline stage"),
])
def test_impossible_expert_plans_are_one_error_line(par, gpus, err, needle):
    with pytest.raises(err) as e:
        gpucast.predict(_job(gpus=gpus, **par), "h100")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_dense_model_has_no_experts_to_spread():
    dense = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=4, vocab_size=256)
    with pytest.raises(JobError, match="has no routed experts"):
        gpucast.predict(_job(dense, gpus=2, expert=2), "h100")


def test_expert_tensor_is_training_only():
    with pytest.raises(JobError, match="expert_tensor' applies to training"):
        Job.from_hf_config(QWEN3_MOE, mode="serve", batch_size=1, gpus=2, precision="bf16",
                           parallel=dict(tensor=2, expert=2, expert_tensor=1))


def _fp8_job():
    return _job(expert=8).with_(precision="fp8")


def test_fp8_recipes_run_the_experts_as_fp8_grouped_gemms():
    bf16 = [o for o in trace(_job(expert=8)).ops if o.op == "_grouped_mm"]
    fp8 = [o for o in trace(_fp8_job()).ops if o.op == "_scaled_grouped_mm"]
    # TE's GroupedLinear: the same GEMMs (2 forward, 4 backward a layer), FP8 operands, the same FLOPs
    assert len(fp8) == len(bf16) == 6 * LAYERS
    assert all(o.dtype == "float8_e4m3fn" for o in fp8)
    assert sum(o.flops for o in fp8) == sum(o.flops for o in bf16)


def test_deepep_sends_a_token_once_per_node_across_nodes():
    from gpucast.estimate.parallel.experts import nodes_reached

    # k experts drawn uniformly over N nodes reach N (1 - (1 - 1/N)^k) of them; DeepSeek's group-limited
    # routing (topk_group of n_group groups over the nodes) caps it
    assert nodes_reached(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))
    assert nodes_reached(8, 8, (8, 4)) == 4 and nodes_reached(1, 8) == pytest.approx(1.0)
    alltoall = gpucast.predict(_job(gpus=16, expert=16), "h100").plan["step_breakdown_s"]["expert_parallel_comm_s"]
    deepep = gpucast.predict(_job(gpus=16, expert=16, expert_dispatcher="deepep"), "h100").plan
    # two nodes: a token's 4 experts reach 2 (1 - 1/2^4) = 1.875 nodes, 0.94 of them remote, where the
    # all-to-all sends 4 x 8/16 = 2 copies off the node: DeepEP moves 0.47 of the bytes across the NICs
    ratio = deepep["step_breakdown_s"]["expert_parallel_comm_s"] / alltoall
    assert 0.4 < ratio < 0.55
    # inside one node there is nothing to deduplicate
    one = [gpucast.predict(_job(expert=8, **kw), "h100").plan["step_breakdown_s"]["expert_parallel_comm_s"]
           for kw in ({}, {"expert_dispatcher": "deepep"})]
    assert one[0] == one[1]


def test_a_rank_reads_only_its_own_experts_weights():
    # the grouped GEMMs' time per rank does not carry the other ranks' experts: with tokens few enough
    # to leave the GEMMs memory-bound, 8-way expert parallelism cuts a rank's expert GEMM time
    from gpucast.estimate.parallel import estimate_plan

    small = dict(QWEN3_MOE, num_experts=64)
    jobs = [Job.from_hf_config(small, batch_size=1, seq_len=64, precision="bf16", optimizer="adamw", gpus=8,
                               parallel=dict(framework="megatron", sharding="zero1", expert=e)) for e in (1, 8)]
    busy = [estimate_plan(trace(j), j, get_gpu("h100")).timeline.gpu_busy_s for j in jobs]
    assert busy[1] < busy[0]


def test_overlapped_all_to_alls_leave_the_first_exposed():
    from gpucast.estimate.parallel.experts import overlapped_s

    assert overlapped_s(8.0, 100.0, 16) == 0.5            # all but the first hide
    assert overlapped_s(8.0, 2.0, 16) == pytest.approx(0.5 + 7.5 - 2.0)
    off, on = (gpucast.predict(_job(gpus=16, expert=16, **kw), "h100").plan["step_breakdown_s"]
               for kw in ({}, {"ep_overlap": True}))
    assert on["expert_parallel_comm_s"] < off["expert_parallel_comm_s"]
    assert on["expert_parallel_comm_s"] >= off["expert_parallel_comm_s"] / (4 * LAYERS) * 0.999
    p = gpucast.predict(_job(expert=1, ep_overlap=True), "h100")
    assert any("ep_overlap has no expert-parallel" in n for n in p.notes)
