"""Engine releases (serve.engine_version), trtllm-bench's batch sizing for an all-at-once load, and two
pieces of an iteration's cost: prompts prefilled together attend each within itself, and W8A8 FP8 GEMMs
run on the FP8 tensor cores. A real transformers Llama traced on the meta device."""

from __future__ import annotations

import dataclasses

import pytest

import gpucast
from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.environment import Environment
from gpucast.estimate.serving.bench import trtllm_bench_sizes
from gpucast.estimate.serving.engines import resolve, sglang_defaults, sglang_max_requests
from gpucast.plan import Parallel
from gpucast.estimate.serving.iteration import iteration_model
from gpucast.hardware import get_gpu
from gpucast.job import Job, JobError
from gpucast.serving import Serve
from gpucast.surroundings import SpecError

LLAMA = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=8192, tie_word_embeddings=False)


def _job(precision="bf16", **serve):
    return Job.from_hf_config(LLAMA, batch_size=serve.pop("batch", 64), mode="serve", precision=precision,
                              serve=dict(dict(engine="trtllm", input_len=256, output_len=64), **serve))


def test_trtllm_defaults_to_its_newest_release_and_keeps_the_2024_one():
    # TensorRT-LLM 1.0's LLM API (llm_args.py): max_batch_size 2048, max_num_tokens 8192, no chunked prefill,
    # the overlap scheduler on; 0.11 is what the 2024 sets ran (256, the C++ runtime's host time added).
    new, old = resolve(Serve(engine="trtllm")), resolve(Serve(engine="trtllm", engine_version="0.11"))
    assert new.release == "1.0" and (new.max_num_seqs, new.max_num_batched_tokens) == (2048, 8192)
    assert new.overlap_host and not new.chunked_prefill
    assert old.release == "0.11" and old.max_num_seqs == 256 and not old.overlap_host


@pytest.mark.parametrize("gpu, entry, expected", [
    ("h100", "offline", (1024, 16384)), ("h100", "server", (1024, 8192)), ("b200", "server", (1024, 8192)),
    ("a100-80gb", "offline", (256, 8192)), ("a100-80gb", "server", (256, 2048)), ("l4", "offline", (256, 8192)),
])
def test_vllm_v1_sets_its_batch_caps_by_gpu_and_entry_point(gpu, entry, expected):
    # vllm/engine/arg_utils.py get_batch_defaults: >= 70 GiB and not an A100: 1024 sequences, 16384 tokens
    # offline (the LLM class) and 8192 behind the server; otherwise 256 and 8192 / 2048
    for version in ("0.11", None):   # 0.11 and the default, 0.14, share them
        e = resolve(Serve(engine="vllm", entry=entry, engine_version=version), gpu=get_gpu(gpu))
        assert (e.max_num_seqs, e.max_num_batched_tokens) == expected
        assert e.chunked_prefill


def test_vllm_0_14_schedules_asynchronously_but_for_ngram_and_draft_speculation():
    # vllm-project/vllm#27614 (0.14.0): async scheduling on by default; #31998: on with EAGLE/MTP drafts only
    h100 = get_gpu("h100")
    new, old = resolve(Serve(engine="vllm"), gpu=h100), resolve(Serve(engine="vllm", engine_version="0.13.2"), gpu=h100)
    assert (new.release, old.release) == ("0.14", "0.11") and new.overlap_host and not old.overlap_host
    spec = dict(engine="vllm", spec_tokens=3, spec_acceptance=2.5)
    assert resolve(Serve(spec_method="eagle3", **spec), gpu=h100).overlap_host
    assert not resolve(Serve(spec_method="ngram", **spec), gpu=h100).overlap_host
    # the host's 2 ms hide behind a decode iteration: TPOT falls, and no lower than the GPU's own iteration
    fast = gpucast.predict(_job(engine="vllm", batch=8), "h100").serving
    slow = gpucast.predict(_job(engine="vllm", batch=8, engine_version="0.11"), "h100").serving
    assert fast["tpot_s"] < slow["tpot_s"] and fast["tpot_s"] >= slow["tpot_s"] - 2e-3 - 1e-9


