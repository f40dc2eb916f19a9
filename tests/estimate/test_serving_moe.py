"""Mixture-of-experts deployments as 2026 engines serve them: attention data parallelism
(``parallel.attention_dp``), Llama-4's experts traced as routed, GPT-OSS's MXFP4 experts and sink attention.

Expected values come from closed forms stated per test (a Mixtral layer's expert parameters, one token's
K/V bytes, a routed GEMM's FLOPs), or from identities that hold whatever the constants (attention DP on a
dense model is data parallelism), not from the code's own output. Real Hugging Face model definitions,
built on the meta device."""

from __future__ import annotations

import pytest
from transformers import Llama4TextConfig, LlamaConfig, MixtralConfig

import gpucast
from gpucast.graph.serving import trace_iteration
from gpucast.job import Job, JobError

H, FFN, LAYERS, E, K = 512, 1024, 2, 8, 2
MOE = MixtralConfig(hidden_size=H, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=8,
                    num_key_value_heads=2, num_local_experts=E, num_experts_per_tok=K, vocab_size=1024,
                    max_position_embeddings=4096).to_dict()
DENSE = LlamaConfig(hidden_size=H, intermediate_size=FFN, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=4, vocab_size=2048, max_position_embeddings=4096).to_dict()
EXPERT_PARAMS = LAYERS * E * 3 * H * FFN   # Mixtral's experts: gate, up and down projections of each


def _serve(cfg, gpus=1, parallel=None, batch=64, **serve):
    return Job.from_hf_config(cfg, batch_size=batch, precision="bf16", mode="serve", gpus=gpus, parallel=parallel,
                              serve=dict(dict(input_len=128, output_len=32, engine="vllm", engine_version="0.11"),
                                         **serve))   # 0.11: a synchronous scheduler (this tiny model's steps would
                                                     # hide behind 0.14's host work, and their GPU effects with them)


def test_each_rank_keeps_every_weight_but_a_share_of_the_experts():
    one = gpucast.predict(_serve(MOE), "h100").serving["memory"]["weights_bytes"]
    tp = gpucast.predict(_serve(MOE, gpus=4, parallel=dict(tensor=4, expert=4)), "h100").serving
    dp = gpucast.predict(_serve(MOE, gpus=4, parallel=dict(tensor=4, expert=4, attention_dp=True)),
                         "h100").serving
    # bf16: two bytes a weight; the routed experts a quarter on each rank, everything else whole
    assert dp["memory"]["weights_bytes"] == pytest.approx(one - 2 * EXPERT_PARAMS * 3 / 4, rel=1e-3)
    assert tp["memory"]["weights_bytes"] == pytest.approx(one / 4, rel=1e-3)
    assert dp["attention_dp"] is True and tp["attention_dp"] is False


def test_each_rank_caches_whole_heads_of_its_own_requests():
    one = gpucast.predict(_serve(MOE), "h100").serving["memory"]["kv_bytes_per_token"]
    tp = gpucast.predict(_serve(MOE, gpus=2, parallel=dict(tensor=2)), "h100").serving
    dp = gpucast.predict(_serve(MOE, gpus=2, parallel=dict(tensor=2, expert=2, attention_dp=True)),
                         "h100").serving
    # 2 layers x 2 KV heads x 64 dims x K and V x 2 bytes; tensor parallelism splits the heads, DP does not
    assert one == LAYERS * 2 * 64 * 2 * 2
    assert dp["memory"]["kv_bytes_per_token"] == one
    assert tp["memory"]["kv_bytes_per_token"] == one // 2


def test_attention_dp_of_a_dense_model_is_data_parallelism():
    # no experts: nothing crosses the ranks, each a scheduler with its own cache, as two replicas are
    dp = gpucast.predict(_serve(DENSE, gpus=2, parallel=dict(tensor=2, attention_dp=True), concurrency=16,
                                num_requests=64), "a100-80gb").serving
    rep = gpucast.predict(_serve(DENSE, gpus=2, concurrency=16, num_requests=64), "a100-80gb").serving
    for key in ("output_tokens_per_s", "ttft_s", "tpot_s", "kv_cache_tokens"):
        assert dp[key] == pytest.approx(rep[key], rel=1e-6), key


