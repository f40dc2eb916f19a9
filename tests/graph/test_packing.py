"""Sequence packing (data.packed_sample_len, gpucast.graph.packing) on a real transformers Llama traced on
the meta device: the fused attention kernels carry L / s of their FLOPs, nothing else changes."""

from __future__ import annotations

import pytest

import gpucast
from gpucast.api import explain, trace
from gpucast.graph import packing
from gpucast.job import Job, JobError

LLAMA = dict(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=8, vocab_size=1024)


def _job(packed=None, seq=2048):
    return Job.from_hf_config(LLAMA, batch_size=2, seq_len=seq, precision="bf16", optimizer="adamw",
                              data={"packed_sample_len": packed} if packed else None)


def test_attention_per_sample_carries_l_over_s_of_the_flops():
    whole = trace(_job())
    packed = packing.view(whole, _job(256))
    assert packing.factor(_job(256), 2048) == 256 / 2048
    pairs = list(zip(whole.ops, packed.ops))
    attention = [(a, b) for a, b in pairs if a.category == "attention"]
    assert attention and all(b.flops == int(a.flops * 256 / 2048) and b.bytes == a.bytes for a, b in attention)
    assert all(a == b for a, b in pairs if a.category != "attention")
    assert packing.view(whole, _job()) is whole
    assert any("sequence packing" in n for n in packed.notes)


def test_a_packed_job_is_faster_and_says_so():
    full, packed = explain(_job(), "h100"), explain(_job(128), "h100")
    assert packed.prediction.step_time_s < full.prediction.step_time_s
    assert any("sequence packing" in n for n in packed.prediction.notes)
    # a sample as long as the sequence is no packing at all
    assert gpucast.predict(_job(2048), "h100").step_time_s == pytest.approx(full.prediction.step_time_s)


def test_samples_longer_than_the_sequence_are_one_error_line():
    with pytest.raises(JobError) as e:
        gpucast.predict(_job(4096, seq=2048), "h100")
    assert "data.packed_sample_len" in str(e.value) and "\n" not in str(e.value)
