"""A deployment over several GPUs: pipeline stages, replicas and expert parallelism (mode 'serve').

Expected values come from closed forms stated per test (a stage's layers and weights, the chance an
expert is hit, the busiest rank of a top-2 router over four ranks, identical replicas doubling a
closed loop's throughput), not from the code's own output. Real Hugging Face model definitions, built
on the meta device."""

from __future__ import annotations

import dataclasses

import pytest
from transformers import LlamaConfig, MixtralConfig

import gpucast
from gpucast.estimate.serving.experts import busiest, hit_probability, routed
from gpucast.estimate.serving.stages import Layout
from gpucast.job import Job, JobError

# Llama-3-8B's published config.json shape (untied head)
LLAMA3_8B = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192).to_dict()
SMALL = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=8,
                    num_key_value_heads=4, vocab_size=2048, max_position_embeddings=4096).to_dict()
TINY_MOE = MixtralConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, vocab_size=1024,
                         max_position_embeddings=4096).to_dict()


def _serve(cfg, gpus=1, parallel=None, batch=8, **serve):
    if serve.get("engine", "vllm") == "vllm":   # 0.11's synchronous scheduler: these tiny models' GPU effects would
        serve.setdefault("engine_version", "0.11")   # hide behind 0.14's overlapped host work
    return Job.from_hf_config(cfg, batch_size=batch, precision="bf16", mode="serve", gpus=gpus, parallel=parallel,
                              serve=dict(dict(input_len=256, output_len=32), **serve))


# ----------------------------------------------------------------- pipeline stages
def test_a_stage_holds_its_layers_weights_and_cache():
    one = gpucast.predict(_serve(LLAMA3_8B, batch=1, output_len=4), "a100-80gb").serving
    two = gpucast.predict(_serve(LLAMA3_8B, gpus=2, parallel=dict(pipeline=2), batch=1, output_len=4),
                          "a100-80gb").serving
    # closed form: 16 of 32 layers, plus the embedding (first stage) or the head (last): 128,256 x 4,096 bf16
    end = 128256 * 4096 * 2
    w1 = one["memory"]["weights_bytes"]
    assert two["memory"]["weights_bytes"] == pytest.approx((w1 - 2 * end) / 2 + end, rel=1e-3)
    assert two["memory"]["kv_bytes_per_token"] == one["memory"]["kv_bytes_per_token"] // 2
    # half the cache per token and fewer weights: more than twice the tokens fit
    assert two["kv_cache_tokens"] > 2 * one["kv_cache_tokens"]
    assert (two["pipeline"], two["replicas"], two["tensor"]) == (2, 1, 1)


def test_uneven_stages_stretch_the_cycle_by_the_largest_stage():
    lay = Layout(tensor=1, pipeline=3, replicas=1, expert=1, layers=32)
    assert lay.stage_layers == 11 and lay.imbalance == pytest.approx(33 / 32)
    assert Layout(tensor=2, pipeline=4, replicas=1, expert=1, layers=32).imbalance == 1.0


def test_hf_runs_its_stages_one_after_another():
    one = gpucast.predict(_serve(SMALL, engine="hf"), "a100-80gb")
    two = gpucast.predict(_serve(SMALL, gpus=2, parallel=dict(pipeline=2), engine="hf"), "a100-80gb")
    # accelerate's device_map: the same forward, layer after layer, plus a send per stage boundary and step
    assert two.serving["latency_s"] >= one.serving["latency_s"]
    assert two.serving["latency_s"] == pytest.approx(one.serving["latency_s"], rel=0.15)
    # each GPU busy for its three layers of six only
    assert two.serving["gpu_busy_share"] < 0.75 * one.serving["gpu_busy_share"]


def test_engines_keep_a_batch_in_flight_per_stage():
    one = gpucast.predict(_serve(SMALL, batch=32), "a100-80gb").serving
    two = gpucast.predict(_serve(SMALL, gpus=2, parallel=dict(pipeline=2), batch=32), "a100-80gb").serving
    # two streams of 16 sequences, each through the whole model: faster than one stream of 32, and no
    # faster than two independent GPUs could be
    assert two["max_batch"] == 16
    assert two["latency_s"] < one["latency_s"]
    reps = gpucast.predict(_serve(SMALL, gpus=2, batch=32), "a100-80gb").serving
    assert two["latency_s"] >= reps["latency_s"] * 0.999


def test_trtllm_caps_each_micro_batch_where_vllm_caps_them_all():
    # max_num_seqs 16 over two stages: vLLM's one scheduler keeps 16 running in all, 8 a batch in flight;
    # TensorRT-LLM's micro-batch scheduler takes 16 into each of the two (its capacity: 16 x pp)
    def run(engine):
        return gpucast.predict(_serve(SMALL, gpus=2, parallel=dict(pipeline=2), batch=64, engine=engine,
                                      max_num_seqs=16), "a100-80gb").serving
    assert run("vllm")["max_batch"] == 8
    assert run("trtllm")["max_batch"] == 16


