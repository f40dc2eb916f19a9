"""One inference-engine iteration traced on meta (gpucast.graph.serving).

The references are closed forms that do not come from the tracer: a transformer forward costs
2 FLOPs per non-embedding parameter per token (Kaplan et al. 2020, eq. 2.2); attention reads
``context + new`` keys per query; a paged cache writes only the new tokens while HF's
``DynamicCache`` concatenates the whole cache; Llama-3-8B's published shape and parameter count.
Configs are tiny Llama/Mixtral shapes (a few milliseconds to build on meta).
"""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import sdpa_flop_count

from gpucast.graph import serving
from gpucast.job import Job, JobError

HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, FFN = 256, 2, 8, 2, 1000, 512
HEAD_DIM = HIDDEN // HEADS
FLASH = "_scaled_dot_product_flash_attention"


def _job(precision: str = "bf16", **overrides) -> Job:
    cfg = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                                   max_position_embeddings=8192, **overrides)
    return Job.from_hf_config(cfg.to_dict(), batch_size=1, precision=precision, mode="infer")


def _mixtral(**extra) -> Job:
    cfg = transformers.MixtralConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                                     num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                                     num_local_experts=4, num_experts_per_tok=2).to_dict()
    return Job.from_hf_config(cfg | extra, batch_size=1, precision="bf16", mode="infer")


def _ops(trace, *names):
    return [o for o in trace.ops if o.op in names]


