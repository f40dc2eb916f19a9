"""A language model's loss as trainers compute it (stack.loss, gpucast.graph.lm_loss): what each way
holds and computes, checked against the logits' own size and the head's GEMM FLOPs."""

from __future__ import annotations

import pytest

from gpucast.graph.lm_loss import liger_chunk
from gpucast.graph.tracer import CaptureError, capture
from gpucast.job import Job, JobError

N, T, H, V = 4, 128, 64, 5000
CFG = {"model_type": "gpt2", "n_layer": 1, "n_embd": H, "n_head": 2, "vocab_size": V, "n_positions": T,
       "bos_token_id": 0, "eos_token_id": 0}


def _trace(loss, precision="bf16"):
    return capture(Job.from_hf_config(CFG, batch_size=N, seq_len=T, precision=precision, optimizer="adamw",
                                      stack={"loss": loss} if loss else None))


@pytest.fixture(scope="module")
def traces():
    return {loss: _trace(loss) for loss in (None, "upcast", "fused", "chunked")}


def _head_flops(phase_ops):
    """FLOPs of the GEMMs whose one side is the vocabulary (the head's)."""
    return sum(o.flops for o in phase_ops if o.category == "matmul" and any(V in s for s in o.shapes if s))


def test_unset_is_the_models_own_upcast(traces):
    assert [o.op for o in traces[None].ops] == [o.op for o in traces["upcast"].ops]
    assert traces[None].memory.peak_allocated_bytes == traces["upcast"].memory.peak_allocated_bytes


def test_what_each_way_holds(traces):
    logits_bf16 = N * T * V * 2
    peak = {k: t.memory.peak_allocated_bytes for k, t in traces.items()}
    # upcast holds an fp32 log-softmax (twice the bf16 logits) and its fp32 gradient on top of the logits
    assert peak["upcast"] - peak["fused"] >= 1.5 * logits_bf16
    # fused holds the bf16 logits themselves; chunked never holds them whole (one chunk at a time)
    assert peak["fused"] - peak["chunked"] >= 0.9 * logits_bf16


def test_the_same_head_math_moved_not_changed(traces):
    # Every way computes the head's three GEMMs (logits, d hidden, d weight) once: 3 x 2 N T H V.
    three = 3 * 2 * N * T * H * V
    for loss in ("upcast", "fused", "chunked"):
        assert _head_flops(traces[loss].ops) == pytest.approx(three, rel=0.02), loss
    # chunked takes the gradients in the forward: no head GEMM is left for the backward
    assert _head_flops([o for o in traces["chunked"].ops if o.phase == "bwd"]) == 0
    assert _head_flops([o for o in traces["fused"].ops if o.phase == "bwd"]) == pytest.approx(2 * 2 * N * T * H * V,
                                                                                               rel=0.02)


def test_chunked_takes_liger_chunks(traces):
    chunk = liger_chunk(N * T, H, V)
    logits_gemms = [o for o in traces["chunked"].ops if o.phase == "loss" and o.category == "matmul"
                    and any(s == (chunk, V) for s in o.shapes)]
    assert len(logits_gemms) >= (N * T) // chunk


@pytest.mark.parametrize("tokens, hidden, vocab, chunk", [
    (16384, 2048, 50257, 1024),  # ceil(50257/2048) = 25 chunks of ceil(16384/25) = 656 -> 1024
    (4096, 4096, 32000, 512),    # 8 chunks of 512
    (10, 4096, 1000, 16),        # fewer tokens than chunks: one chunk of the next power of two
])
def test_liger_chunk(tokens, hidden, vocab, chunk):
    assert liger_chunk(tokens, hidden, vocab) == chunk


def test_under_autocast_and_in_a_zoo_language_model():
    amp = {loss: _trace(loss, "amp-bf16").memory.peak_allocated_bytes for loss in ("upcast", "fused", "chunked")}
    assert amp["upcast"] > amp["fused"] > amp["chunked"]
    zoo = capture(Job("gpt2", batch_size=1, seq_len=128, precision="bf16", stack={"loss": "chunked"}))
    assert zoo.memory.peak_allocated_bytes > 0


def test_a_model_without_a_head_and_a_bad_value_are_one_line_errors():
    with pytest.raises(CaptureError, match="applies to language models") as info:
        capture(Job("resnet18-cifar", batch_size=2, stack={"loss": "fused"}))
    assert "\n" not in str(info.value)
    with pytest.raises(JobError, match="stack.loss"):
        Job("gpt2", stack={"loss": "liger"})


def test_inference_ignores_it():
    a = capture(Job.from_hf_config(CFG, batch_size=N, seq_len=T, mode="infer"))
    b = capture(Job.from_hf_config(CFG, batch_size=N, seq_len=T, mode="infer", stack={"loss": "chunked"}))
    assert [o.op for o in a.ops] == [o.op for o in b.ops]
