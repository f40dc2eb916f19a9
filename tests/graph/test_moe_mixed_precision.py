"""Training a transformers grouped-GEMM mixture-of-experts model under mixed precision: the experts' grouped
GEMMs run at the autocast dtype (gpucast.graph.mirror.GROUPED), as Megatron-Core, DeepSpeed and TorchTitan
run them, instead of failing on fp32 operands. A real transformers Qwen3-MoE built on the meta device."""

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