class _FlashCalls(TorchDispatchMode):
    """Records (query shape, key shape, is_causal) of the flash-attention calls under it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._scaled_dot_product_flash_attention.default:
            causal = args[4] if len(args) > 4 else kwargs.get("is_causal", False)
            self.calls.append((tuple(args[0].shape), tuple(args[1].shape), bool(causal)))
        return func(*args, **kwargs)


def _flash_calls(job, *shape) -> list[tuple]:
    serving._TRACES.clear()  # trace afresh, so that the calls run under the spy
    serving._SMALL_TRACES.clear()
    with _FlashCalls() as spy:
        serving.trace_iteration(job, *shape)
    return spy.calls


# --------------------------------------------------------------------------- decode
@pytest.mark.parametrize("cache", serving.CACHES)
def test_decode_gemm_flops_are_two_per_non_embedding_parameter_per_sequence(cache):
    job, batch = _job(), 4
    trace = serving.trace_iteration(job, batch, 1, 128, cache)
    gemm = sum(o.flops for o in trace.ops if o.category == "matmul")
    non_embedding = trace.parameters - VOCAB * HIDDEN  # the head stays: it is a GEMM
    assert gemm == pytest.approx(2 * non_embedding * batch, rel=0.01)


def test_decode_attention_flops_grow_linearly_with_context():
    job, batch = _job(), 2

    def attention(context):
        return sum(o.flops for o in serving.trace_iteration(job, batch, 1, context).ops if o.category == "attention")

    # QK^T and PV: 2 x 2 x heads x head_dim FLOPs per cached key, per sequence and layer
    assert attention(2047) == LAYERS * batch * 4 * HEADS * HEAD_DIM * 2048
    assert attention(2047) == 2 * attention(1023)


@pytest.mark.parametrize("cache", serving.CACHES)
def test_decode_runs_flash_attention_over_context_plus_one_grouped_kv_heads(cache):
    job, batch, context = _job(), 3, 300
    trace = serving.trace_iteration(job, batch, 1, context, cache)
    attention = [o for o in trace.ops if o.category == "attention"]
    assert [o.op for o in attention] == [FLASH] * LAYERS  # one fused kernel a layer, no explicit-mask path
    q, k, v = attention[0].shapes
    assert q == (batch, HEADS, 1, HEAD_DIM)
    assert k == v == (batch, KV_HEADS, context + 1, HEAD_DIM)  # GQA: the cache's heads, not repeated
    assert {causal for _, _, causal in _flash_calls(job, batch, 1, context, cache)} == {False}


# --------------------------------------------------------------------------- the caches
def _cache_writes(trace, cache):
    if cache == "paged":
        return _ops(trace, "copy_")
    # HF's torch.cat of cache and new K/V (RoPE's concatenations are of half heads)
    return [o for o in _ops(trace, "cat") if len(o.shapes[0][-1]) == 4 and o.shapes[0][-1][-1] == HEAD_DIM]


def test_paged_cache_writes_only_the_new_tokens():
    job, batch, new = _job(), 2, 4
    short, long = (serving.trace_iteration(job, batch, new, c, "paged") for c in (512, 4096))
    writes = _cache_writes(long, "paged")
    assert len(writes) == 2 * LAYERS and {o.block for o in writes} == set(range(LAYERS))  # K and V, each layer
    new_kv = 2 * LAYERS * batch * KV_HEADS * new * HEAD_DIM * 2  # bytes of the new tokens' K and V (bf16)
    assert sum(o.bytes_written for o in writes) == new_kv
    assert sum(o.bytes for o in writes) == sum(o.bytes for o in _cache_writes(short, "paged"))
    # nothing but the attention kernel reads more when the context grows
    assert ([(o.op, o.bytes) for o in short.ops if o.category != "attention"]
            == [(o.op, o.bytes) for o in long.ops if o.category != "attention"])


def test_dynamic_cache_concatenates_the_whole_cache():
    job, batch, new = _job(), 2, 4
    per_token = 2 * LAYERS * batch * KV_HEADS * HEAD_DIM * 2  # K and V of all layers, bf16
    for context in (512, 4096):
        writes = _cache_writes(serving.trace_iteration(job, batch, new, context, "dynamic"), "dynamic")
        assert len(writes) == 2 * LAYERS
        assert sum(o.bytes_written for o in writes) == per_token * (context + new)  # torch.cat copies it all


def test_cache_is_in_the_memory_report_as_kv_bytes_per_token():
    job, batch, new, context = _job(), 2, 1, 1023
    trace = serving.trace_iteration(job, batch, new, context, "paged")
    ids = 512  # the token ids' allocation (the allocator's smallest block)
    assert trace.memory.totals["inputs"] == serving.kv_bytes_per_token(job) * batch * (context + new) + ids
    assert trace.memory.peak_allocated_bytes >= trace.parameter_bytes + trace.memory.totals["inputs"]


# --------------------------------------------------------------------------- prefill
def test_prefill_is_causal_t_by_t_attention_and_gemms_over_batch_times_t_rows():
    job, batch, new = _job(), 2, 64
    trace = serving.trace_iteration(job, batch, new, 0)
    attention = [o for o in trace.ops if o.category == "attention"]
    assert [o.op for o in attention] == [FLASH] * LAYERS
    per_layer = sdpa_flop_count((batch, HEADS, new, HEAD_DIM), (batch, KV_HEADS, new, HEAD_DIM),
                                (batch, KV_HEADS, new, HEAD_DIM))
    # the causal triangle's share of flop_counter's square (gpucast.graph.causal): 65 of 128 per query
    assert sum(o.flops for o in attention) == LAYERS * int(per_layer * (new + 1) / (2 * new))
    assert {causal for _, _, causal in _flash_calls(job, batch, new, 0)} == {True}
    gemms = _ops(trace, "mm")
    assert {o.shapes[0][0] for o in gemms[:-1]} == {batch * new}
    assert gemms[-1].shapes == ((batch, HIDDEN), (HIDDEN, VOCAB))  # logits of the last token only


def test_prefill_chunk_on_paged_cache_is_flash_over_all_keys_without_a_mask():
    job, batch, new, context = _job(), 2, 32, 96
    trace = serving.trace_iteration(job, batch, new, context, "paged")
    attention = [o for o in trace.ops if o.category == "attention"]
    assert [o.op for o in attention] == [FLASH] * LAYERS
    assert attention[0].shapes[1] == (batch, KV_HEADS, context + new, HEAD_DIM)  # no key dropped
    # causal with the queries at the end of the keys (flash's bottom-right alignment)
    assert {causal for _, _, causal in _flash_calls(job, batch, new, context, "paged")} == {True}
    assert not _ops(trace, "le", "bitwise_and", "masked_fill")  # no mask built or converted


def test_prefill_chunk_on_dynamic_cache_takes_hf_explicit_mask_path():
    # HF's SDPA mask for T queries on context + T keys: a boolean mask, so PyTorch cannot use flash
    job, batch, new, context = _job(), 2, 32, 96
    trace = serving.trace_iteration(job, batch, new, context, "dynamic")
    attention = [o for o in trace.ops if o.category == "attention"]
    assert [o.op for o in attention] == ["_scaled_dot_product_efficient_attention"] * LAYERS
    q, k, v, mask = attention[0].shapes
    assert k == (batch, HEADS, context + new, HEAD_DIM)  # K/V heads repeated for the masked kernel
    assert mask[-2:] == (new, context + new)


# --------------------------------------------------------------------------- shapes, precision
def test_kv_bytes_per_token_of_llama3_8b():
    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)
    job = Job.from_hf_config(cfg.to_dict(), batch_size=1, precision="bf16", mode="infer")
    assert serving.kv_bytes_per_token(job) == 131_072  # 32 layers x 8 heads x 128 x (K, V) x 2 bytes
    assert serving.kv_bytes_per_token(job, kv_dtype_bytes=1) == 65_536
    fp32 = Job.from_hf_config(cfg.to_dict(), batch_size=1, precision="fp32", mode="infer")
    assert serving.kv_bytes_per_token(fp32) == 262_144


def test_model_shape_of_llama3_8b_has_its_published_parameter_count():
    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                   max_position_embeddings=8192)
    shape = serving.model_shape(Job.from_hf_config(cfg.to_dict(), batch_size=1, precision="bf16", mode="infer"))
    assert shape == {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "vocab": 128256,
                     "intermediate": 14336, "max_context": 8192, "experts": 0, "experts_per_token": 0,
                     "tied": False, "cache_k_dim": 128, "cache_v_dim": 128, "mla": None,
                     "linear": None, "attention_layers": 32, "stateless_layers": [], "sparse": None,
                     "parameters": 8_030_261_248,   # Meta-Llama-3-8B
                     "expert_parameters": 0, "moe_layers": 0}


def test_amp_keeps_fp32_weights_and_runs_attention_in_the_amp_dtype():
    trace = serving.trace_iteration(_job("amp-bf16"), 2, 1, 64)
    assert trace.parameter_bytes == 4 * trace.parameters
    assert {(o.op, o.dtype) for o in trace.ops if o.category == "attention"} == {(FLASH, "bfloat16")}


# --------------------------------------------------------------------------- MoE
def test_moe_decode_gemm_flops_count_the_active_experts_only():
    job, batch = _mixtral(), 1
    trace = serving.trace_iteration(job, batch, 1, 64)
    attention = HIDDEN * (HEADS + 2 * KV_HEADS) * HEAD_DIM + HEADS * HEAD_DIM * HIDDEN
    expert = 3 * HIDDEN * FFN
    active = LAYERS * (attention + 2 * expert + HIDDEN * 4) + HIDDEN * VOCAB  # top-2 experts, router, head
    assert sum(o.flops for o in trace.ops if o.category == "matmul") == 2 * active * batch
    assert trace.coverage == 1.0
    # the grouped GEMMs read the two experts the token is routed to, not all four
    up = _ops(trace, "_grouped_mm")[0]
    assert up.bytes_read == pytest.approx(2 * 2 * HIDDEN * FFN * 2, rel=0.01)


def test_moe_experts_loop_that_needs_router_values_is_refused():
    job = _mixtral(experts_implementation="eager")  # transformers' per-expert loop calls nonzero()
    with pytest.raises(JobError, match="router") as err:
        serving.trace_iteration(job, 1, 1, 8)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- refusals, memo
@pytest.mark.parametrize("cfg", [
    transformers.BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128),
    transformers.T5Config(d_model=64, num_layers=1, num_heads=2, d_ff=128, d_kv=32),
])
def test_non_causal_lm_is_refused_with_one_line(cfg):
    job = Job.from_hf_config(cfg.to_dict(), batch_size=1, precision="bf16", mode="infer")
    with pytest.raises(JobError, match="decoder-only Hugging Face causal LM") as err:
        serving.trace_iteration(job, 1, 1, 0)
    assert "\n" not in str(err.value) and job.model in str(err.value)


@pytest.mark.parametrize("args", [(0, 1, 0, "paged"), (1, 0, 0, "paged"), (1, 1, -1, "paged"), (1, 1, 0, "ring")])
def test_bad_iteration_shapes_are_refused(args):
    with pytest.raises(JobError):
        serving.trace_iteration(_job(), *args)


def test_traces_are_memoised_per_shape_and_cache():
    job = _job()
    first = serving.trace_iteration(job, 2, 1, 10)
    assert serving.trace_iteration(job, 2, 1, 10) is first
    assert serving.trace_iteration(job, 2, 1, 10, "dynamic") is not first
    assert first.notes == ["serving iteration: 2 x 1 new tokens on 10 cached (paged cache)"]
    assert first.mode == "infer" and first.batch_size == 2 and first.layout.blocks == LAYERS
    assert first.input_bytes == 2 * 8  # the token ids, int64
