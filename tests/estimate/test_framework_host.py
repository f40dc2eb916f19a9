"""The training framework's host work around the model (gpucast.estimate.parallel.framework).

What is checked holds apart from the constants' values:

* the default framework follows the plan (Megatron-LM with tensor/pipeline parallelism, DeepSpeed
  for ZeRO, FSDP for FSDP, plain DDP otherwise) and a job may name another; a bad name is one
  line naming the field;
* every collective of the plan costs the host one c10d call: with no framework Python (DDP's
  reducer is C++) the framework's host time is the plan's own NCCL call count (``comm_calls``,
  counted where each collective is charged) times one call's price;
* Megatron-LM's Python is per layer: the rank's per-layer part doubles with twice the layers;
* host time costs step time only where the host sets the pace: a micro-batch of one short
  sequence under tensor parallelism (kernels of microseconds) gets slower, a large micro-batch
  (kernels of milliseconds) does not.
"""

from __future__ import annotations

import pytest

from gpucast.api import predict
from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.parallel.framework import DEFAULT_FRAMEWORK, collective_host_s, framework_of
from gpucast.job import Job, JobError
from gpucast.plan import Parallel

GPT = dict(model_type="gpt2", n_embd=512, n_head=8, n_layer=4, vocab_size=1000, n_positions=512, bos_token_id=0, eos_token_id=0)


def _plan(cfg=GPT, batch=1, seq=128, gpus=8, **par):
    job = Job.from_hf_config(cfg, batch_size=batch, seq_len=seq, precision="bf16", optimizer="adamw", gpus=gpus,
                             parallel=dict(par))
    return predict(job, gpu="a100-80gb")


@pytest.mark.parametrize("par,name", [
    (dict(tensor=2), "megatron"), (dict(pipeline=2), "megatron"), (dict(sharding="zero2"), "deepspeed"),
    (dict(sharding="zero3"), "deepspeed"), (dict(sharding="fsdp-full"), "fsdp"), (dict(), "torch"),
    (dict(sharding="zero1", framework="megatron"), "megatron"), (dict(tensor=2, framework="torch"), "torch"),
])
def test_the_default_framework_follows_the_plan(par, name):
    assert framework_of(Parallel(**par)) == name


def test_a_bad_framework_is_one_line_naming_the_field():
    with pytest.raises(JobError, match="parallel.framework.*megatron, deepspeed, fsdp, torch"):
        Job.from_hf_config(GPT, batch_size=1, seq_len=64, gpus=2, parallel=dict(framework="jax"))


def test_with_no_framework_python_the_host_pays_one_c10d_call_per_collective():
    per_call = []
    for par in (dict(tensor=2, framework="torch"), dict(tensor=2, recompute="full", grad_accum=3, framework="torch"),
                dict(grad_accum=2)):
        pl = _plan(**par).plan
        assert pl["framework"] == "torch" and pl["comm_calls"] > 0
        per_call.append(pl["framework_host_s"] / pl["comm_calls"])
    assert per_call[0] == pytest.approx(per_call[1], rel=1e-9) == pytest.approx(per_call[2], rel=1e-9)
    one = collective_host_s(1, EstimatorConfig(), DEFAULT_FRAMEWORK)
    assert 0.3 * one < per_call[0] < 3 * one  # one call's price times the cluster host's speed


def test_megatron_host_work_is_per_layer():
    def python_part(layers):
        pl = _plan(dict(GPT, n_layer=layers), tensor=2, recompute="full").plan
        torch_pl = _plan(dict(GPT, n_layer=layers), tensor=2, recompute="full", framework="torch").plan
        return pl["framework_host_s"] - torch_pl["framework_host_s"]
    four, eight = python_part(4), python_part(8)
    assert four > 0
    assert eight / four == pytest.approx(2.0, rel=0.1)  # the embeddings' and head's tensors, once a rank


def test_host_work_costs_step_time_only_where_the_host_sets_the_pace():
    # sequence parallelism off: the same kernels under both frameworks, only the host work differs
    small = [_plan(batch=1, seq=64, tensor=2, framework=f, sequence=False) for f in ("megatron", "torch")]
    assert small[0].step_time_s > 1.1 * small[1].step_time_s
    big_cfg = dict(GPT, n_embd=2048, n_head=16)
    big = [_plan(big_cfg, batch=16, seq=512, tensor=2, framework=f, sequence=False) for f in ("megatron", "torch")]
    assert big[0].plan["framework_host_s"] > big[1].plan["framework_host_s"]
    assert big[0].step_time_s == pytest.approx(big[1].step_time_s, rel=0.02)