def test_the_moe_layer_takes_every_ranks_tokens():
    from gpucast.estimate.serving.engines import resolve
    from gpucast.estimate.serving.iteration import IterationModel
    from gpucast.hardware import get_gpu
    from gpucast.estimate import EstimatorConfig
    from gpucast.estimate.environment import Environment

    job, gpu, env = _serve(MOE), get_gpu("h100"), Environment()
    engine = resolve(job.serve, env)

    def experts_flops(**kw):
        m = IterationModel(job, gpu, engine, env, EstimatorConfig(), **kw)
        tr, _ = m._times(m._trace(1, 2048, 0))
        div = m._split(tr)
        return sum(o.flops / (div[i] if div is not None else 1) for i, o in enumerate(tr.ops)
                   if o.op == "_grouped_mm")
    alone = experts_flops()
    dp = experts_flops(tensor=4, expert=4, attention_dp=True)
    # balanced routing: 4 ranks x 2,048 tokens x 2 experts over 4 ranks = one rank's 2,048 x 2 rows, at
    # full width; the busiest rank a little more (the expected largest of four binomial counts)
    assert alone < dp < 1.05 * alone


def test_attention_dp_is_refused_where_it_means_nothing():
    with pytest.raises(JobError, match="attention_dp.*mode 'serve'"):
        Job.from_hf_config(MOE, batch_size=8, mode="train", gpus=2, parallel=dict(tensor=2, attention_dp=True))
    with pytest.raises(JobError, match="attention_dp"):
        gpucast.predict(_serve(MOE, gpus=2, parallel=dict(tensor=2, attention_dp=True), engine="hf", engine_version=None),
                        "h100")


LLAMA4 = Llama4TextConfig(hidden_size=H, intermediate_size=FFN, intermediate_size_mlp=2 * FFN, num_hidden_layers=2,
                          num_attention_heads=8, num_key_value_heads=2, head_dim=64, num_local_experts=4,
                          num_experts_per_tok=1, vocab_size=1024, max_position_embeddings=4096).to_dict()


def test_llama4_experts_are_traced_as_the_engines_route_them():
    job = Job.from_hf_config(LLAMA4, batch_size=1, mode="infer", precision="bf16")
    n = 96
    tr = trace_iteration(job, 1, n, 0, "paged")
    grouped = [o for o in tr.ops if o.op == "_grouped_mm"]
    assert not [o for o in tr.ops if o.op == "bmm" and o.shapes[0][0] == 4]   # no GEMM over every expert
    assert len(grouped) == 2 * 2                                            # up and down, each MoE layer
    assert all(o.shapes[0][0] == n * 1 for o in grouped)                     # n tokens x top-1 rows
    # per layer: 2 n k (H x 2I) for gate and up, 2 n k (I x H) for down
    assert sum(o.flops for o in grouped) == 2 * (2 * n * H * 2 * FFN + 2 * n * FFN * H)


def test_mxfp4_keeps_the_experts_in_4_25_bits_and_the_rest_in_16():
    one = gpucast.predict(_serve(MOE), "h100").serving
    mx = gpucast.predict(_serve(MOE, weights="mxfp4"), "h100").serving
    # OCP MXFP4: 4 bits a weight plus an 8-bit scale per 32, 4.25 / 16 of a bf16 expert weight's bytes
    saved = 2 * EXPERT_PARAMS * (1 - 4.25 / 16)
    assert mx["memory"]["weights_bytes"] == pytest.approx(one["memory"]["weights_bytes"] - saved, rel=1e-3)
    assert mx["tpot_s"] < one["tpot_s"]   # decode reads the experts' weights: fewer bytes, a faster step
    with pytest.raises(JobError, match="mxfp4.*no experts"):
        gpucast.predict(_serve(DENSE, weights="mxfp4"), "h100")


GPT_OSS = dict(model_type="gpt_oss", hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=8,
               num_key_value_heads=2, head_dim=32, num_local_experts=4, num_experts_per_tok=2, vocab_size=1024,
               max_position_embeddings=4096, sliding_window=128, layer_types=["sliding_attention", "full_attention"])


