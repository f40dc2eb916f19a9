"""Selective recompute of named modules (parallel.recompute_modules, Megatron-Core's --recompute-modules)
on a real transformers DeepSeek-V3-shaped model traced on the meta device: the ops each role tags, the
activations a recomputed module no longer keeps, its forward run again before the backward."""

from __future__ import annotations

import pytest

from gpucast.api import trace
from gpucast.estimate.parallel import estimate_plan
from gpucast.estimate.parallel.ranks import OpLayout
from gpucast.graph import blocks
from gpucast.hardware import get_gpu
from gpucast.job import Job, JobError
from gpucast import plan

DS = dict(model_type="deepseek_v3", hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
          num_hidden_layers=4, first_k_dense_replace=1, num_attention_heads=16, num_key_value_heads=16,
          n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2, q_lora_rank=256,
          kv_lora_rank=128, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, vocab_size=1024)


def _job(**par):   # DeepseekV3Config declares one MTP depth; none here, so a block's bytes are the layout's
    return Job.from_hf_config(DS, batch_size=2, seq_len=512, precision="bf16", optimizer="adamw", gpus=1,
                              parallel=dict(dict(framework="megatron", sharding="zero1", mtp_layers=0), **par))


def _estimate(job):
    return estimate_plan(trace(job), job, get_gpu("h100"))


def test_the_names_are_megatron_cores_in_both_places():
    assert blocks.RECOMPUTE_MODULES == plan.RECOMPUTE_MODULES


def test_each_role_tags_the_ops_it_runs():
    t = trace(_job())
    fwd = [o for o in t.ops if o.phase == "fwd" and o.block >= 0]
    tags = lambda o: set(o.module.split("|")) if o.module else set()  # noqa: E731
    assert all("moe" in tags(o) for o in fwd if o.op == "_grouped_mm")       # the routed experts' GEMMs
    assert any(tags(o) == {"moe", "moe_act"} for o in fwd)                  # the experts' activation
    assert any("shared_experts" in tags(o) and o.category == "matmul" for o in fwd)
    assert any(tags(o) == {"mla_up_proj"} and o.category == "matmul" for o in fwd)
    assert any(tags(o) == {"mlp"} and o.category == "matmul" for o in fwd)  # the first, dense layer's MLP
    assert all(o.block == 0 for o in fwd if "mlp" in tags(o))
    assert any(tags(o) == {"layernorm"} for o in fwd)
    assert not any(o.module for o in t.ops if o.phase == "bwd")


def test_core_attn_alone_is_plain_selective_recompute():
    a, b = _estimate(_job(recompute="selective")), _estimate(_job(recompute_modules=["core_attn"]))
    assert a.step_time_s == b.step_time_s and a.memory.total_bytes == b.memory.total_bytes


def test_a_recomputed_module_keeps_no_activations_and_runs_again():
    t = trace(_job())
    acts = t.layout.activations
    base = _estimate(_job(recompute_modules=["core_attn"]))
    moe = _estimate(_job(recompute_modules=["core_attn", "moe"]))
    # one stage, one micro-batch in flight, tensor 1: the MoE layers' saved bytes go, nothing else
    dropped = acts["module:moe:sharded"] + acts["module:moe:replicated"]
    assert base.memory.breakdown["activations"] - moe.memory.breakdown["activations"] == pytest.approx(dropped, rel=1e-6)
    # their forward ops run again before the backward: the recompute time grows by what they take
    ol = OpLayout.of(t)
    again = sum(1 for o, tagged in zip(t.ops, ol.tagged(("moe",))) if tagged and o.phase == "fwd" and o.block >= 0)
    assert again > 0
    assert moe.plan["step_breakdown_s"]["recompute_s"] > base.plan["step_breakdown_s"]["recompute_s"]
    assert moe.plan["recompute_modules"] == ["core_attn", "moe"]
    # moe holds moe_act: naming both drops nothing twice
    both = _estimate(_job(recompute_modules=["core_attn", "moe", "moe_act"]))
    assert both.memory.breakdown["activations"] == moe.memory.breakdown["activations"]


@pytest.mark.parametrize("par, words", [
    (dict(recompute="full", recompute_modules=["mlp"]), "needs parallel.recompute selective"),
    (dict(recompute_modules=["attention"]), "recompute_modules"),
    (dict(recompute_modules=[]), "recompute_modules"),
])
def test_bad_recompute_modules_are_one_error_line(par, words):
    with pytest.raises(JobError) as e:
        _estimate(_job(**par))
    assert words in str(e.value) and "\n" not in str(e.value)
