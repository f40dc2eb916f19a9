"""The serving model (mode 'serve'): the job group's validation, the engine's scheduler, KV capacity and
an end-to-end prediction on real Hugging Face model definitions (built on the meta device).

Expected values come from closed forms stated per test (bytes per token, the scheduler's iteration
counts for a constant-cost iteration), not from the code's own output."""

from __future__ import annotations

import math

import numpy as np
import pytest
from transformers import LlamaConfig

import gpucast
from gpucast.estimate.serving.run import Requests, simulate, static_batches
from gpucast.job import Job, JobError
from gpucast.serving import Serve

TINY = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                   num_key_value_heads=2, vocab_size=1024, max_position_embeddings=4096).to_dict()
# Llama-3-8B's published config.json shape
LLAMA3_8B = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192).to_dict()


def _job(cfg=TINY, batch_size=4, **serve):
    return Job.from_hf_config(cfg, batch_size=batch_size, precision="bf16", mode="serve",
                              serve=serve or dict(input_len=64, output_len=16), **serve.pop("_job", {}))


# ----------------------------------------------------------------- the job group
@pytest.mark.parametrize("serve, needle", [
    (dict(input_len=-3), "serve.input_len"),
    (dict(output_len="lognormal:abc"), "serve.output_len"),
    (dict(engine="tgi"), "serve.engine"),
    (dict(concurrency=4, request_rate=2.0), "two kinds of load"),
    (dict(gpu_memory_utilization=1.5), "serve.gpu_memory_utilization"),
    (dict(kv_cache_dtype="int8"), "serve.kv_cache_dtype"),
    (dict(bogus=1), "serve.bogus"),
])
def test_bad_serve_fields_are_one_line_errors(serve, needle):
    with pytest.raises(JobError) as e:
        Job.from_hf_config(TINY, batch_size=4, precision="bf16", mode="serve", serve=serve)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_serve_group_needs_serve_mode_and_a_decoder_config():
    with pytest.raises(JobError, match="applies to mode 'serve'"):
        Job.from_hf_config(TINY, batch_size=4, precision="bf16", mode="infer", serve=dict(input_len=8))
    with pytest.raises(JobError, match="Hugging Face decoder"):
        Job(model="resnet50", mode="serve")


def test_serve_jobs_round_trip_through_json():
    job = _job(input_len="lognormal:512,0.5", output_len=128, request_rate=3.5, engine="sglang")
    again = Job.from_dict(job.to_dict())
    assert again == job and again.key == job.key and again.serve.load == "poisson"


