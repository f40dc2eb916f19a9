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


# ---------------------------------------------------------------- custom layouts (gpucast.pipeline_layout)

def test_a_layout_string_lands_as_megatron_s_guide_draws_it():
    # docs/api-guide/pipeline_parallel_layout.md: DeepSeek-V3 (61 layers + 1 MTP) at PP 16, VPP 2 with
    # "Et*3|(tt|)*29,m|L": rank 0 holds the embedding + 3 layers and then 2, ranks 1-13 2 + 2, rank 14
    # 2 layers and the MTP depth, rank 15 2 layers and the loss.
    from gpucast.pipeline_layout import parse, ranks

    stages = parse("Et*3|(tt|)*29,m|L")
    assert len(stages) == 32 and stages[0] == "Ettt" and stages[30] == "m" and stages[31] == "L"
    r = ranks(stages, 16)
    assert r.chunks[0] == [3, 2] and all(r.chunks[k] == [2, 2] for k in range(1, 14))
    assert r.chunks[14] == [2, 0] and r.chunks[15] == [2, 0]
    assert r.mtp == [0] * 14 + [1, 0]
    assert list(r.blocks[0]) == [0, 1, 2, 33, 34]     # virtual stage 16 follows the first 16's 33 layers
    assert sum(len(b) for b in r.blocks) == 61


def test_the_embedding_and_the_loss_counted_as_layers_split_as_megatron_s_405b_recipe():
    # Llama-3.1-405B: 126 layers + the embedding + the loss = 128 slots = PP 8 x VP 8 x 2.
    from gpucast.pipeline_layout import from_split

    stages = from_split(126, 64, embedding=True, loss=True)
    assert len(stages) == 64 and stages[0] == "Et" and stages[-1] == "tL" and set(stages[1:-1]) == {"tt"}
    assert from_split(5, 2, embedding=False, loss=True) == ("Ettt", "ttL")


def test_a_layout_of_the_even_split_predicts_what_the_even_split_does():
    plain = _estimate(_job(gpus=4, pipeline=4, mtp_layers=0))
    laid = _estimate(_job(gpus=4, pipeline=4, mtp_layers=0, pipeline_layout="Ett|tt|t|tL"))
    assert plain.plan["layers_per_stage"] == laid.plan["layers_per_stage"] == [2, 2, 1, 1]
    assert laid.step_time_s == pytest.approx(plain.step_time_s)
    assert laid.plan["memory_per_stage_bytes"] == plain.plan["memory_per_stage_bytes"]


def test_a_layout_interleaves_uneven_stages_and_places_mtp_where_it_says():
    # 6 layers cannot split into 2 x 2 equal chunks; the layout puts 2+1 and 1+2 layers on the two ranks
    # and the MTP depth on the first rank's second chunk.
    with pytest.raises(JobError, match="virtual_pipeline"):
        _estimate(_job(virtual_pipeline=2, mtp_layers=0))
    est = _estimate(_job(pipeline_layout="Ett|t|tm|ttL"))
    plan = est.plan
    assert plan["virtual_pipeline"] == 2 and plan["mtp_layers"] == 1   # the layout's stages over the pipeline
    assert plan["layers_per_stage"] == [3 + 1, 3]                        # rank 0: 3 layers + the MTP depth
    last_mtp = _estimate(_job(pipeline_layout="Ett|t|t|ttmL")).plan   # the same layers, the MTP depth on rank 1
    assert last_mtp["layers_per_stage"] == [3, 3 + 1]
    on_first, on_last = plan["memory_per_stage_bytes"], last_mtp["memory_per_stage_bytes"]
    assert on_first[0] > on_last[0] and on_first[1] < on_last[1]      # its weights and activations move with it


def test_an_uneven_interleaved_split_names_the_embedding_and_loss_slots_that_would_even_it():
    # 6 layers over 2 stages x 2 chunks: 6 + 2 = 8 slots split evenly (Megatron's --account-for-embedding- and
    # --account-for-loss-in-pipeline-split, as Llama-3.1-405B's 126 + 2 over 8 x 8 x 2); 6 + 1 = 7 does not
    with pytest.raises(JobError, match=r"\(6 \+ 2 do, .*set parallel.embedding_in_split and parallel.loss_in_split\)"):
        _estimate(_job(virtual_pipeline=2, mtp_layers=0))
    plan = _estimate(_job(virtual_pipeline=2, mtp_layers=0, embedding_in_split=True, loss_in_split=True)).plan
    assert sum(plan["layers_per_stage"]) == 6
    with pytest.raises(JobError, match=r"equal chunks$"):   # 2 x 5 chunks: neither 7 nor 8 slots divide by 10
        _estimate(_job(virtual_pipeline=5, mtp_layers=0))


@pytest.mark.parametrize("par, words", [
    (dict(pipeline_layout="Ett|tt|ttt|L"), "places 7 decoder layers (t), not the model's 6"),
    (dict(pipeline_layout="Ettt|tt"), "the output layer and the loss (L) must stand once, in the last stage"),
    (dict(pipeline_layout="Ett|t(t|ttL"), "unclosed '('"),
    (dict(pipeline_layout="Ettt|tttL", mtp_layers=0, virtual_pipeline=2), "has 2 stages, not pipeline x virtual_pipeline (2 x 2)"),
    (dict(pipeline_layout="Ettt|tttmmL"), "places 2 MTP depths (m), not the model's 1"),
    (dict(pipeline_layout="Ettt|tttL", last_stage_layers=3), "set one"),
    (dict(pipeline_layout="Ettt|tttL", loss_in_split=True), "places the embedding and the loss itself"),
    (dict(virtual_pipeline=2, embedding_in_split=True, mtp_layers=0), "6 layers + the embedding (7 slots) do not split into 4"),
])
def test_impossible_custom_layouts_are_one_error_line(par, words):
    with pytest.raises(JobError) as e:
        _estimate(_job(**par))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_gb200_plan_s_node_is_its_nvl72_rack():
    # GB200/GB300 NVL72: 72 GPUs in one NVLink domain (gpus.yaml's nvlink_domain): a plan's gpus_per_node
    # defaults to it, so 64 ranks are one NVLink domain; a job's own gpus_per_node still wins.
    job = _job(gpus=64, pipeline=2, expert=16, mtp_layers=0)
    rack = estimate_plan(trace(job), job, get_gpu("gb200")).plan
    assert rack["gpus_per_node"] == 72 and rack["nodes"] == 1
    trays = _job(gpus=64, pipeline=2, expert=16, mtp_layers=0, gpus_per_node=4)
    split = estimate_plan(trace(trays), trays, get_gpu("gb200")).plan
    assert split["nodes"] == 16
    assert split["step_breakdown_s"]["expert_parallel_comm_s"] > rack["step_breakdown_s"]["expert_parallel_comm_s"]
    assert _estimate(job).plan["gpus_per_node"] == 8