def test_vllm_entry_follows_the_load_and_the_2024_release_keeps_its_caps():
    h100 = get_gpu("h100")
    assert resolve(Serve(engine="vllm"), gpu=h100).max_num_batched_tokens == 16384            # all at once
    assert resolve(Serve(engine="vllm", concurrency=8), gpu=h100).max_num_batched_tokens == 8192   # a server
    assert resolve(Serve(engine="vllm", max_num_seqs=64), gpu=h100).max_num_seqs == 64           # the job's own
    old = resolve(Serve(engine="vllm", engine_version="0.6"), gpu=h100)
    assert (old.max_num_seqs, old.max_num_batched_tokens) == (256, 8192)


@pytest.mark.parametrize("gpu, tensor, chunk, graph", [
    ("l4", 1, 2048, 24), ("l4", 4, 2048, 80), ("a100-40gb", 1, 4096, 32), ("h100", 1, 8192, 256),
    ("h100", 8, 8192, 512), ("h200", 1, 8192, 256), ("b200", 1, 16384, 512),
])
def test_sglang_0_5_sizes_its_chunks_and_graphs_by_gpu_memory(gpu, tensor, chunk, graph):
    # server_args.py _handle_gpu_memory_settings: < 35 GiB 2k chunks and 24 (tp < 4) / 80 graphs; < 60 GiB
    # 4k and 32 / 160; < 160 GiB 8k and 256 / 512; larger 16k and 512
    e = resolve(Serve(engine="sglang"), gpu=get_gpu(gpu), parallel=Parallel(tensor=tensor) if tensor > 1 else None)
    assert e.release == "0.5" and (e.max_num_batched_tokens, e.graph_max_batch) == (chunk, graph)


def test_sglang_0_5_reserves_memory_for_activations_and_graphs():
    h100 = get_gpu("h100")
    mib = h100.memory_bytes / 2**20
    # 512 + 1.5 x 8192 + 2 x 256 + 1 x 1 / 8 x 1024 = 13,440 MiB (over the 10 GiB floor on a large GPU)
    assert sglang_defaults(h100)[2] == pytest.approx(1 - 13440 / mib, abs=1e-3)
    # its running requests: the request pool, 512 per context length of KV tokens, within [2048, 4096]
    assert sglang_max_requests(441_000, 8192) == 4096 and sglang_max_requests(100_000, 131072) == 2048
    assert sglang_max_requests(1_000_000, 131072) == 3906


@pytest.mark.parametrize("engine, version, modelled", [
    # vLLM's V1 engine is its default from 0.8.0; TensorRT-LLM's PyTorch backend from 1.0; SGLang 0.5's defaults
    ("vllm", "0.19.1", "0.14"), ("vllm", "0.13.2", "0.11"), ("vllm", "0.8.0", "0.11"), ("vllm", "0.10", "0.11"), ("vllm", "v0.7.3", "0.6"),
    ("vllm", "0.5.4", "0.6"), ("vllm", "0.11.0rc2", "0.11"), ("trtllm", "1.2.0rc2", "1.0"), ("trtllm", "0.21", "0.11"),
    ("trtllm", "1.0", "1.0"), ("sglang", "0.5.5.post1", "0.5"), ("sglang", "0.4.10", "0.4"), ("sglang", "1.0", "0.5"),
])
def test_any_release_runs_with_the_modelled_release_of_its_line(engine, version, modelled):
    assert resolve(Serve(engine=engine, engine_version=version)).release == modelled
    assert resolve(Serve(engine=engine, engine_version=version)) == resolve(Serve(engine=engine,
                                                                                 engine_version=modelled))