def test_attention_with_sinks_is_traced_as_the_engines_fused_attention():
    # transformers runs GPT-OSS's sink attention eagerly (matmuls and a softmax); engines fuse it, so the
    # serving trace has one attention kernel per layer, whose cost grows with the context it reads
    job = Job.from_hf_config(GPT_OSS, batch_size=1, mode="infer", precision="bf16")
    tr = trace_iteration(job, 4, 1, 512, "paged")
    attn = [o for o in tr.ops if o.category == "attention"]
    assert len(attn) == 2 and not [o for o in tr.ops if o.op == "bmm"]
    served = _serve(GPT_OSS, batch=4, input_len=256, output_len=8)
    longer = _serve(GPT_OSS, batch=4, input_len=2048, output_len=8)
    assert gpucast.predict(longer, "h100").serving["tpot_s"] > gpucast.predict(served, "h100").serving["tpot_s"]


def test_a_window_keeps_the_pairs_within_it():
    from gpucast.graph.windows import chunk_share

    assert chunk_share(128, 1000, 1) == pytest.approx(128 / 1001)          # a decode reads its window
    assert chunk_share(128, 10, 1) == 1.0                                    # inside the window: all of it
    # a 4-token chunk over 126 cached: queries see 127, 128, 128, 128 keys of 127..130
    assert chunk_share(128, 126, 4) == pytest.approx((127 + 128 * 3) / (127 + 128 + 129 + 130))


def test_sliding_layers_decode_over_their_window_only():
    from gpucast.estimate import EstimatorConfig
    from gpucast.estimate.environment import Environment
    from gpucast.estimate.serving.engines import resolve
    from gpucast.estimate.serving.iteration import IterationModel
    from gpucast.hardware import get_gpu

    def attention(types):
        job = _serve(dict(GPT_OSS, layer_types=types))
        m = IterationModel(job, get_gpu("h100"), resolve(job.serve), Environment(), EstimatorConfig())
        return m._decode_attention(256, 2000), m._decode_attention(256, 8000)
    full = attention(["full_attention"] * 2)
    sliding = attention(["sliding_attention"] * 2)
    assert full[1] > 2.5 * full[0]                       # full attention reads four times the keys
    assert sliding[1] == pytest.approx(sliding[0], rel=0.05)   # a 128-token window reads 128 either way
    assert sliding[0] < full[0] / 3   # 128 of 2,000 keys (each kernel's fixed time aside)


def test_wide_expert_parallelism_sends_each_token_to_its_experts_only():
    from gpucast.estimate import EstimatorConfig
    from gpucast.estimate.environment import Environment
    from gpucast.estimate.serving.engines import resolve
    from gpucast.estimate.serving.iteration import IterationModel
    from gpucast.hardware import get_gpu

    job = _serve(MOE)

    def comm(dispatcher, n=4096):
        m = IterationModel(job, get_gpu("gb200"), resolve(job.serve), Environment(), EstimatorConfig(), tensor=8,
                           expert=8, attention_dp=True, dispatcher=dispatcher)
        return m._allreduce(n)
    gather, a2a = comm(None), comm("alltoall")
    # the gather brings every rank all 8 ranks' tokens; the all-to-all each token's 2 experts' copies:
    # about 8 / 2 times fewer bytes a rank (the calls' fixed latency aside)
    assert 0 < a2a < gather / 2.5
    served = gpucast.predict(_serve(MOE, gpus=8, parallel=dict(tensor=8, expert=8, attention_dp=True,
                                                                expert_dispatcher="alltoall")), "gb200").serving
    assert served["finished"] == served["requests"]


