"""CPU activation offloading (parallel.offload, gpucast.estimate.parallel.offload) on a real transformers
Llama traced on the meta device: the activations it takes off the GPU, the copies' exposed time by its
closed form, the errors."""

from __future__ import annotations

import pytest

from gpucast.api import trace
from gpucast.estimate.parallel import estimate_plan
from gpucast.estimate.parallel.activations import per_block
from gpucast.estimate.parallel.offload import exposed_s
from gpucast.hardware import get_gpu
from gpucast.job import Job, JobError

LLAMA = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=16, vocab_size=4096)


def _job(mode="train", gpus=2, **par):
    return Job.from_hf_config(LLAMA, batch_size=4, seq_len=2048, precision="bf16", optimizer="adamw", gpus=gpus, mode=mode,
                              parallel=dict(dict(framework="megatron", sharding="zero1", tensor=2), **par))


def _estimate(job):
    return estimate_plan(trace(job), job, get_gpu("h100"))


def test_offloaded_layers_leave_one_layer_in_transit():
    lay = trace(_job()).layout
    one = per_block(lay, 2, "none", True)        # tensor 2 under sequence parallelism (Megatron's default)
    base = _estimate(_job()).memory.breakdown["activations"]
    for n in (2, 5):
        got = _estimate(_job(offload=n)).memory.breakdown["activations"]
        assert base - got == pytest.approx((n - 1) * one, rel=1e-6)   # n layers leave, one is in transit


def test_the_copies_show_only_beyond_the_compute_beside_them():
    assert exposed_s(0, 63, 0.8, 1.0, 1.0) == 0
    copy = 8e9 / (50e9 * 0.8)                    # 8 GB each way over a 50 GB/s link at 80 %
    assert exposed_s(8e9, 50, 0.8, 0.1, 0.3) == pytest.approx(copy - 0.1)          # the backward hides its copy
    assert exposed_s(8e9, 50, 0.8, 0.05, 0.1) == pytest.approx((copy - 0.05) + (copy - 0.1))
    # in a plan: more offloaded layers, more bytes each way beside the same compute
    secs = [_estimate(_job(offload=n)).plan["step_breakdown_s"]["offload_s"] for n in (0, 3, 7)]
    assert secs[0] == 0 and secs[0] <= secs[1] <= secs[2]


@pytest.mark.parametrize("job, words", [
    (lambda: _job(offload=8), "must leave a layer of each stage"),
    (lambda: _job(gpus=4, offload=4, pipeline=2), "a stage holds 4"),
    (lambda: _job(mode="infer", offload=1), "applies to mode 'train'"),
])
def test_impossible_offloads_are_one_error_line(job, words):
    with pytest.raises(JobError) as e:
        _estimate(job())
    assert words in str(e.value) and "\n" not in str(e.value)
