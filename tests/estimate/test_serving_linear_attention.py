"""Linear-attention layers served: Qwen3-Next and Qwen3.5 (gated delta-nets), Nemotron-H (Mamba-2).

The independent reasons behind the assertions: a gated delta-net layer keeps a fixed state per sequence
(``(K - 1) x conv_dim`` conv inputs and ``heads x dk x dv`` recurrent values, from the config's fields), so
only the full-attention layers hold K/V per token; its decode work does not depend on how long the context
is; a running sequence holds its state whatever its length, so the state caps how many sequences fit; and
the layers repeat with the config's ``full_attention_interval``, so models cut to one and two periods give
the whole model's costs."""

from __future__ import annotations

import numpy as np
import pytest

import gpucast
from gpucast.estimate.serving import iteration
from gpucast.estimate.serving.run import Requests, simulate
from gpucast.graph.serving import kv_bytes_per_token, model_shape, state_bytes_per_sequence, trace_iteration
from gpucast.job import Job, JobError

HYBRID = {"model_type": "qwen3_next", "hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
          "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "linear_conv_kernel_dim": 4,
          "linear_key_head_dim": 32, "linear_value_head_dim": 48, "linear_num_key_heads": 4,
          "linear_num_value_heads": 8, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
          "num_experts_per_tok": 2, "num_experts": 8, "vocab_size": 4096, "max_position_embeddings": 8192,
          "full_attention_interval": 4}
DENSE_TEXT = {"model_type": "qwen3_5_text", "hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "linear_conv_kernel_dim": 4,
              "linear_key_head_dim": 32, "linear_value_head_dim": 48, "linear_num_key_heads": 4,
              "linear_num_value_heads": 8, "vocab_size": 4096, "max_position_embeddings": 8192,
              "full_attention_interval": 4}


def _job(cfg, **serve):
    return Job.from_hf_config(cfg, batch_size=8, precision="bf16", mode="serve",
                              serve=dict(dict(input_len=256, output_len=32), **serve))


def test_only_full_attention_layers_keep_kv_and_every_linear_layer_a_state():
    job = _job(HYBRID)
    # 8 layers, every 4th full attention: 2 layers x 2 KV heads x (64 + 64) x 2 bytes
    assert kv_bytes_per_token(job) == 2 * 2 * 128 * 2
    # 6 linear layers x (conv: 3 x (2 x 4 x 32 + 8 x 48) + state: 8 x 32 x 48) x 2 bytes
    assert state_bytes_per_sequence(job) == 6 * (3 * (2 * 4 * 32 + 8 * 48) + 8 * 32 * 48) * 2
    assert model_shape(job)["attention_layers"] == 2


def test_a_decode_steps_linear_work_does_not_grow_with_the_context():
    job = _job(HYBRID)
    short, long = trace_iteration(job, 4, 1, 128), trace_iteration(job, 4, 1, 4096)

    def of(tr, name):
        return [(o.flops, o.bytes_read, o.bytes_written) for o in tr.ops if o.op == name]
    assert of(short, "gated_delta_rule") == of(long, "gated_delta_rule") != []
    assert len(of(short, "gated_delta_rule")) == 6 and len(of(short, "causal_conv1d")) == 6
    sdpa = [o.flops for o in short.ops if o.category == "attention" and "dot_product" in o.op]
    sdpa_long = [o.flops for o in long.ops if o.category == "attention" and "dot_product" in o.op]
    assert len(sdpa) == 2 and sdpa_long[0] > 20 * sdpa[0]
    # a decode reads and writes each sequence's recurrent state: 4 x 8 heads x 32 x 48 x 2 bytes, at least
    rule = next(o for o in short.ops if o.op == "gated_delta_rule")
    assert rule.bytes_read >= 4 * 8 * 32 * 48 * 2 and rule.bytes_written >= 4 * 8 * 32 * 48 * 2
    # a first prefill has no state to read: fewer bytes than the same chunk continuing a sequence
    fresh, cont = trace_iteration(job, 1, 256, 0), trace_iteration(job, 1, 256, 512)
    f = next(o for o in fresh.ops if o.op == "gated_delta_rule")
    c = next(o for o in cont.ops if o.op == "gated_delta_rule")
    assert c.bytes_read - f.bytes_read == 8 * 32 * 48 * 2 and c.flops == f.flops