def test_engines_move_a_moe_layers_tokens_as_one_permute_and_one_finalize():
    # transformers' grouped-GEMM experts gather each token's K copies, weight them, scatter them back and sum
    # them, four passes over n K rows of the hidden size; an engine's permute reads each token once and writes
    # its K copies in the GEMM's operand format, its finalize reads the K outputs once and writes the token
    from gpucast.estimate.serving.fusion import fused, moe_kernels
    from gpucast.graph.serving import model_shape

    job, n = _serve(MOE), 256
    tr = trace_iteration(job, 1, n, 0, "paged")
    shape = model_shape(job)
    assert (shape["hidden"], shape["experts"], shape["experts_per_token"]) == (H, E, K)
    dense = trace_iteration(_serve(DENSE), 1, n, 0, "paged")
    assert moe_kernels(list(dense.ops), model_shape(_serve(DENSE))) == list(dense.ops)
    for operand in (2.0, 0.5625):   # bf16 activations, NVFP4's with their scales
        ops = moe_kernels(list(tr.ops), shape, operand)
        permute = [o for o in ops if o.op == "index" and o.out_shapes[0] == (n * K, H)]
        final = [o for o in ops if o.op == "moe_finalize"]
        assert len(permute) == len(final) == LAYERS
        assert all(o.bytes_read == n * H * 2 and o.bytes_written == n * K * H * operand for o in permute)
        assert all(o.bytes_read == n * K * H * 2 and o.bytes_written == n * H * 2 for o in final)
        # the routing weights' multiply and the sum over the K copies are in the finalize
        assert len(tr.ops) - len(ops) == 2 * LAYERS
    moved = sum(o.bytes for o in tr.ops if o.op in ("index", "sum") or (o.op == "mul" and o.out_shapes[0] == (n * K, H)))
    engine = sum(o.bytes for o in moe_kernels(list(tr.ops), shape) if o.op in ("index", "moe_finalize"))
    assert engine < moved / 2
    # and the engine's whole layer moves fewer bytes for it
    assert sum(o.bytes for o in fused(tr, LAYERS, shape).ops) < sum(o.bytes for o in fused(tr, LAYERS).ops)


def test_under_attention_dp_the_moe_layer_takes_every_ranks_tokens():
    # t ranks' tokens are gathered (already quantised) into the layer and all of theirs written back before the
    # reduce-scatter; a rank's experts still get n K rows when there are as many expert ranks as attention ranks
    from gpucast.estimate.serving.fusion import moe_kernels
    from gpucast.graph.serving import model_shape

    job, n, t = _serve(MOE), 128, 4
    tr = trace_iteration(job, 1, n, 0, "paged")
    ops = moe_kernels(list(tr.ops), model_shape(job), 1.0, ranks=t)
    permute = [o for o in ops if o.op == "index" and o.out_shapes[0] == (n * K, H)]
    final = [o for o in ops if o.op == "moe_finalize"]
    assert all(o.bytes_read == t * n * H * 1.0 and o.bytes_written == n * K * H * 1.0 for o in permute)
    assert all(o.bytes_read == n * K * H * 2 and o.bytes_written == t * n * H * 2 for o in final)


def test_a_pipelines_stages_share_a_pcie_hosts_bandwidth_for_their_gathers():
    # the stages of a pipeline gather and reduce-scatter at once; over PCIe their flows share the host's root
    # complexes (gpucast.estimate.comm.pcie_share), over NVLink each group keeps its links
    from gpucast.estimate import EstimatorConfig
    from gpucast.estimate.comm import pcie_share
    from gpucast.estimate.environment import Environment
    from gpucast.estimate.serving.engines import resolve
    from gpucast.estimate.serving.iteration import IterationModel
    from gpucast.hardware import get_gpu

    job = _serve(MOE)

    def comm(gpu, stages, n=4096):
        m = IterationModel(job, get_gpu(gpu), resolve(job.serve), Environment(), EstimatorConfig(), tensor=2,
                           expert=2, attention_dp=True, stages=stages)
        return m._allreduce(n)
    alone, two = comm("rtx-pro-6000", 1), comm("rtx-pro-6000", 2)
    # two 2-GPU groups at once are four flows through the host: 80 % of the link peer to peer becomes 56 %
    assert two / alone == pytest.approx(pcie_share(2) / pcie_share(4), rel=0.05)
    assert comm("h100", 2) == pytest.approx(comm("h100", 1))
