"""Training mixture-of-experts models: under mixed precision the experts' grouped
GEMMs run at the autocast dtype (gpucast.graph.mirror.GROUPED), as Megatron-Core, DeepSpeed and TorchTitan
run them, instead of failing on fp32 operands; Llama-4's experts take their routed tokens only
(gpucast.graph.routed_experts). Real transformers Qwen3-MoE and Llama-4 models built on the meta device."""

from __future__ import annotations

import pytest

from gpucast.api import trace
from gpucast.job import Job

MOE = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
           vocab_size=256)


@pytest.mark.parametrize("precision", ["amp-bf16", "amp-fp16", "fp8"])
def test_the_experts_grouped_gemms_run_in_16_bits_under_autocast(precision):
    t = trace(Job.from_hf_config(MOE, batch_size=1, seq_len=128, precision=precision, optimizer="adamw"))
    grouped = [o for o in t.ops if o.op == "_grouped_mm"]
    assert {o.phase for o in grouped} >= {"fwd", "bwd"}
    assert {o.dtype for o in grouped} == {"bfloat16"}
    # 2 layers x (gate-up and down) forward; each GEMM's FLOPs 2 x rows x in x out over the routed rows
    fwd = [o for o in grouped if o.phase == "fwd"]
    rows = 128 * 2   # tokens x top-2
    assert sorted(o.flops for o in fwd) == sorted([2 * rows * 256 * 256, 2 * rows * 128 * 256] * 2)


def test_llama4_trains_its_routed_tokens_only():
    # transformers' Llama4TextMoe runs every token through every expert; frameworks route them (top-1 of 4
    # here), so the experts' forward GEMMs take the 128 tokens once, not 4 times
    cfg = dict(model_type="llama4_text", hidden_size=256, intermediate_size=512, intermediate_size_mlp=512,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=64, vocab_size=1024,
               num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=1)
    t = trace(Job.from_hf_config(cfg, batch_size=1, seq_len=128, precision="amp-bf16", optimizer="adamw"))
    assert not [o for o in t.ops if o.op == "bmm" and o.shapes[0][0] == 4]
    fwd = [o for o in t.ops if o.op == "_grouped_mm" and o.phase == "fwd"]
    assert sorted(o.flops for o in fwd) == sorted([2 * 128 * 256 * 1024, 2 * 128 * 512 * 256] * 2)