def test_decode_time_grows_less_with_context_than_an_all_attention_model():
    def tpot(cfg, n):
        return gpucast.predict(_job(cfg, input_len=n, output_len=32), "h100").serving["tpot_s"]
    full = dict(HYBRID, layer_types=["full_attention"] * 8)
    hybrid = tpot(HYBRID, 6000) / tpot(HYBRID, 200)
    dense = tpot(full, 6000) / tpot(full, 200)
    assert 1.0 <= hybrid < dense


def test_the_state_caps_the_running_sequences():
    # 40 blocks of 16 tokens; each request needs 2 blocks of K/V (17-20 tokens) and, with a state, 8 more
    req = Requests(np.zeros(12), np.full(12, 16), np.full(12, 4))

    def flat(*_):
        return 0.01, 0.01
    plain = simulate(req, flat, 256, 8192, 40 * 16, 16, True)
    held = simulate(req, flat, 256, 8192, 40 * 16, 16, True, seq_blocks=8)
    assert plain.max_batch == 12 and held.max_batch == 4 and np.isfinite(held.finish_s).all()


def test_the_pattern_repeats_every_full_attention_interval():
    # the sampled costs agree with the whole model's: tests/estimate/test_serving_layers.py
    job = _job(dict(HYBRID, num_hidden_layers=16))
    assert iteration.layer_period(job) == 4
    assert iteration.layer_sample(job, 1) is None and iteration.layer_sample(job, 4) is not None


def test_a_composite_config_serves_its_language_model():
    vlm = {"model_type": "qwen3_5", "text_config": dict(DENSE_TEXT),
           "vision_config": {"depth": 1, "hidden_size": 64, "num_heads": 2, "out_hidden_size": 512}}
    a = gpucast.predict(_job(vlm), "h100").serving
    b = gpucast.predict(_job(DENSE_TEXT), "h100").serving
    assert a["tpot_s"] == pytest.approx(b["tpot_s"], rel=1e-6)
    assert a["memory"]["state_bytes_per_sequence"] == b["memory"]["state_bytes_per_sequence"] > 0


def test_a_deep_composite_config_is_served_from_its_cut_language_model():
    # 32 layers: the estimator traces the language model cut to one and two periods (layers.layer_sample), a
    # model of the text config's own type (qwen3_5_text), not the composite's
    text = dict(DENSE_TEXT, num_hidden_layers=32)
    vlm = {"model_type": "qwen3_5", "text_config": dict(text),
           "vision_config": {"depth": 1, "hidden_size": 64, "num_heads": 2, "out_hidden_size": 512}}
    a = gpucast.predict(_job(vlm), "h100").serving
    b = gpucast.predict(_job(text), "h100").serving
    assert a["tpot_s"] == pytest.approx(b["tpot_s"], rel=1e-6)


def test_a_composite_config_without_architectures_trains_its_language_model():
    vlm = {"model_type": "qwen3_5", "text_config": dict(DENSE_TEXT),
           "vision_config": {"depth": 1, "hidden_size": 64, "num_heads": 2, "out_hidden_size": 512}}

    def trained(cfg):
        return gpucast.predict(Job.from_hf_config(cfg, batch_size=2, seq_len=256, precision="bf16"), "h100")
    a, b = trained(vlm), trained(DENSE_TEXT)
    assert a.parameters == b.parameters and a.flops > 0


def test_tensor_parallel_ranks_hold_a_share_of_the_state():
    one = gpucast.predict(_job(HYBRID), "h100").serving["memory"]["state_bytes_per_sequence"]
    job = Job.from_hf_config(HYBRID, batch_size=8, precision="bf16", mode="serve", gpus=2, parallel=dict(tensor=2),
                             serve=dict(input_len=256, output_len=32))
    assert gpucast.predict(job, "h100").serving["memory"]["state_bytes_per_sequence"] == one // 2


def test_unmodelled_engines_and_layers_are_one_error_line():
    with pytest.raises(JobError, match="engine 'hf' with linear-attention layers"):
        gpucast.predict(_job(HYBRID, engine="hf"), "h100")
    lightning = {"model_type": "minimax", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 256, "num_local_experts": 2,
                 "vocab_size": 1000, "layer_types": ["linear_attention", "full_attention"]}
    with pytest.raises(JobError) as err:
        gpucast.predict(_job(lightning), "h100")
    assert "\n" not in str(err.value) and "not modelled" in str(err.value)


