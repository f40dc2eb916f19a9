"""``advise --serve`` (gpucast.advisor.serving): the cheapest deployment that meets the targets, and why
the others do not (real predictions of a small Llama-shaped decoder)."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig

from gpucast.advisor.serving import advise_serving
from gpucast.job import Job, JobError

SMALL = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=2, vocab_size=4096, max_position_embeddings=4096).to_dict()


def _job(**serve):
    return Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                              serve=dict(input_len=256, output_len=32, request_rate=20.0, num_requests=60, **serve))


def test_the_answer_is_the_cheapest_feasible_option():
    a = advise_serving(_job(), ["l4", "a100-80gb", "h100"], tensors=(1, 2), tpot_s=0.5)
    assert len(a.options) == 6
    feasible = [o for o in a.options if o.feasible]
    assert feasible and a.best is not None
    best = a.options[a.best]
    assert best.usd_per_million_tokens == min(o.usd_per_million_tokens for o in feasible)
    # a price per million tokens is the GPUs' hourly price over the tokens of an hour
    assert best.usd_per_million_tokens == pytest.approx(
        best.usd_per_gpu_hour * best.tensor / (best.output_tokens_per_s * 3600) * 1e6)
    assert best.gpu in a.message and "cheapest" in a.message


def test_an_impossible_target_is_refused_with_its_reason():
    a = advise_serving(_job(), ["a100-80gb"], tensors=(1,), ttft_s=1e-6)
    assert a.best is None and "TTFT" in a.options[0].why and "no deployment" in a.message


def test_only_serving_jobs_are_advised():
    with pytest.raises(JobError, match="mode 'serve'"):
        advise_serving(Job("resnet50"), ["a100-80gb"])