def test_a_release_outside_the_modelled_ones_is_predicted_as_its_line_and_says_so():
    newer = gpucast.predict(_job(engine="vllm", engine_version="0.13.2"), "h100").serving
    same = gpucast.predict(_job(engine="vllm", engine_version="0.11"), "h100").serving
    assert newer["tpot_s"] == same["tpot_s"] and newer["ttft_s"] == same["ttft_s"]
    assert any("vllm 0.13.2 runs with vllm 0.11's defaults" in n and "0.8 to before 0.14" in n for n in newer["notes"])
    assert not any("RELEASE_LINES" in n for n in same["notes"])
    # a YAML or JSON number is its text (1.0, 0.11); the CLI keeps --set's text (0.10 is not 0.1)
    assert Serve(engine="trtllm", engine_version=1.0).engine_version == "1.0"


@pytest.mark.parametrize("serve, words", [
    (dict(engine="trtllm", engine_version="latest"), "a release number such as 0.11 or 1.0"),
    (dict(engine="vllm", engine_version="v1-beta"), "a release number such as 0.6 or 0.11"),
    (dict(engine="sglang", engine_version=""), "a release number such as 0.4 or 0.5"),
    (dict(engine="hf", engine_version="4.0"), "releases are modelled for trtllm, vllm, sglang only"),
    (dict(engine="vllm", entry="batch"), "offline, server"),
])
def test_an_unmodelled_release_is_one_error_line(serve, words):
    with pytest.raises(SpecError) as e:
        Serve(**serve)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_trtllm_bench_sizes_its_batch_from_the_cache_as_the_tool_does():
    # Llama-3.1-8B FP8 on one 80 GiB H100, 128 + 128 tokens: 8.0e9 weights of 1 byte, K/V of
    # 2 x 32 layers x 8 heads x 128 x 1 byte = 64 KiB a token: 0.95 x (80 - 7.45) GiB / (64 KiB x 256)
    # = 4,486 requests, capped at 4,096 (a multiple of 256), tokens 4,096 x 2 = 8,192.
    gib = 1024 ** 3
    assert trtllm_bench_sizes(8.0e9, 1.0, 65536, 80 * gib, 1, 1, 128, 128) == (4096, 8192)
    # a long prompt: 0.95 x 72.55 GiB / (64 KiB x 2,176) = 519 requests -> 640 (multiples of 128 below
    # 1,024); 519 x (1 + 2048 / 128) = 8,822 tokens -> 9,216 (multiples of 1,024 above 8,192)
    assert trtllm_bench_sizes(8.0e9, 1.0, 65536, 80 * gib, 1, 1, 2048, 128) == (640, 9216)
    # a small cache: at least 64 sequences and 2,048 tokens
    assert trtllm_bench_sizes(8.0e9, 1.0, 65536, 12 * gib, 1, 1, 128, 128)[1] >= 2048


def test_an_all_at_once_load_on_trtllm_1_0_is_sized_as_trtllm_bench_and_says_so():
    p = gpucast.predict(_job(batch=512, num_requests=512), "h100")
    assert any("sized as trtllm-bench" in n for n in p.serving["notes"])
    own = gpucast.predict(_job(batch=512, num_requests=512, max_num_seqs=16), "h100")
    assert not any("trtllm-bench" in n for n in own.serving["notes"]) and own.serving["max_batch"] <= 16
    old = gpucast.predict(_job(batch=512, num_requests=512, engine_version="0.11"), "h100")
    assert not any("trtllm-bench" in n for n in old.serving["notes"])


def test_prompts_prefilled_together_attend_each_within_itself():
    job = _job()
    m = iteration_model(job, get_gpu("h100"), resolve(job.serve), Environment.default(), EstimatorConfig())
    dense = m.cost(8192, 0, 0.0, 8192, 0.0, 1)[1] - m._attention(1, 8192, 0)   # GPU-busy seconds
    one, eight = m.cost(8192, 0, 0.0, 8192, 0.0, 1)[1], m.cost(8192, 0, 0.0, 8192, 0.0, 8)[1]
    # the same tokens' GEMMs; eight 1,024-token prompts' causal attention is an eighth of one 8,192-token prompt's
    assert eight < one
    assert eight - dense == pytest.approx(8 * m._attention(1, 1024, 0), rel=0.02)