# ----------------------------------------------------------------- Kimi delta attention (Kimi Linear)
KIMI = {"model_type": "kimi_linear", "hidden_size": 256, "num_hidden_layers": 8, "num_attention_heads": 4,
        "num_key_value_heads": 4, "kv_lora_rank": 64, "q_lora_rank": None, "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32, "v_head_dim": 32, "intermediate_size": 512, "moe_intermediate_size": 64,
        "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1, "linear_num_heads": 4,
        "linear_head_dim": 32, "linear_conv_kernel_dim": 4, "vocab_size": 1024, "max_position_embeddings": 8192,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 2, "mlp_layer_types": ["dense"] + ["sparse"] * 7}


def test_kimi_linear_keeps_mla_latents_in_its_full_layers_and_a_state_in_its_delta_layers():
    job = _job(KIMI)
    # 2 MLA layers x (64 latent + 16 rotary) x 2 bytes; 6 KDA layers x (3 x 4 x 32 conv channels x 3 inputs +
    # 4 heads x 32 x 32 state) x 2 bytes
    assert kv_bytes_per_token(job) == 2 * 80 * 2
    assert state_bytes_per_sequence(job) == 6 * (3 * 4 * 32 * 3 + 4 * 32 * 32) * 2
    ops = [o.op for o in trace_iteration(job, 2, 1, 100).ops]
    assert ops.count("gated_delta_rule") == ops.count("causal_conv1d") == 6
    served = gpucast.predict(job, "h100").serving
    assert served["finished"] == served["requests"]


# ----------------------------------------------------------------- Mamba-2 hybrids (Nemotron-H)
NEMOTRON_H = {"model_type": "nemotron_h", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
              "head_dim": 64, "intermediate_size": 1024, "vocab_size": 4096, "max_position_embeddings": 8192,
              "hybrid_override_pattern": "M-M*M-M-", "mamba_num_heads": 16, "mamba_head_dim": 32,
              "ssm_state_size": 64, "n_groups": 2, "conv_kernel": 4, "chunk_size": 128,
              "mamba_ssm_cache_dtype": "float32"}


def test_mamba2_layers_keep_a_state_and_only_attention_blocks_keep_kv():
    job = _job(NEMOTRON_H)
    # "M-M*M-M-": four Mamba-2 layers, one attention layer, three MLP blocks (no cache)
    assert kv_bytes_per_token(job) == 1 * 2 * 128 * 2
    # 4 x (conv: 3 x (16 x 32 + 2 x 2 x 64) x 2 bytes + SSM state: 16 x 32 x 64 x 4 bytes, float32 as configured)
    assert state_bytes_per_sequence(job) == 4 * (3 * (16 * 32 + 2 * 2 * 64) * 2 + 16 * 32 * 64 * 4)
    short, long = trace_iteration(job, 4, 1, 128), trace_iteration(job, 4, 1, 4096)
    scans = [(o.flops, o.bytes_read) for o in short.ops if o.op == "ssd_scan"]
    assert len(scans) == 4 and scans == [(o.flops, o.bytes_read) for o in long.ops if o.op == "ssd_scan"]
    # a decode step reads every head's P x N state in float32, for each of the 4 sequences
    assert scans[0][1] >= 4 * 16 * 32 * 64 * 4
    served = gpucast.predict(_job(NEMOTRON_H), "h100").serving
    assert served["finished"] == served["requests"] and served["memory"]["state_bytes_per_sequence"] > 0


# ----------------------------------------------------------------- sliding windows under vLLM V1's hybrid allocator
def test_windowed_bytes_split_full_layers_from_each_sequences_windows():
    from gpucast.estimate.serving.memory import windowed

    # 4 attention layers of 100 bytes a token, two of them sliding over 128 tokens, blocks of 16
    assert windowed(400, [128, 0, 128, 0], 4, 16) == (200, 2 * 100 * (128 + 16))
    assert windowed(400, [0, 0, 0, 0], 4, 16) == (400, 0)
    assert windowed(400, [128] * 4, 4, 16) == (400, 0)   # no full layer: every token is kept


def test_vllm_v1_fits_more_tokens_when_half_the_layers_slide():
    gpt_oss = {"model_type": "gpt_oss", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
               "intermediate_size": 256, "vocab_size": 1000, "sliding_window": 128, "max_position_embeddings": 8192,
               "layer_types": ["sliding_attention", "full_attention"] * 2}
    v1 = gpucast.predict(_job(gpt_oss), "h100").serving
    old = gpucast.predict(_job(gpt_oss, engine_version="0.6"), "h100").serving
    # half the layers keep only their window: a token costs half the bytes, each sequence its windows
    assert v1["kv_bytes_per_token"] * 2 == old["kv_bytes_per_token"]
    # at most its window and a block per sliding layer: 2 layers x K and V x 2 heads x 64 dims x 2 bytes x 144
    assert v1["memory"]["window_bytes_per_sequence"] == 2 * 2 * 64 * 2 * 2 * (128 + 16)
    assert v1["memory"]["state_bytes_per_sequence"] == 0
    assert v1["kv_cache_tokens"] > 1.9 * old["kv_cache_tokens"]


