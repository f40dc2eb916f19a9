"""Remote-code Hugging Face architectures read as the transformers one they run as (gpucast.graph.hf_remote).

DeciLM-7B's published config.json (model_type "deci", K/V heads per layer): vLLM pads every layer to the
largest layer's 4 K/V heads, so the model served is a Llama whose parameters and cache have closed forms."""

from __future__ import annotations

import json

import pytest

import gpucast
from gpucast.graph.hf import resolve_config
from gpucast.job import Job, JobError

DECI_7B = dict(model_type="deci", architectures=["DeciLMForCausalLM"], hidden_act="silu", hidden_size=4096,
               intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
               num_key_value_heads_per_layer=[4] * 5 + [2] * 5 + [4] + [2] * 9 + [1] * 11 + [4], vocab_size=32000,
               max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=10000.0,
               rope_scaling={"factor": 2.0, "type": "dynamic"}, tie_word_embeddings=False,
               auto_map={"AutoConfig": "Deci/DeciLM-7B--configuration_decilm.DeciLMConfig"})


def test_decilm_reads_as_a_llama_with_its_largest_layers_kv_heads():
    cfg = resolve_config(DECI_7B)
    assert cfg["model_type"] == "llama" and cfg["num_key_value_heads"] == 4
    assert "num_key_value_heads_per_layer" not in cfg and "auto_map" not in cfg


def test_decilm_served_has_the_padded_models_parameters_and_cache(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DECI_7B))
    job = Job.from_hf_config(str(path), batch_size=4, precision="fp16", mode="serve",
                             serve=dict(input_len=128, output_len=8))
    p = gpucast.predict(job, "a100-40gb")
    h, f, kv = 4096, 14336, 4 * 128
    layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    assert p.parameters == 32 * layer + 2 * 32000 * h + h
    assert p.serving["kv_bytes_per_token"] == 32 * 4 * 128 * 2 * 2


def test_other_unknown_architectures_stay_an_error():
    with pytest.raises(JobError, match="unknown Hugging Face architecture"):
        resolve_config(dict(DECI_7B, model_type="decilm_v9"))


def test_kimi_k2_reads_as_deepseek_v3_and_serves_with_its_latent_cache():
    # Kimi-K2's config.json: model_type kimi_k2, DeepSeek-V3's architecture (here at small sizes)
    kimi = dict(model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"], hidden_size=512, num_hidden_layers=3,
                num_attention_heads=8, num_key_value_heads=8, q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64,
                qk_rope_head_dim=32, v_head_dim=64, intermediate_size=1024, moe_intermediate_size=256,
                n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
                topk_group=1, vocab_size=4096, max_position_embeddings=8192,
                auto_map={"AutoConfig": "moonshotai/Kimi-K2-Instruct--configuration_deepseek.DeepseekV3Config"})
    data = resolve_config(kimi)
    assert data["model_type"] == "deepseek_v3" and "auto_map" not in data
    from gpucast.graph.serving import kv_bytes_per_token, model_shape

    job = Job.from_hf_config(kimi, batch_size=4, precision="bf16", mode="serve",
                             serve=dict(input_len=128, output_len=8))
    assert model_shape(job)["experts"] == 16
    assert kv_bytes_per_token(job) == 3 * (128 + 32) * 2   # MLA: the latent and the rotary key a layer
    assert gpucast.predict(job, "h100").serving["finished"] == 4