def test_fp8_weights_and_activations_run_the_gemms_at_the_fp8_rate():
    # W8A8 (precision fp8): at a compute-bound batch the FP8 GEMMs run about twice the bf16 rate on an H100
    gpu, env, cfg = get_gpu("h100"), Environment.default(), EstimatorConfig()
    bf16, fp8 = (iteration_model(j, gpu, resolve(j.serve), env, cfg) for j in (_job("bf16"), _job("fp8")))
    dense_bf16, dense_fp8 = bf16._per_tokens(8192)[0], fp8._per_tokens(8192)[0]
    assert 1.3 < dense_bf16 / dense_fp8 < 2.1


def test_an_nvfp4_checkpoint_holds_4_5_bits_a_weight_and_runs_the_fp4_tensor_cores():
    # NVFP4 (16-element blocks, an FP8 scale each: 4.5 bits) on a B200: its linear weights take 0.28 of
    # their bf16 bytes, and a compute-bound batch's GEMMs run faster than FP8's (FP4 at twice the FP8 rate)
    gpu, env, cfg = get_gpu("b200"), Environment.default(), EstimatorConfig()
    w16, w8, w4 = (gpucast.predict(_job(p, batch=8), "b200").serving["memory"]["weights_bytes"]
                   for p in ("bf16", "fp8", "nvfp4"))
    ends = LLAMA["vocab_size"] * LLAMA["hidden_size"] * 2 * 2   # embedding and head stay 16-bit
    assert (w8 - ends) / (w16 - ends) == pytest.approx(0.5, rel=1e-3)
    assert (w4 - ends) / (w16 - ends) == pytest.approx((0.5 + 1 / 16) / 2, rel=1e-3)
    m8, m4 = (iteration_model(j, gpu, resolve(j.serve), env, cfg) for j in (_job("fp8"), _job("nvfp4")))
    assert m4._per_tokens(8192)[0] < m8._per_tokens(8192)[0]


def test_an_mxfp8_checkpoint_holds_fp8_weights_with_a_scale_a_block_of_32():
    # MXFP8 (E4M3 values, an E8M0 scale per 32): 8.25 bits a linear weight, its GEMMs at the FP8 rate
    w16, w8, mx = (gpucast.predict(_job(p, batch=8), "b200").serving["memory"]["weights_bytes"]
                   for p in ("bf16", "fp8", "mxfp8"))
    ends = LLAMA["vocab_size"] * LLAMA["hidden_size"] * 2 * 2
    assert (mx - ends) / (w16 - ends) == pytest.approx((1 + 1 / 32) / 2, rel=1e-3) and mx > w8
    gpu, env, cfg = get_gpu("b200"), Environment.default(), EstimatorConfig()
    m8, mm = (iteration_model(j, gpu, resolve(j.serve), env, cfg) for j in (_job("fp8"), _job("mxfp8")))
    assert mm._per_tokens(8192)[0] == pytest.approx(m8._per_tokens(8192)[0], rel=0.05)


def test_an_nvfp4_kv_cache_holds_4_5_bits_an_element_on_blackwell_only():
    fp8 = gpucast.predict(_job(kv_cache_dtype="fp8"), "b200").serving["memory"]["kv_bytes_per_token"]
    fp4 = gpucast.predict(_job(kv_cache_dtype="nvfp4"), "b200").serving["memory"]["kv_bytes_per_token"]
    # 4 layers x 4 KV heads x 64 dims x K and V: one byte each in FP8, 0.5 + 1/16 in NVFP4
    assert fp8 == 4 * 4 * 64 * 2 and fp4 == int(4 * 4 * 64 * 2 * (0.5 + 1 / 16))
    with pytest.raises(JobError, match="NVFP4 KV cache needs FP4 tensor cores"):
        gpucast.predict(_job(kv_cache_dtype="nvfp4"), "h100")
    with pytest.raises(JobError, match="NVFP4 KV cache"):
        gpucast.predict(_job(kv_cache_dtype="nvfp4", engine="vllm"), "b200")