def test_a_sequence_shorter_than_its_window_holds_only_its_own_tokens():
    from gpucast.estimate.serving.memory import window_groups
    from gpucast.estimate.serving.run import Requests, simulate

    # the sliding layers' bytes equal the full layers': a token of a short sequence costs two, past the window one
    assert window_groups(400, [128, 0, 128, 0], 4, 16) == [(144, 200.0)]
    assert window_groups(400, [64, 0, 128, 0], 4, 16) == [(80, 100.0), (144, 100.0)]

    def peak(prompt: int) -> int:
        req = Requests(np.zeros(1), np.array([prompt]), np.array([1]))
        return simulate(req, lambda *a: (0.01, 0.01), 8, 8192, 10**6, 16, True, "static",
                        window=((144, 1.0),)).peak_kv_tokens
    assert peak(32) == 16 * (2 + 2)            # 2 blocks of its own K/V, 2 of its sliding layers'
    assert peak(1000) == 16 * (63 + 9)         # the sliding layers stop at 144 tokens: 9 blocks


def test_decodes_grow_a_sequences_window_blocks_too():
    """A 10-token prompt decoding 200 tokens holds 209 tokens' K/V when it finishes: 14 blocks of the full
    layers' and 9 of the sliding layers' (they stop at 144 tokens), whether the iterations run through the
    scheduler (a second request prefilling in 64-token chunks beside it) or only decode."""
    from gpucast.estimate.serving.run import Requests, simulate

    def peak(prompts, arrivals) -> int:
        req = Requests(np.array(arrivals, dtype=float), np.array(prompts), np.array([200] * len(prompts)))
        return simulate(req, lambda *a: (0.01, 0.01), 8, 64, 10**6, 16, True, "poisson",
                        window=((144, 1.0),)).peak_kv_tokens
    assert peak([10], [0.0]) == 16 * (14 + 9)
    # beside it from the second iteration, a 2,000-token prompt in 63-token chunks (the first request's decode
    # takes one token of the 64) ends its prefill in the 33rd; in the 200th the first request's last decode
    # holds 209 tokens and the second 2,000 + 167: 14 + 9 blocks and 136 + 9, the run's most
    assert peak([10, 2000], [0.0, 0.005]) == 16 * (14 + 9 + 136 + 9)


@pytest.mark.parametrize("model_type", ["granitemoehybrid", "bamba"])
def test_granite4_and_bamba_mamba2_layers_are_read_from_their_own_field_names(model_type):
    cfg = dict(model_type=model_type, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=1000, intermediate_size=512, mamba_n_heads=8, mamba_d_state=32,
               mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=64, max_position_embeddings=4096)
    if model_type == "bamba":   # Bamba names its attention layers, Granite-4 every layer's kind
        cfg["attn_layer_indices"] = [1]
    else:
        cfg["layer_types"] = ["mamba", "attention", "mamba", "mamba"]
    job = _job(cfg, input_len=128, output_len=16)
    # three Mamba-2 layers: heads 8 of 2 x 256 / 8 = 64 dims, state 32, conv over 512 + 2 x 1 x 32 channels
    assert state_bytes_per_sequence(job) == 3 * (3 * (512 + 64) + 8 * 64 * 32) * 2
    assert kv_bytes_per_token(job) == 1 * 2 * 64 * 2 * 2
    assert any(o.op == "ssd_scan" for o in trace_iteration(job, 2, 1, 64).ops)


# ----------------------------------------------------------------- DeepSeek sparse attention (V3.2)
DSA = {"model_type": "deepseek_v32", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
       "num_key_value_heads": 8, "q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 64,
       "qk_rope_head_dim": 32, "v_head_dim": 64, "intermediate_size": 1024, "moe_intermediate_size": 256,
       "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
       "n_group": 1, "topk_group": 1, "vocab_size": 4096, "max_position_embeddings": 16384,
       "index_topk": 256, "index_head_dim": 64, "index_n_heads": 8}


def test_sparse_attention_caches_the_latent_and_an_fp8_index_key():
    # 4 layers x (128 latent + 32 rotary) x 2 bytes + 4 layers x (64 FP8 index values + a 4-byte scale)
    assert kv_bytes_per_token(_job(DSA)) == 4 * 160 * 2 + 4 * (64 + 4)


