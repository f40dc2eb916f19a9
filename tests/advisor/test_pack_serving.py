"""``gpucast pack`` with LLM serving deployments (gpucast.advisor.pack_serving).

A preallocating engine takes ``gpu_memory_utilization`` of the whole GPU (vLLM: 0.9), so two of them
do not fit one GPU as configured alone; pack starts each at a share that holds its load, and the
shares leave the other jobs their peaks:

* each share covers the engine's need (weights, activations, memory outside the allocator and the KV
  cache its run held) and all shares stay within the engines' total of 0.9 of the GPU;
* each serving job, predicted again at its share, still finishes its requests, and its TPOT under a
  shared arrangement is its TPOT at the share stretched by that job's slowdown there (never below
  its TPOT alone on the whole GPU);
* deployments whose needs exceed the GPU are said not to fit.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpucast import Job
from gpucast.advisor import pack_serving
from gpucast.advisor.pack import pack
from gpucast.api import predict

SMALL = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)


def _serve(rate, n_in=512, n_out=128, engine="vllm"):
    return Job.from_hf_config(SMALL, batch_size=8, precision="bf16", mode="serve",
                              serve=dict(engine=engine, input_len=n_in, output_len=n_out, request_rate=rate))


@pytest.fixture(scope="module")
def packed():
    return pack([_serve(2), _serve(6), Job(model="resnet18", batch_size=32)], "a100-80gb")


def test_alone_each_engine_takes_most_of_the_gpu_so_pack_gives_shares(packed):
    gpu = packed.gpu_memory_bytes
    assert sum(packed.memory_bytes[:2]) > gpu  # each engine alone: 0.9 of the GPU
    shares = packed.memory_shares
    assert shares[2] is None and all(f is not None for f in shares[:2])
    assert sum(shares[:2]) <= pack_serving.TOTAL_UTILIZATION + 1e-9
    for job, f in zip((_serve(2), _serve(6)), shares[:2]):
        need = pack_serving.need_bytes(predict(job, "a100-80gb"))
        assert f * gpu >= need
    assert packed.shared_memory_bytes <= gpu
    shared = [a for a in packed.arrangements if a.mode != "mig"]
    assert shared and all(a.memory_fits for a in shared)


def test_serving_latencies_under_sharing_are_stretched_by_the_slowdown(packed):
    solo = packed.solo_serving
    for a in packed.arrangements:
        assert a.serving[2] is None  # the training job has no serving figures
        for k in (0, 1):
            here = a.serving[k]
            assert here["tpot_s"] >= solo[k]["tpot_s"] * 0.999
            assert here["ttft_s"] > 0
    mps = next(a for a in packed.arrangements if a.mode == "mps")
    job = _serve(2)
    at_share = predict(job.with_(serve=replace(job.serve, gpu_memory_utilization=packed.memory_shares[0])), "a100-80gb")
    own = at_share.step_time_s / predict(_serve(2), "a100-80gb").step_time_s
    assert mps.serving[0]["tpot_s"] == pytest.approx(at_share.serving["tpot_s"] * mps.slowdowns[0] / own, rel=1e-9)
    d = packed.to_dict()
    assert d["jobs"][0]["gpu_memory_utilization"] == packed.memory_shares[0]
    assert "serving" in d["arrangements"][0] and d["jobs"][0]["serving"]["tpot_s"] == solo[0]["tpot_s"]


def test_deployments_whose_needs_exceed_the_gpu_do_not_fit():
    big = dict(SMALL, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256)  # Llama-3-8B's shape: 16 GB of bf16 weights
    jobs = [Job.from_hf_config(big, batch_size=8, precision="bf16", mode="serve",
                               serve=dict(engine="vllm", input_len=512, output_len=64, request_rate=1)) for _ in range(3)]
    res = pack(jobs, "a100-40gb")
    assert sum(pack_serving.need_bytes(predict(jobs[0], "a100-40gb")) for _ in jobs) > 0.9 * res.gpu_memory_bytes
    assert not any(a.memory_fits for a in res.arrangements if a.mode != "mig")
    assert any("do not fit" in line for line in res.why)