def test_trtllm_stages_each_prepare_the_micro_batch_on_the_host():
    """TensorRT-LLM's pipeline loop (no overlap scheduler) runs each stage's host work before its kernels: a
    stream's iteration is p x (a stage's GPU share + a send + the host's work), the host's work once per stage."""
    from gpucast.estimate.serving.engines import RELEASES
    from gpucast.estimate.serving.stages import staged

    class Model:   # an iteration of 40 ms on the GPU (its busy time the same), whatever its shape
        engine = dataclasses.replace(RELEASES[("trtllm", "1.0")], host_per_iteration_s=0.002,
                                     pp_host_per_sequence_s=1e-4)

        def device_cost(self, *shape):
            return 0.040, 0.040

    lay = Layout(tensor=1, pipeline=4, replicas=1, expert=1, layers=32)
    wall, busy = staged(Model(), lay, lambda n: 0.001, sequential=False, micro_batch_loop=True)(64, 64, 100.0, 0, 0.0, 0)
    assert wall == pytest.approx(4 * (0.040 / 4 + 0.001 + 0.002 + 64 * 1e-4))
    assert busy == pytest.approx(0.040 / 4)
    # vLLM's batch queue: the model's time, p - 1 sends and the host's work once
    wall, _ = staged(Model(), lay, lambda n: 0.001, sequential=False, micro_batch_loop=False)(64, 64, 100.0, 0, 0.0, 0)
    assert wall == pytest.approx(0.040 + 3 * 0.001 + 0.002)


# ----------------------------------------------------------------- replicas
def test_two_replicas_serve_twice_the_closed_loop_of_one():
    one = gpucast.predict(_serve(SMALL, concurrency=8, num_requests=64), "a100-80gb").serving
    two = gpucast.predict(_serve(SMALL, gpus=2, concurrency=16, num_requests=128), "a100-80gb").serving
    assert two["replicas"] == 2
    assert two["output_tokens_per_s"] == pytest.approx(2 * one["output_tokens_per_s"], rel=0.02)
    assert two["tpot_s"] == pytest.approx(one["tpot_s"], rel=0.02)


# ----------------------------------------------------------------- experts
def test_routing_reads_the_experts_the_tokens_reach():
    # one token reaches exactly its top-k experts; many reach all of them
    assert 8 * hit_probability(8, 2, 1) == pytest.approx(2.0)
    assert 8 * hit_probability(8, 2, 64) == pytest.approx(8.0, abs=1e-6)
    assert busiest(8, 2, 4, 1)[0] == pytest.approx(8 * (1 - 0.75 ** 4))
    # top-2 of 8 experts over 4 ranks of 2: both land on one rank with chance 1/7, so the busiest rank
    # holds 1 + 1/7 of them on average (the independent-rank approximation within 2 %)
    hit, rows = busiest(8, 2, 1, 4)
    assert hit == pytest.approx(8 / 7, rel=0.02) and rows == pytest.approx(8 / 7, rel=0.02)
    # many tokens: every rank gets its share of the rows, within a few per cent
    assert busiest(8, 2, 8192, 4)[1] == pytest.approx(8192 * 2 / 4, rel=0.03)


def test_expert_weights_read_follow_routing_and_quantisation():
    from gpucast.graph.serving import model_shape, trace_iteration
    from gpucast.estimate.serving.iteration import model_job

    job = _serve(TINY_MOE)
    shape = model_shape(job)
    tr = trace_iteration(model_job(job), 4, 1, 64, "paged")
    before = [o for o in tr.ops if o.op == "_grouped_mm"]
    after = [o for o in routed(tr, shape, 1, 1).ops if o.op == "_grouped_mm"]
    quarter = [o for o in routed(tr, shape, 1, 1, 0.25).ops if o.op == "_grouped_mm"]
    for b, a, q in zip(before, after, quarter):
        per_expert = b.shapes[1][1] * b.shapes[1][2] * 2
        # the trace read min(8 experts, 8 rows); 4 tokens reach 8 (1 - 0.75^4) = 5.47 on average
        assert b.bytes_read - a.bytes_read == pytest.approx((8 - 8 * (1 - 0.75 ** 4)) * per_expert, rel=1e-3)
        assert a.bytes_read - q.bytes_read == pytest.approx(0.75 * 8 * (1 - 0.75 ** 4) * per_expert, rel=1e-3)
        assert a.flops == b.flops


def test_expert_parallelism_costs_at_batch_one_and_matches_tensor_parallelism_at_scale():
    def tpot(batch, par):
        job = _serve(TINY_MOE, gpus=4, parallel=par, batch=batch, input_len=128, output_len=64)
        return gpucast.predict(job, "a100-80gb").serving["tpot_s"]
    # one token: its two experts land on one rank (of four) with chance 1/7, and that rank reads them
    # whole; tensor parallelism reads a quarter of each on every rank
    assert tpot(1, dict(tensor=4, expert=4)) > tpot(1, dict(tensor=4))
    assert tpot(256, dict(tensor=4, expert=4)) == pytest.approx(tpot(256, dict(tensor=4)), rel=0.1)