def test_the_indexer_scores_every_cached_token_of_every_new_one():
    from gpucast.estimate.serving.sparse import indexer

    like = next(o for o in trace_iteration(_job(DSA), 4, 1, 256).ops if o.category == "attention")
    op = indexer(like, 4, 1, 1000, {"topk": 256, "heads": 8, "dim": 64})
    # 4 sequences x 1,001 visible tokens x (2 x 8 heads x 64 + 2 x 8) FLOPs; FP8 keys with their scales read once
    assert op.flops == 4 * 1001 * (2 * 8 * 64 + 2 * 8)
    assert op.bytes_read >= 4 * 1001 * (64 + 4) and op.dtype.startswith("float8")
    chunk = indexer(like, 1, 100, 50, {"topk": 256, "heads": 8, "dim": 64})
    assert chunk.flops == (100 * 50 + 100 * 101 // 2) * (2 * 8 * 64 + 2 * 8)   # causal pairs of a chunk


def test_glm5_shared_indexer_layers_keep_no_index_keys():
    glm = dict(DSA, model_type="glm_moe_dsa", index_topk_pattern="FSFS")
    glm.pop("n_group"), glm.pop("topk_group")
    # two of four layers run their own indexer: half the index keys of a layer each
    assert kv_bytes_per_token(_job(glm)) == 4 * 160 * 2 + 2 * (64 + 4)
    served = gpucast.predict(_job(glm), "h100").serving
    assert served["finished"] == served["requests"]


def test_a_sparse_attention_model_trains_as_its_dense_sibling_and_says_so():
    # transformers' V3.2 needs the dense mask a fused attention leaves out; training is costed as the dense
    # MLA model with the same weights (the indexer's projections aside), as V3.2's dense warm-up runs
    dense = {k: v for k, v in DSA.items() if not k.startswith("index_")}
    dense["model_type"] = "deepseek_v3"

    def trained(cfg):
        return gpucast.predict(Job.from_hf_config(cfg, batch_size=1, seq_len=512, precision="bf16"), "h100")
    sparse, mla = trained(DSA), trained(dense)
    assert sparse.flops == mla.flops and sparse.parameters == mla.parameters
    assert any("sparse attention is costed dense" in n for n in sparse.notes)
    assert not any("sparse attention" in n for n in mla.notes)


def test_sparse_attention_grows_less_with_the_context_than_dense_mla():
    dense = {k: v for k, v in DSA.items() if not k.startswith("index_")}
    dense["model_type"] = "deepseek_v3"

    def served(cfg, n):
        return gpucast.predict(_job(cfg, input_len=n, output_len=32), "h100").serving
    sparse_tpot = served(DSA, 12000)["tpot_s"] - served(DSA, 200)["tpot_s"]
    dense_tpot = served(dense, 12000)["tpot_s"] - served(dense, 200)["tpot_s"]
    assert 0 < sparse_tpot < dense_tpot
    assert served(DSA, 12000)["ttft_s"] < served(dense, 12000)["ttft_s"]


def test_vllm_011_prefills_a_hybrids_prompts_whole_whatever_the_prefix_hit_rate():
    """vLLM 0.11 turns prefix caching off for a model with linear-attention layers: a hit rate changes nothing
    there and says so; SGLang's radix cache still skips the cached share, and so does vLLM for a dense model."""
    def ttft(cfg, engine, hit):   # vLLM 0.11: its synchronous scheduler (0.14's host work would hide this tiny prefill)
        job = _job(cfg, engine=engine, concurrency=4, num_requests=16, input_len=2048, prefix_hit_rate=hit,
                   **({"engine_version": "0.11"} if engine == "vllm" else {}))
        return gpucast.predict(job, "h100").serving

    hybrid, hybrid_hit = ttft(HYBRID, "vllm", None), ttft(HYBRID, "vllm", 0.75)
    assert hybrid_hit["ttft_s"] == hybrid["ttft_s"]
    assert any("prefix caching" in n for n in hybrid_hit["notes"])
    assert not any("prefix caching" in n for n in hybrid["notes"])
    assert ttft(HYBRID, "sglang", 0.75)["ttft_s"] < ttft(HYBRID, "sglang", None)["ttft_s"]
    dense = {k: v for k, v in DENSE_TEXT.items() if not k.startswith(("linear_", "full_attention"))}
    dense["model_type"] = "qwen3"
    assert ttft(dense, "vllm", 0.75)["ttft_s"] < ttft(dense, "vllm", None)["ttft_s"]