def test_the_engines_run_flash_attention_3_on_hopper_unless_the_job_names_a_kernel():
    from gpucast.surroundings import Stack

    job = Job.from_hf_config(LLAMA, batch_size=4, precision="bf16", mode="serve",
                             serve=dict(input_len=4096, output_len=2))
    own = gpucast.predict(job, "h100").serving["ttft_s"]
    fa2 = gpucast.predict(job.with_(stack=Stack(attention="flash2")), "h100").serving["ttft_s"]
    assert own < fa2   # FlashAttention-3's share of the peak is 0.61 to FlashAttention-2's 0.36
    # the 2024 release and Ampere keep FlashAttention-2's kernels
    old = job.with_(serve=dataclasses.replace(job.serve, engine_version="0.6"))
    assert gpucast.predict(old, "h100").serving["ttft_s"] == pytest.approx(
        gpucast.predict(old.with_(stack=Stack(attention="flash2")), "h100").serving["ttft_s"])
    assert gpucast.predict(job, "a100-80gb").serving["ttft_s"] == pytest.approx(
        gpucast.predict(job.with_(stack=Stack(attention="flash2")), "a100-80gb").serving["ttft_s"])


def test_the_command_line_keeps_a_release_as_text(tmp_path):
    import json

    from typer.testing import CliRunner

    from gpucast.cli import app

    cfg = tmp_path / "llama.json"
    cfg.write_text(json.dumps(LLAMA))
    r = CliRunner().invoke(app, ["predict", "--hf-config", str(cfg), "--mode", "serve", "--precision", "bf16", "-b", "4",
                                 "--set", "serve.engine=vllm", "--set", "serve.engine_version=0.10",
                                 "--set", "serve.input_len=64", "--set", "serve.output_len=8", "--gpu", "h100",
                                 "--json", "--no-cache"])
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    assert p["job"]["serve"]["engine_version"] == "0.10"          # not YAML's 0.1
    assert any("vllm 0.10 runs with vllm 0.11's defaults" in n for n in p["serving"]["notes"])


def test_trtllm_1_0_chunks_a_streams_prompts_beside_the_running_decodes():
    # TensorRT-LLM's micro-batch scheduler without chunking (microBatchScheduler.cpp) stops at a prompt that does not
    # fit the token budget beside the decodes already taken: a 7,990-token prompt in 8,000 waits for the batch to drain
    def run(**serve):
        job = Job.from_hf_config(LLAMA, batch_size=1, mode="serve", precision="bf16",
                                 serve=dict(engine="trtllm", input_len=7990, output_len="lognormal:128,0.5", concurrency=16,
                                            num_requests=64, max_num_batched_tokens=8000, **serve))
        return gpucast.predict(job, "h100").serving
    chunked, whole = run(), run(chunked_prefill=False)
    assert whole["ttft_s"] > 10 * chunked["ttft_s"]       # waits for the running decodes (128 tokens on average)
    assert whole["ttft_s"] > 10 * whole["tpot_s"]          # decode steps, not one prefill
    assert resolve(Serve(engine="trtllm", concurrency=4)).chunked_prefill
    assert not resolve(Serve(engine="trtllm")).chunked_prefill          # a static batch: trtllm-bench's sizing
    assert not resolve(Serve(engine="trtllm", concurrency=4, engine_version="0.11")).chunked_prefill
    assert not resolve(Serve(engine="trtllm", concurrency=4, chunked_prefill=False)).chunked_prefill
    with pytest.raises(SpecError, match="serve.chunked_prefill"):
        Serve(chunked_prefill="yes")
