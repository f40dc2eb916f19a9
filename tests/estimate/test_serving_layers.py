"""Layer sampling in the serving model: a model whose layers are alike is costed from models cut to one
and two layers. The reason the two must agree is independent of the code: a decoder's identical layers
cost the same each, so every cost is ``f(1) + (L - 1) (f(2) - f(1))``, and a pattern of ``P`` layers
repeated costs ``f(P) + (L / P - 1) (f(2P) - f(P))``; models whose layers differ by their config without
repeating are traced whole."""

from __future__ import annotations

import json

import pytest
from transformers import LlamaConfig, Qwen2MoeConfig

import gpucast
from gpucast.estimate.serving import iteration
from gpucast.job import Job

LLAMA = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
                    num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096).to_dict()


def _job(cfg, **serve):
    return Job.from_hf_config(cfg, batch_size=16, precision="bf16", mode="serve",
                              serve=dict(dict(input_len=700, output_len=40), **serve))


def _predict(job, sampled: bool, monkeypatch):
    iteration._COSTS.clear()
    iteration._MODELS.clear()
    iteration._SAMPLES.clear()
    if not sampled:
        monkeypatch.setattr(iteration, "layer_period", lambda job: None)
    s = gpucast.predict(job, "a100-80gb").serving
    monkeypatch.undo()
    return s


@pytest.mark.parametrize("serve", [dict(), dict(engine="trtllm", request_rate=20.0, num_requests=40)])
def test_cut_models_give_the_whole_models_costs(serve, monkeypatch):
    job = _job(LLAMA, **serve)
    whole, cut = _predict(job, False, monkeypatch), _predict(job, True, monkeypatch)
    for k in ("latency_s", "ttft_s", "tpot_s", "output_tokens_per_s"):
        # within 0.5 %: the fused small kernels of the embedding's and final norm's bytes spread over a cut
        # model's fewer kernels meet the kernels' floor a little differently
        assert cut[k] == pytest.approx(whole[k], rel=5e-3), k


def test_a_hybrid_is_costed_from_one_and_two_periods_of_its_layers(monkeypatch):
    # Qwen3-Next's pattern: three gated delta-net layers, then one full-attention layer (period 4)
    hybrid = {"model_type": "qwen3_next", "hidden_size": 512, "num_hidden_layers": 16, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "linear_conv_kernel_dim": 4,
              "linear_key_head_dim": 32, "linear_value_head_dim": 48, "linear_num_key_heads": 4,
              "linear_num_value_heads": 8, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
              "num_experts_per_tok": 2, "num_experts": 8, "vocab_size": 4096, "max_position_embeddings": 8192}
    job = _job(hybrid)
    assert iteration.layer_period(job) == 4
    whole, cut = _predict(job, False, monkeypatch), _predict(job, True, monkeypatch)
    for k in ("ttft_s", "tpot_s", "output_tokens_per_s"):
        assert cut[k] == pytest.approx(whole[k], rel=5e-3), k


def test_cut_models_keep_the_per_layer_lists_and_refuse_unlike_layers():
    cut = iteration.layer_sample(_job(LLAMA), 2)
    assert json.loads(cut.hf_config)["num_hidden_layers"] == 2
    mixed = dict(LLAMA, layer_types=["full_attention", "sliding_attention"] * 6)
    assert iteration.layer_sample(_job(mixed), 1) is None   # the pattern's period is 2
    assert json.loads(iteration.layer_sample(_job(mixed), 2).hf_config)["layer_types"] == mixed["layer_types"][:2]
    alike = dict(LLAMA, layer_types=["full_attention"] * 12)
    assert json.loads(iteration.layer_sample(_job(alike), 2).hf_config)["layer_types"] == ["full_attention"] * 2
    moe = Qwen2MoeConfig(hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                         shared_expert_intermediate_size=256, vocab_size=1000, mlp_only_layers=[0]).to_dict()
    assert iteration.layer_sample(_job(moe), 1) is None
