"""Sliding-window attention under Transformer Engine's fused kernels (gpucast.graph.windows, graph.te) on a
real transformers GPT-OSS traced on the meta device: its eager sink attention becomes the fused kernel,
and a sliding layer's kernels carry only their band of a causal attention's FLOPs."""

from __future__ import annotations

import pytest

import gpucast
from gpucast.api import capture_job, trace
from gpucast.graph import windows
from gpucast.job import Job

OSS = dict(model_type="gpt_oss", hidden_size=512, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
           num_key_value_heads=2, head_dim=64, num_local_experts=8, num_experts_per_tok=2, vocab_size=1024,
           sliding_window=128, layer_types=["sliding_attention", "full_attention"])


def _job(megatron=True):
    par = dict(tensor=2, framework="megatron") if megatron else dict(sharding="fsdp-full")
    return Job.from_hf_config(OSS, batch_size=1, seq_len=1024, precision="bf16", optimizer="adamw", gpus=2,
                              parallel=par)


def test_a_band_is_its_share_of_the_causal_triangle():
    assert windows.band_share(512, 1024) == pytest.approx((512 * 512 + 512 * 512 / 2) / (1024 * 1024 / 2))
    assert windows.band_share(1024, 1024) == 1.0 and windows.band_share(0, 1024) == 1.0
    assert windows.windows_of(_job()) == [128, 0]


def test_transformer_engines_capture_runs_sinks_as_fused_attention():
    te = trace(capture_job(_job()))
    eager = trace(capture_job(_job(megatron=False)))
    assert {o.category for o in te.ops if o.op.startswith("_scaled_dot_product")} == {"attention"}
    assert not any(o.op == "bmm" for o in te.ops if o.block >= 0)          # no s x s scores in GEMMs
    assert any(o.op == "bmm" for o in eager.ops if o.block >= 0)           # the model file's eager attention
    assert not any(o.category == "attention" for o in eager.ops)


def test_only_the_sliding_layers_attention_is_cut_to_its_band():
    job = capture_job(_job())
    whole = trace(job)
    cut = windows.view(whole, job)
    share = windows.band_share(128, 1024)
    for a, b in zip(whole.ops, cut.ops):
        if a.category == "attention" and a.block == 0:
            assert b.flops == int(a.flops * share)
        else:
            assert a == b
    p = gpucast.predict(_job(), "h100")
    assert any("sliding-window attention: 1 of 2 layers" in n for n in p.notes)
    # outside Transformer Engine's capture nothing is cut (PyTorch's SDPA masks every tile)
    eager = gpucast.predict(_job(megatron=False), "h100")
    assert not any("sliding-window attention" in n for n in eager.notes)
