"""Disaggregated prefill and decode (serve.prefill_replicas).

The independent reasons: a request that arrives with its K/V needs no prefill, only its decode steps; a
closed loop of C clients never has more than C requests in flight, however its two sides are timed; the
K/V move cannot beat the link's bandwidth; prefills on replicas of their own do not wait behind decode
iterations, so the first token comes no later than when they share the GPUs."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import LlamaConfig

import gpucast
from gpucast.estimate.serving.run import Requests, simulate
from gpucast.hardware import get_gpu
from gpucast.job import Job, JobError

LLAMA = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                    num_key_value_heads=4, vocab_size=32000, max_position_embeddings=8192).to_dict()


def _job(gpus=4, **serve):
    return Job.from_hf_config(LLAMA, batch_size=8, precision="bf16", mode="serve", gpus=gpus,
                              serve=dict(dict(input_len=2048, output_len=64), **serve))


def _flat(*_):
    return 0.01, 0.01


def test_a_request_with_its_kv_only_decodes():
    req = Requests(np.zeros(2), np.zeros(2, dtype=np.int64), np.array([5, 3]), cached=np.array([1000, 500]))
    r = simulate(req, _flat, 256, 8192, 10**5, 16, True, "poisson")
    assert r.iterations == 5 and np.allclose(r.finish_s, [0.05, 0.03])
    assert r.peak_kv_tokens >= 1000 + 500   # both prompts' blocks held while they decode
    # a cache too small for the arriving K/V: it never starts
    small = simulate(req, _flat, 256, 8192, 256, 16, True, "poisson")
    assert np.isnan(small.finish_s).all() and small.notes


def test_a_closed_loop_keeps_its_clients_requests_in_flight():
    s = gpucast.predict(_job(prefill_replicas=1, concurrency=16, num_requests=96), "h100").serving
    assert s["finished"] == s["requests"] == 96 and s["disagg"]["decode_replicas"] == 3
    from gpucast.estimate.serving import disagg

    # the send times the loop settles on: the first 16 at once, each later one at an earlier one's return
    finish = np.sort(np.random.default_rng(0).uniform(1, 2, 40))
    sends = disagg._closed_arrivals(finish, 16)
    assert (sends[:16] == 0).all() and np.array_equal(sends[16:], finish[:24])
    in_flight = [(sends <= t).sum() - (finish <= t).sum() for t in np.concatenate([sends, finish])]
    assert max(in_flight) <= 16


def test_the_kv_move_is_no_faster_than_the_link():
    s = gpucast.predict(_job(prefill_replicas=2, request_rate=5.0, num_requests=20), "h100").serving
    per_token = s["kv_bytes_per_token"]   # one rank's: tensor degree 1
    nvlink = get_gpu("h100").nvlink_gbs * 1e9
    assert s["disagg"]["kv_move_s"] >= 2048 * per_token / nvlink


def test_prefills_on_their_own_replicas_do_not_wait_behind_decodes():
    load = dict(output_len=512, request_rate=12.0, num_requests=120)
    shared = gpucast.predict(_job(**load), "h100").serving
    split = gpucast.predict(_job(prefill_replicas=1, **load), "h100").serving
    assert split["ttft_s"] <= shared["ttft_s"] and split["finished"] == split["requests"]


def test_a_split_needs_a_decode_replica_and_a_continuous_engine():
    with pytest.raises(JobError, match="must leave at least one of the deployment's 4 replicas") as err:
        gpucast.predict(_job(prefill_replicas=4), "h100")
    assert "\n" not in str(err.value)
    with pytest.raises(JobError, match="disaggregated prefill and decode run in vllm, sglang or trtllm"):
        gpucast.predict(_job(prefill_replicas=1, engine="hf"), "h100")
    with pytest.raises(JobError, match="serve.prefill_replicas"):
        _job(prefill_replicas=0)


def _tp(gpus, **serve):
    return _job(gpus, **serve).with_(parallel={"tensor": 2})


def test_prefill_instances_of_their_own_degree_take_their_gpus():
    s = gpucast.predict(_tp(8, prefill_replicas=2, prefill_tensor=1, request_rate=4.0, num_requests=24),
                        "h100").serving
    # 2 prefill instances of 1 GPU leave 6 GPUs: 3 decode instances of tensor 2
    assert s["disagg"] == dict(s["disagg"], prefill_replicas=2, prefill_tensor=1, decode_replicas=3)
    assert s["finished"] == s["requests"] == 24
    # each decode rank keeps half the K/V heads; a 1-GPU prefill instance sends both halves over its link
    nvlink = get_gpu("h100").nvlink_gbs * 1e9
    assert s["disagg"]["kv_move_s"] >= 2048 * 2 * s["kv_bytes_per_token"] / nvlink


def test_wider_prefill_instances_prefill_a_long_prompt_sooner():
    load = dict(input_len=8000, output_len=16, request_rate=0.2, num_requests=6)   # one prompt at a time
    narrow = gpucast.predict(_tp(4, prefill_replicas=1, **load), "h100").serving
    wide = gpucast.predict(_tp(6, prefill_replicas=1, prefill_tensor=4, **load), "h100").serving
    assert wide["disagg"]["prefill_tensor"] == 4 and wide["disagg"]["decode_replicas"] == 1
    assert wide["ttft_s"] < narrow["ttft_s"]   # the prompt's GEMMs split over four ranks, not two


def test_prefill_degrees_that_do_not_fit_are_refused_in_one_line():
    with pytest.raises(JobError, match="must be a whole number \\(at least one\\) of decode instances") as err:
        gpucast.predict(_tp(8, prefill_replicas=1, prefill_tensor=1), "h100")   # 7 GPUs left for tensor 2
    assert "\n" not in str(err.value)
    with pytest.raises(JobError, match="must divide the model's 16 attention heads"):
        gpucast.predict(_tp(8, prefill_replicas=1, prefill_tensor=3), "h100")
    with pytest.raises(JobError, match="set serve.prefill_replicas too"):
        _job(prefill_tensor=2)
