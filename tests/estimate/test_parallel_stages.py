"""Pipeline stages as Megatron-Core lays them out: the first and last stages' own layer counts
(--decoder-first/last-pipeline-num-layers) and DeepSeek-V3's multi-token-prediction depths on the last
stage (--mtp-num-layers), on a real transformers DeepSeek-V3-shaped model traced on the meta device."""

from __future__ import annotations

import numpy as np
import pytest

from gpucast.api import trace
from gpucast.estimate.kernels import PHASE_CODES
from gpucast.estimate.parallel import estimate_plan
from gpucast.estimate.parallel.ranks import OpLayout, stage_blocks
from gpucast.graph.blocks import POST
from gpucast.hardware import get_gpu
from gpucast.job import Job, JobError

DS = dict(model_type="deepseek_v3", hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
          num_hidden_layers=6, first_k_dense_replace=1, num_attention_heads=16, num_key_value_heads=16,
          n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2, q_lora_rank=256,
          kv_lora_rank=128, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, vocab_size=1024,
          num_nextn_predict_layers=1)


def _job(gpus=2, **par):
    return Job.from_hf_config(DS, batch_size=1, seq_len=512, precision="bf16", optimizer="adamw", gpus=gpus,
                              parallel=dict(dict(framework="megatron", sharding="zero1", pipeline=2), **par))


def _estimate(job):
    return estimate_plan(trace(job), job, get_gpu("h100"))


def test_the_first_and_last_stages_take_their_own_layer_counts():
    sizes = lambda *a: [len(b) for b in stage_blocks(*a)]  # noqa: E731
    assert sizes(61, 16) == [4] * 13 + [3] * 3                      # even, the first stages taking the rest
    assert sizes(61, 16, None, 1) == [4] * 15 + [1]                 # the first stage takes a middle one's share
    assert sizes(62, 16, 2, 4) == [2] + [4] * 14 + [4]
    assert sizes(6, 2, 2, None) == [2, 4]
    assert _estimate(_job(last_stage_layers=2, mtp_layers=0)).plan["layers_per_stage"] == [4, 2]


def test_mtp_runs_the_last_layer_and_the_head_again_on_the_last_stage():
    t = trace(_job())
    assert t.layout.mtp_layers == 1                      # the config's num_nextn_predict_layers
    with_mtp, without = _estimate(_job()), _estimate(_job(mtp_layers=0))
    assert with_mtp.plan["mtp_layers"] == 1 and without.plan["mtp_layers"] == 0
    # one replica (d = 1), one micro-batch, tensor 1: the extra FLOPs are the last layer's and the head's ops
    ol = OpLayout.of(t)
    last = 5
    extra = np.flatnonzero((ol.block == last) | ((ol.block == POST) & (ol.phase != PHASE_CODES["optim"])))
    flops = sum(t.ops[i].flops for i in extra)
    assert with_mtp.plan["hardware_flops_per_step"] - without.plan["hardware_flops_per_step"] == pytest.approx(flops)
    assert with_mtp.plan["layers_per_stage"] == [3, 4]
    m1, m0 = with_mtp.plan["memory_per_stage_bytes"], without.plan["memory_per_stage_bytes"]
    assert m1[0] == m0[0] and m1[1] > m0[1]              # the first stage is untouched
    # outside Megatron-Core (a transformers model file builds no MTP) none runs
    assert _estimate(_job(framework="deepspeed", pipeline=2, sharding="zero1")).plan["mtp_layers"] == 0


@pytest.mark.parametrize("par, words", [
    (dict(pipeline=1, first_stage_layers=2), "need parallel.pipeline > 1"),
    (dict(pipeline=4, first_stage_layers=1, last_stage_layers=2), "splitting evenly over the other 2 stages"),
    (dict(virtual_pipeline=3, last_stage_layers=3), "no virtual pipeline"),
])
def test_impossible_stage_layouts_are_one_error_line(par, words):
    with pytest.raises(JobError) as e:
        _estimate(_job(gpus=par.get("pipeline", 2), **par))
    assert words in str(e.value) and "\n" not in str(e.value)