def test_requests_longer_than_the_context_and_odd_tensor_degrees_are_refused():
    with pytest.raises(JobError, match="more than the model's 4096.*VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        gpucast.predict(_job(input_len=4000, output_len=200), "a100-40gb")
    # the engine told to take longer requests (vLLM's --max-model-len past the config) serves it ...
    longer = gpucast.predict(_job(input_len=4000, output_len=200, max_model_len=8192), "a100-40gb").serving
    assert longer["finished"] == longer["requests"]
    # ... and a shorter limit refuses what the model would take, naming the field
    with pytest.raises(JobError, match=r"more than serve.max_model_len \(1024\)"):
        gpucast.predict(_job(input_len=1000, output_len=200, max_model_len=1024), "a100-40gb")
    job = Job.from_hf_config(TINY, batch_size=2, precision="bf16", mode="serve", gpus=3, parallel=dict(tensor=3),
                             serve=dict(input_len=16, output_len=4))
    with pytest.raises(JobError, match="must divide the model's 8 attention heads"):
        gpucast.predict(job, "a100-40gb")


# ----------------------------------------------------------------- the scheduler
def _flat(ntok, ndec, dctx, ptok, pctx, npre=1):
    return 0.01, 0.01  # every iteration 10 ms: counts of iterations are what is checked


def test_a_static_batch_prefills_once_then_decodes_each_token():
    # 8 prompts of 100 tokens fit one 8,192-token iteration, whose end samples each first token;
    # 9 more decode iterations give the other 9 of 10 tokens.
    r = simulate(Requests(np.zeros(8), np.full(8, 100), np.full(8, 10)), _flat, 256, 8192, 10**6, 16, True)
    assert r.iterations == 10 and r.max_batch == 8 and r.preemptions == 0
    assert np.allclose(r.first_token_s, 0.01) and np.allclose(r.finish_s, 0.10)
    h = static_batches(Requests(np.zeros(8), np.full(8, 100), np.full(8, 10)), _flat, 8)
    assert h.iterations == 10 and np.allclose(h.finish_s, 0.10)


def test_chunked_prefill_spreads_a_long_prompt_over_the_token_budget():
    # 10,000 prompt tokens at 4,096 an iteration: 3 iterations before the first token
    r = simulate(Requests(np.zeros(1), np.array([10_000]), np.array([2])), _flat, 256, 4096, 10**6, 16, True)
    assert r.iterations == 4 and math.isclose(r.first_token_s[0], 0.03)
    # without chunking a prompt larger than the budget never starts
    r = simulate(Requests(np.zeros(1), np.array([10_000]), np.array([2])), _flat, 256, 4096, 10**6, 16, False)
    assert np.isnan(r.finish_s[0]) and r.notes


def test_a_full_cache_preempts_and_recomputes_but_every_request_finishes():
    # 20 requests of 300 + 200 tokens need 10,000 tokens of cache; 2,048 hold four at a time
    req = Requests(np.zeros(20), np.full(20, 300), np.full(20, 200))
    r = simulate(req, _flat, 256, 8192, 2048, 16, True)
    assert r.preemptions > 0 and np.isfinite(r.finish_s).all() and r.peak_kv_tokens <= 2048
    roomy = simulate(req, _flat, 256, 8192, 10**6, 16, True)
    assert roomy.preemptions == 0 and np.nanmax(roomy.finish_s) < np.nanmax(r.finish_s)


def test_guaranteed_no_evict_admits_what_the_cache_holds_to_their_end_and_never_preempts():
    # each request ends at 500 tokens, 32 blocks of 16; 2,048 tokens (128 blocks) hold four at their end, while
    # their 300-token prompts (19 blocks) would let six start
    req = Requests(np.zeros(20), np.full(20, 300), np.full(20, 200))
    r = simulate(req, _flat, 256, 8192, 2048, 16, True, no_evict=True)
    assert r.preemptions == 0 and np.isfinite(r.finish_s).all() and r.max_batch == 4
    evicting = simulate(req, _flat, 256, 8192, 2048, 16, True)
    assert evicting.max_batch == 6 and evicting.preemptions > 0


def test_a_closed_loop_keeps_its_concurrency():
    req = Requests(np.zeros(40), np.full(40, 32), np.full(40, 8))
    r = simulate(req, _flat, 256, 8192, 10**6, 16, True, "closed", 5)
    assert r.max_batch == 5 and np.isfinite(r.finish_s).all()
    assert r.iterations >= 40 // 5 * 8  # eight rounds of five, each at least its 8 tokens
    # each later request arrives when an earlier one returns: its latency is its own, not the queue's
    e2e = r.finish_s - r.arrival_s
    assert np.all(r.arrival_s[5:] > 0) and e2e.max() < 2 * e2e.min()


# ----------------------------------------------------------------- memory
def test_kv_capacity_of_llama3_8b_on_an_a100_40gb_is_the_closed_form():
    # vLLM at gpu_memory_utilization 0.9: 0.9 x 40 GiB, less the weights (8.03 B parameters in bf16),
    # the CUDA context and graph pools and the profiled activations, over K/V bytes per token
    # (32 layers x 8 KV heads x 128 x 2 x 2 B = 131,072 B).
    p = gpucast.predict(_job(LLAMA3_8B, batch_size=1, input_len=128, output_len=8), "a100-40gb")
    s = p.serving
    assert s["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2
    mem = s["memory"]
    assert mem["weights_bytes"] == pytest.approx(8.03e9 * 2, rel=0.01)
    free = 0.9 * 40 * 2**30 - mem["weights_bytes"] - mem["non_torch_bytes"]
    assert mem["non_torch_bytes"] <= 1.5 * 2**30 and mem["activation_bytes"] <= 2 * 2**30
    closed = (free - mem["activation_bytes"]) / 131072
    assert s["kv_cache_tokens"] == pytest.approx(closed, rel=0.02)
    assert 0.85 * free / 131072 < s["kv_cache_tokens"] < free / 131072


def test_tensor_parallelism_fp8_cache_and_int4_weights_change_what_they_should():
    base = gpucast.predict(_job(batch_size=2, input_len=64, output_len=8), "a100-40gb").serving
    tp = gpucast.predict(Job.from_hf_config(TINY, batch_size=2, precision="bf16", mode="serve", gpus=2,
                                            parallel=dict(tensor=2), serve=dict(input_len=64, output_len=8)),
                         "a100-40gb").serving
    assert tp["memory"]["weights_bytes"] == pytest.approx(base["memory"]["weights_bytes"] / 2, rel=0.01)
    assert tp["kv_bytes_per_token"] == base["kv_bytes_per_token"] // 2  # 2 KV heads over 2 ranks
    fp8 = gpucast.predict(_job(batch_size=2, input_len=64, output_len=8, kv_cache_dtype="fp8"), "a100-40gb").serving
    assert fp8["kv_bytes_per_token"] == base["kv_bytes_per_token"] // 2
    int4 = gpucast.predict(_job(batch_size=2, input_len=64, output_len=8, weights="int4"), "a100-40gb").serving
    assert int4["memory"]["weights_bytes"] < 0.3 * base["memory"]["weights_bytes"]


# ----------------------------------------------------------------- end to end
def test_a_deployment_prediction_answers_every_serving_key():
    p = gpucast.predict(_job(batch_size=4, input_len="lognormal:64,0.3", output_len=16, request_rate=50.0,
                             num_requests=40), "h100")
    s = p.serving
    from gpucast.estimate.serving import KEYS

    assert set(KEYS) <= set(s) and s["finished"] == 40 and s["load"] == "poisson"
    assert 0 < s["ttft_s"] <= s["e2e_p50_s"] <= s["e2e_p99_s"] and s["tpot_s"] > 0
    assert p.step_time_s > 0 and 0 < p.gpu_util_pct <= 100 and p.fits_in_memory
    assert gpucast.prediction.Prediction.from_dict(p.to_dict()) == p


def test_a_bigger_gpu_serves_faster_and_decode_reads_the_weights():
    llama = _job(LLAMA3_8B, batch_size=1, input_len=128, output_len=32)
    a100, h100 = (gpucast.predict(llama, g).serving for g in ("a100-40gb", "h100"))
    assert h100["tpot_s"] < a100["tpot_s"]
    # batch 1 decode reads 16 GB of weights a token: no faster than the DRAM roofline allows
    assert a100["tpot_s"] > 16.06e9 / 1555e9 and a100["tpot_s"] < 2.5 * 16.06e9 / 1555e9


def test_serve_is_a_mode_of_the_spec_dataclass():
    assert Serve(concurrency=8).load == "closed" and Serve().load == "static"


def test_engines_take_the_host_time_fitted_on_measured_runs():
    # data/serving_fit.json (benchmarks/llm_inference_a100.py --write-fit) replaces the priors it covers
    import json
    from importlib import resources

    from gpucast.estimate.serving.engines import ENGINES, resolve

    fit = json.loads(resources.files("gpucast").joinpath("data/serving_fit.json").read_text())["host_per_iteration_s"]
    from gpucast.estimate.serving.engines import FITTED_RELEASE, RELEASES

    for name, value in fit.items():   # on the release it was measured on (TensorRT-LLM 0.11's runs)
        version = FITTED_RELEASE.get(name)
        assert resolve(Serve(engine=name, engine_version=version)).host_per_iteration_s == value
        assert 0 <= value <= 0.03  # the fit's grid
    # a release the fit was not measured on keeps its own prior
    assert resolve(Serve(engine="trtllm", engine_version="1.0")).host_per_iteration_s == \
        RELEASES[("trtllm", "1.0")].host_per_iteration_s
    assert resolve(Serve(engine="sglang")).host_per_iteration_s == ENGINES["sglang"].host_per_iteration_s
    assert resolve(Serve(engine="vllm", max_num_seqs=8)).max_num_seqs == 8