@pytest.mark.parametrize("cfg, gpus, par, needle", [
    (TINY_MOE, 4, dict(tensor=4, expert=3), "must divide parallel.tensor"),
    (TINY_MOE, 1, dict(expert=2), "must divide parallel.tensor"),
    (SMALL, 2, dict(tensor=2, expert=2), "has no experts"),
    (SMALL, 8, dict(pipeline=8), "at most the model's 6 layers"),
])
def test_bad_layouts_are_one_line_errors(cfg, gpus, par, needle):
    with pytest.raises(JobError) as e:
        gpucast.predict(_serve(cfg, gpus=gpus, parallel=par), "a100-80gb")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_expert_parallelism_in_training_is_refused():
    with pytest.raises(JobError, match="parallel.expert"):
        Job.from_hf_config(TINY_MOE, batch_size=4, precision="bf16", mode="train", gpus=2,
                           parallel=dict(tensor=2, expert=2))


def test_the_expert_field_keeps_the_jobs_repr():
    # the simulator's truth draws each job's error from its repr: a new field must not move it
    a = Job.from_hf_config(TINY_MOE, batch_size=4, precision="bf16", mode="serve", gpus=2, parallel=dict(tensor=2))
    b = dataclasses.replace(a, parallel=dataclasses.replace(a.parallel, expert=2))
    assert repr(a) == repr(b) and a.key != b.key


# ----------------------------------------------------------------- MLA and FP8 weights
# DeepSeek-V3's attention and MoE layout at a small size (its config.json's fields, scaled down)
TINY_MLA = dict(model_type="deepseek_v3", hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
                num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=16, n_routed_experts=8,
                num_experts_per_tok=2, n_group=2, topk_group=1, vocab_size=4000, kv_lora_rank=256, q_lora_rank=384,
                qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, first_k_dense_replace=1,
                max_position_embeddings=16384)


def test_mla_caches_one_latent_per_token_on_every_rank():
    def serving(t, ctx):
        job = _serve(TINY_MLA, gpus=t, parallel=dict(tensor=t) if t > 1 else None, input_len=ctx, output_len=16)
        return gpucast.predict(job, "h100").serving
    one, two = serving(1, 512), serving(2, 512)
    # vLLM's MLA cache: per layer the compressed K/V (kv_lora_rank) and the rotary key (qk_rope_head_dim), one
    # "head", kept whole by every tensor-parallel rank
    assert one["kv_bytes_per_token"] == 4 * (256 + 32) * 2 == two["kv_bytes_per_token"]
    # a longer context costs the decode more
    assert serving(1, 8192)["tpot_s"] > one["tpot_s"]


def test_mla_decode_reads_the_latents_not_the_decompressed_heads():
    from gpucast.estimate.serving.engines import resolve
    from gpucast.estimate.serving.iteration import iteration_model
    from gpucast.hardware import get_gpu
    from gpucast.estimate.constants import DEFAULT
    from gpucast.estimate.environment import Environment

    job = _serve(TINY_MLA)
    model = iteration_model(job, get_gpu("h100"), resolve(job.serve), Environment.default(), DEFAULT)
    from gpucast.graph.serving import trace_iteration
    from gpucast.estimate.serving.iteration import model_job
    tr = trace_iteration(model_job(job), 8, 1, 256, "paged")
    op = next(o for o in tr.ops if o.category == "attention")
    lat = model._latent_decode(op, 8, 4097)
    # the latents of 8 sequences x 4,097 tokens, 288 dims of 2 bytes, read once; the query's 16 heads x 288
    assert lat.bytes_read == 8 * 4097 * 288 * 2 + 8 * 16 * 288 * 2
    # scores over 288 dims and weighted latents over 256, per head and cached token
    assert lat.flops == 2 * 8 * 16 * 4097 * (288 + 256)
    # the traced (decompressed) attention reads every head's keys and values: far more per token
    assert op.bytes_read / 257 > 5 * (288 * 2 * 8)


def test_hf_with_mla_is_one_error_line():
    with pytest.raises(JobError, match="decompresses the whole cache"):
        gpucast.predict(_serve(TINY_MLA, engine="hf"), "h100")


def test_fp8_weights_take_one_byte_and_decode_faster():
    def serving(precision):
        job = Job.from_hf_config(LLAMA3_8B, batch_size=1, precision=precision, mode="serve",
                                 serve=dict(input_len=256, output_len=16))
        return gpucast.predict(job, "h100").serving
    bf16, fp8 = serving("bf16"), serving("fp8")
    # the linear layers at one byte a weight, the embedding and the head (128,256 x 4,096 each) at two
    end = 128256 * 4096 * 2
    w = bf16["memory"]["weights_bytes"]
    assert fp8["memory"]["weights_bytes"] == pytest.approx((w - 2 * end) / 2 + 2 * end, rel=1e-3)
    # batch-1 decode reads the weights: nearly half the bytes, at least a quarter faster
    assert fp8["tpot_s"] < 0.8 * bf16["tpot_s"]
