"""One iteration of an LLM inference engine, traced on the meta device.

``trace_iteration(job, batch, new_tokens, context, cache)`` records the forward pass of a
decoder-only Hugging Face causal LM (``Job.from_hf_config``) over ``batch`` sequences that each
feed ``new_tokens`` new tokens (a prefill chunk: ``new_tokens = T``; a decode step: 1) on top of
a KV cache that already holds ``context`` tokens per sequence. It is what an engine (vLLM,
SGLang, TensorRT-LLM, or transformers' own ``generate``) runs per scheduler iteration, op by op,
with the tracer's recorder (``gpucast.graph.tracer``: FLOPs, bytes, kernels per op) and CUDA
mirroring (``gpucast.graph.mirror``: SDPA -> fused flash attention, autocast). The call is
``model(input_ids, cache, use_cache=True, logits_to_keep=1)`` under ``torch.no_grad()``: as in
generation, only the last position's logits are computed (the head's GEMM has M = batch).

Two caches:

* ``"paged"`` (vLLM/SGLang/TensorRT-LLM: a preallocated paged cache). Each layer's K and V for
  ``context + new_tokens`` tokens exist before the iteration (not recorded; their bytes are in
  the memory report's ``inputs`` class with the token ids). The iteration records, per layer, one
  ``copy_`` of the new keys and one of the new values into the cache (bytes proportional to
  ``new_tokens``, as vLLM's ``reshape_and_cache`` kernel; it writes both in one launch, here two)
  and the attention reading K/V of ``context + new_tokens`` tokens. No mask is built. Attention
  kernel: ``_scaled_dot_product_flash_attention`` for fp16/bf16 with grouped K/V heads read as
  they are (GQA, no copies): a decode step with ``is_causal=False`` (one query sees every key); a
  prefill with ``context = 0`` with ``is_causal=True`` over T x T; a prefill chunk on ``context > 0``
  tokens with ``is_causal=True`` over T queries x (context + T) keys, i.e. flash attention's
  bottom-right causal alignment, as vLLM's varlen flash kernel runs it (transformers' SDPA path
  would instead build an explicit mask, or, with no mask, drop the cached keys; see below).
  FLOPs of the attention are ``torch.utils.flop_counter``'s for the flash op: the full
  ``4 b h q k d``, which does not halve for the causal triangle.
* ``"dynamic"``: transformers' own ``DynamicCache`` (built from the model config, so sliding-window
  layers keep their window), pre-filled with ``context`` tokens per layer before recording, as the
  eager ``hf`` engine (``model.generate``) runs it: each layer's ``update`` is HF's ``torch.cat``
  of the whole cache and the new tokens (copies that grow with the context). The mask is HF's SDPA
  mask: none for a decode step (flash attention, ``is_causal=False``) or a first prefill (flash,
  ``is_causal=True``); for a prefill chunk on ``context > 0`` tokens HF builds an explicit boolean
  ``(batch, 1, T, context + T)`` mask (its ops are recorded), repeats the K/V heads for GQA and
  SDPA runs ``_scaled_dot_product_efficient_attention`` (memory-efficient kernel, mask read from
  memory), as it does on a GPU (sliding-window layers past their window get a mask too).

Memory report (``Trace.memory``): ``parameters`` are the weights (and buffers), ``inputs`` the
cache that exists before the iteration (paged: K/V for ``context + new_tokens`` tokens, i.e.
``kv_bytes_per_token x batch x (context + new_tokens)``; dynamic: for ``context`` tokens) and the
token ids, ``activations`` what the forward allocates; with the dynamic cache those include the
concatenated copies of the cache, each layer's old copy freed when it is replaced.

Precision: ``bf16``/``fp16`` cast the weights (``gpucast.graph.precision.PURE_DTYPES``); ``amp-*`` keeps
fp32 weights and traces under autocast (``CudaMirror(amp_dtype=...)``); ``fp32``/``tf32`` as built.
``fp8`` is traced with bf16 weights and a bf16 cache: weight-only (or W8A8) quantisation changes
GEMM speed and weight bytes, which is the serving estimator's business. The cache holds the
compute dtype (bf16/fp16, the AMP dtype, or fp32); an fp8 cache is :func:`kv_bytes_per_token`'s
``kv_dtype_bytes=1``.

MoE: transformers (>= 5) runs the experts as ``grouped_mm`` (sort the token-expert pairs,
``histc`` offsets, two ``_grouped_mm`` GEMMs over ``tokens x top_k`` rows), whose shapes do not
depend on the routing, so Mixtral/Qwen2-MoE-style models trace as HF runs them (FLOPs and bytes of
``_grouped_mm``: ``gpucast.graph.rules``). transformers' ``eager`` experts loop (older releases,
or ``experts_implementation="eager"``) asks which experts were hit (``nonzero``), which has no
value on the meta device: such a trace raises a JobError rather than return wrong ops.

Architectures without SDPA support (Gemma-2's logit soft-capping) run HF's eager attention
(explicit matmuls, softmax and mask) with either cache, as ``gpucast.graph.hf`` builds them.

Timing (one CPU core of the development machine, torch 2.14, transformers 5.25; measured with
``time.perf_counter``, not asserted anywhere): after transformers is imported (about 2 s, once
per process), a Llama-3-8B-shaped config (32 layers, hidden 4096, 8 KV heads, vocab 128,256)
builds on meta in about 0.3 s (a Llama-3-70B shape too); a trace then takes about 0.12 s for the
8B shape (about 2,500 ops: a decode step, a 512-token prefill or chunk, a batch of 64 at 4k
context alike) and about 0.3 s for the 70B shape (about 6,300 ops); a memoised trace answers in
microseconds. A memoised 8B trace holds about 1.6 MB (its op records and memory timeline).

Not modelled: sampling (not in the forward), the engine's host work (scheduling, block tables,
detokenisation), CUDA graphs, ragged batches (every sequence here has the same context and new
tokens), prefix caching, speculative decoding, tensor-parallel collectives (the estimator adds
them from ``Trace.layout``), LoRA adapters, attention sinks (GPT-OSS: traced as fused attention without
them, :data:`SINK_ATTENTION`), sliding-window attention in the paged cache (it reads
the whole context, as the closed form of :func:`kv_bytes_per_token` counts it), and attention
layouts other than (grouped-)multi-head attention and MLA (DeepSeek-V2/V3, ``kv_lora_rank``: its
cache holds the compressed latent and the rotary key per token, as transformers' own layer caches
them; the serving estimator decodes over it as vLLM does). Gated delta-net layers (Qwen3-Next, Qwen3.5)
and Mamba-2 layers (Nemotron-H, Granite-4, Bamba; ``layer_types`` ``"linear_attention"``) run as the
engines' fused kernels with a per-sequence state in the paged cache (:mod:`gpucast.graph.linear_attention`;
the dynamic cache refuses them), Nemotron-H's MLP and MoE blocks without a cache; other linear-attention
and state-space layers (Mamba-1, Jamba, Falcon-H1, Zamba-2, Kimi-Linear) are refused. DeepSeek sparse
attention (DeepSeek-V3.2, GLM-5) is traced as its dense sibling, DeepSeek-V3
(:mod:`gpucast.graph.sparse_attention`: the serving estimator adds the indexer and the top-k), and caches
its FP8 indexer keys beside the latents.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from dataclasses import dataclass, field
import torch

from gpucast import imports
from gpucast.graph import linear_attention, serving_config
from gpucast.graph.blocks import BlockWatch, find_blocks, heads_of
from gpucast.graph.mirror import CudaMirror
from gpucast.graph.serving_caches import cache_tensors, dynamic_cache, paged_cache
from gpucast.graph.serving_config import LRU, kv_bytes_per_token, state_bytes_per_sequence  # noqa: F401 (the face)
from gpucast.graph.trace import Trace
from gpucast.graph.precision import AMP_DTYPES, PURE_DTYPES
from gpucast.graph.tracer import CaptureError, _Recorder, _stage
from gpucast.job import JobError

__all__ = ["CACHES", "kv_bytes_per_token", "model_shape", "state_bytes_per_sequence", "trace_iteration"]

CACHES = ("paged", "dynamic")
MODELS_KEPT = 4  # meta-built models (an 8B or 70B shape: about 0.3 s to build)
TRACES_KEPT = 64  # memoised iteration traces (~1.6 MB each for an 8B shape; the estimator memoises its costs)
# Models of one or two layers (the serving estimator's layer samples: gpucast.estimate.serving.iteration)
# are kept apart, more of them: their traces are ~1/16-1/40 of a whole model's.
SMALL_LAYERS = 2
SMALL_MODELS_KEPT = 16
SMALL_TRACES_KEPT = 1024
_ATTN = "gpucast_serving"  # the attention (and mask) implementation the serving models run
_REGIONS = ("pre", "post", "sharded", "replicated", "attention_core")
# Models whose attention adds learned sinks (one extra logit per head: GPT-OSS), which transformers runs only
# eagerly (explicit matmuls and softmax); the engines run fused attention with sinks (vLLM's and SGLang's
# FlashAttention-3 / TRT-LLM's kernels), so they are traced through this module's SDPA attention, the sink's
# extra logit left out (a 1/context share of the scores).
SINK_ATTENTION = {"gpt_oss"}


_MODELS = LRU(MODELS_KEPT)
_TRACES = LRU(TRACES_KEPT)
_SMALL_MODELS = LRU(SMALL_MODELS_KEPT)
_SMALL_TRACES = LRU(SMALL_TRACES_KEPT)


def _small(job) -> bool:
    return serving_config.shape(job)["layers"] <= SMALL_LAYERS


def model_shape(job) -> dict:
    """``{'layers', 'hidden', 'heads', 'kv_heads', 'head_dim', 'vocab', 'intermediate', 'max_context',
    'experts', 'experts_per_token', 'tied', 'cache_k_dim', 'cache_v_dim', 'mla', 'linear', 'attention_layers',
    'stateless_layers', 'sparse', 'parameters', 'expert_parameters', 'moe_layers'}`` of the job's HF config;
    ``max_context`` is ``max_position_embeddings``, ``experts`` ``num_local_experts``, ``num_experts`` or
    ``n_routed_experts`` (0 for a dense model), ``tied`` whether the head shares the embedding's weights,
    ``cache_k_dim``/``cache_v_dim`` what a token's cache holds per K/V head (``head_dim``; MLA: the latent and
    the rotary key, one "head"), ``mla`` MLA's dims (``lora``, ``rope``, ``nope``, ``v``; None without it),
    ``linear`` the linear-attention layers (:func:`gpucast.graph.linear_attention.dims`; None without them),
    ``attention_layers`` the layers that keep K/V, ``stateless_layers`` those that keep nothing (Nemotron-H's
    MLP/MoE blocks), ``sparse`` DeepSeek sparse attention's indexer (:func:`gpucast.graph.sparse_attention.dims`;
    None without it), ``parameters`` the count of the meta-built model (built once per config and precision,
    cached), ``expert_parameters`` those of the routed experts (the ``(E, in, out)`` weights of transformers'
    MoE layers) and ``moe_layers`` the modules holding them."""
    shape = dict(serving_config.shape(job))   # a copy: the cached shape is shared
    built = _model(job)
    shape.update(parameters=built.parameters, expert_parameters=built.expert_parameters, moe_layers=built.moe_layers)
    return shape


# --------------------------------------------------------------------------- the model
@dataclass
class _Model:
    model: torch.nn.Module
    shape: dict
    parameters: int
    parameter_bytes: int
    param_tensors: int
    expert_parameters: int
    moe_layers: int
    modules: int
    cache_kw: str  # "cache" (transformers >= 5) or "past_key_values"
    logits_kw: str | None  # "logits_to_keep" or "num_logits_to_keep"; None: the model keeps all
    lock: threading.Lock = field(default_factory=threading.Lock)  # hooks on a shared model: one trace at a time


def _dtypes(precision: str) -> tuple[torch.dtype | None, torch.dtype | None, torch.dtype]:
    """(weights cast to, autocast dtype, cache dtype) for a precision."""
    if precision in ("fp8", "mxfp8", "nvfp4"):   # quantised checkpoints: traced in bf16, bytes and rates applied later
        return torch.bfloat16, None, torch.bfloat16
    if precision in PURE_DTYPES:
        return PURE_DTYPES[precision], None, PURE_DTYPES[precision]
    if precision in AMP_DTYPES:
        return None, AMP_DTYPES[precision], AMP_DTYPES[precision]
    return None, None, torch.float32


def _precision(job) -> str:
    """The precision traced: fp16 MoE models trace in bf16 (PyTorch's ``_grouped_mm`` takes no fp16 operands
    even on meta; the engines' fp16 MoE kernels have bf16's FLOPs and bytes, and A100/H100 peaks are equal)."""
    cfg = serving_config.hf_config(job)
    moe = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    if moe and job.precision in ("fp16", "amp-fp16"):
        return {"fp16": "bf16", "amp-fp16": "amp-bf16"}[job.precision]
    return job.precision


def _model(job) -> _Model:
    serving_config.hf_config(job)  # a Hugging Face job, or a JobError
    weights, _, _ = _dtypes(_precision(job))
    key = (job.hf_config, str(weights))
    models = _SMALL_MODELS if _small(job) else _MODELS
    built = models.get(key)
    if built is None:
        with imports.LOCK:  # as tracer._build: a model's library modules are imported on first use
            built = models.get(key)
            if built is None:
                built = _build(job)
                models.put(key, built)
    return built


def _build(job) -> _Model:
    from gpucast.graph import hf

    cfg = serving_config.built_config(job)  # a fresh one: building sets its attention implementation
    _check_causal_lm(job, cfg, hf._model_class(cfg))
    shape = serving_config.shape_of(cfg)
    _register_attention()
    weights = _dtypes(_precision(job))[0]
    with torch.device("meta"):
        model = _stage("building the model", hf._build, cfg).to("meta")
        if weights is not None:
            model = model.to(weights)
    model.eval()
    if shape["linear"]:   # the engines' fused kernels instead of transformers' torch fallbacks (linear_attention)
        linear_attention.patch_model(model, shape["linear"]["kind"])
    if model.config._attn_implementation == hf._ATTN:  # SDPA: ours adds the cache's masks (module docstring)
        model.config._attn_implementation = _ATTN
    elif model.config._attn_implementation == "eager" and cfg.model_type in SINK_ATTENTION:
        model.config._attn_implementation = _ATTN   # fused attention, as the engines run it (SINK_ATTENTION)
    params = list(model.parameters())
    experts = shape.get("experts") or 0
    holders = [m for m in model.modules()
               if experts and any(p.ndim == 3 and p.shape[0] == experts for p in m.parameters(recurse=False))]
    names = inspect.signature(model.forward).parameters
    logits_kw = next((n for n in ("logits_to_keep", "num_logits_to_keep") if n in names), None)
    return _Model(
        model=model, shape=shape,
        parameters=sum(p.numel() for p in params),
        parameter_bytes=sum(p.numel() * p.element_size() for p in params),
        param_tensors=len(params), modules=sum(1 for _ in model.modules()),
        expert_parameters=sum(p.numel() for m in holders for p in m.parameters(recurse=False)),
        moe_layers=len(holders),
        cache_kw="cache" if "cache" in names else "past_key_values", logits_kw=logits_kw,
    )


def _check_causal_lm(job, cfg, cls) -> None:
    auto = imports.load("transformers.models.auto.modeling_auto")
    causal = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(cfg.model_type)
    causal = set(causal) if isinstance(causal, (list, tuple)) else {causal}  # GPT-2's is GPT2LMHeadModel
    is_causal_lm = cls.__name__.endswith("ForCausalLM") or cls.__name__ in causal
    if getattr(cfg, "is_encoder_decoder", False) or not is_causal_lm:
        raise JobError(f"a serving iteration needs a decoder-only Hugging Face causal LM; {job.model} is not one "
                       f"(its model class is {cls.__name__})")
    other = set(getattr(cfg, "layer_types", None) or ()) - serving_config.ATTENTION_LAYERS
    kind = linear_attention.kind_of(cfg)
    if kind is not None:   # layers linear_attention runs (and Mamba-2 hybrids' stateless MLP/MoE blocks)
        other -= {linear_attention.LINEAR_LAYER, *(linear_attention.STATELESS_LAYERS if kind == "mamba2" else ())}
    if other:
        raise JobError(f"a serving iteration of {job.model}: its {', '.join(sorted(map(str, other)))} layers are "
                       f"not modelled (attention layers only)")


# --------------------------------------------------------------------------- attention and masks
# Whether the forward running in this context uses the paged cache (no masks: module docstring).
_PAGED: contextvars.ContextVar[bool] = contextvars.ContextVar("gpucast_serving_paged", default=False)


@functools.cache
def _register_attention() -> None:
    transformers = imports.load("transformers")
    masking = imports.load("transformers.masking_utils")
    if not hasattr(transformers, "AttentionInterface") or not hasattr(masking, "AttentionMaskInterface"):
        raise ImportError(f"serving traces need transformers' attention and mask interfaces, which transformers "
                          f"{transformers.__version__} lacks: upgrade transformers")
    transformers.AttentionInterface.register(_ATTN, _attention)
    masking.AttentionMaskInterface.register(_ATTN, _mask)


def _mask(*args, **kwargs):
    """HF's SDPA mask for the dynamic cache; none for the paged one (its kernels take no mask)."""
    if _PAGED.get():
        return None
    return imports.load("transformers.masking_utils").sdpa_mask(*args, **kwargs)


def _attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
               is_causal: bool | None = None, **kwargs):
    """HF's SDPA attention, except for a prefill chunk on cached tokens without a mask (the paged
    cache): HF would keep only the first T keys there (its shortcut for an empty static cache);
    this runs causal attention over all ``context + T`` keys, flash's bottom-right alignment."""
    kwargs.pop("s_aux", None)   # attention sinks (SINK_ATTENTION): one logit more per head and query
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if attention_mask is None and causal and 1 < q_len < kv_len and kwargs.get("position_bias") is None:
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout, scale=scaling, is_causal=True,
            enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
        return out.transpose(1, 2).contiguous(), None
    sdpa = imports.load("transformers.integrations.sdpa_attention")
    return sdpa.sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                       is_causal=is_causal, **kwargs)


# --------------------------------------------------------------------------- the iteration
def trace_iteration(job, batch: int, new_tokens: int, context: int, cache: str = "paged") -> Trace:
    """The ops of one engine iteration (module docstring). Memoised by (job.key, batch, new_tokens,
    context, cache); the trace returned is shared: read it, do not change it."""
    _check_shape(batch, new_tokens, context, cache)
    key = (job.key, batch, new_tokens, context, cache)
    traces = _SMALL_TRACES if _small(job) else _TRACES
    trace = traces.get(key)
    if trace is None:
        trace = _trace(job, batch, new_tokens, context, cache)
        traces.put(key, trace)
    return trace


def _check_shape(batch, new_tokens, context, cache) -> None:
    for name, value, low in (("batch", batch, 1), ("new_tokens", new_tokens, 1), ("context", context, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise JobError(f"serving iteration: {name} must be an integer >= {low}, got {value!r}")
    if cache not in CACHES:
        raise JobError(f"serving iteration: cache must be one of {', '.join(CACHES)}, got {cache!r}")


def _trace(job, batch: int, new_tokens: int, context: int, cache: str) -> Trace:
    m = _model(job)
    if m.shape["linear"] and cache != "paged":
        raise JobError(f"a serving iteration of {job.model}: its linear-attention layers run transformers' torch "
                       f"fallback in the dynamic cache (engine 'hf'), which is not modelled; choose vllm, sglang or "
                       f"trtllm")
    _, amp, dtype = _dtypes(_precision(job))
    kv = (paged_cache(m.shape, dtype, batch, new_tokens, context) if cache == "paged"
          else dynamic_cache(m.shape, m.model.config, dtype, batch, context))
    ids = torch.zeros((batch, new_tokens), dtype=torch.long, device="meta")
    kwargs = {"input_ids": ids, m.cache_kw: kv, "use_cache": True}
    if m.logits_kw:
        kwargs[m.logits_kw] = 1
    rec = _Recorder()
    for t in list(m.model.parameters()) + list(m.model.buffers()):
        rec.memory.track(t, "parameters", before_step=True)
    for t in cache_tensors(kv) + [ids]:  # the cache exists before the iteration (the estimator owns its size)
        rec.memory.track(t, "inputs", before_step=True)
    with m.lock:
        layout = _run(job, m, rec, kwargs, amp, cache == "paged", context)
    memory = rec.memory.report(len(rec.ops), [o.phase for o in rec.ops], None)
    return Trace(
        job_key=job.key, model=job.model, mode="infer", precision=job.precision, batch_size=batch,
        ops=rec.ops, memory=memory, parameters=m.parameters, parameter_bytes=m.parameter_bytes,
        input_bytes=ids.numel() * ids.element_size(), modules=m.modules, param_tensors=m.param_tensors,
        input_tensors=1, input_kinds=[("int64", (new_tokens,))],
        notes=[f"serving iteration: {batch} x {new_tokens} new tokens on {context} cached ({cache} cache)"],
        layout=layout,
    )


def _run(job, m: _Model, rec: _Recorder, kwargs: dict, amp: torch.dtype | None, paged: bool, context: int):
    """The forward under the recorder; the model's block layout (None if it has no blocks)."""
    model = m.model
    blocks = find_blocks(model)
    watch = BlockWatch(rec, model, blocks) if blocks else None
    token = _PAGED.set(paged)
    linear = linear_attention.ACTIVE.set(("cached" if context else "fresh") if paged else None)
    try:
        with rec, torch.no_grad(), CudaMirror(amp_dtype=amp, on_rnn=rec.on_rnn):
            out = _stage("the serving forward pass", lambda: model(**kwargs))
            del out
    except CaptureError as exc:
        if m.shape["experts"] and isinstance(exc.__cause__, NotImplementedError):
            raise JobError(f"a serving iteration of {job.model}: its experts run as a loop over the experts "
                           f"the router picked (transformers' eager experts), which needs the router's values; "
                           f"the meta device has none (transformers' grouped_mm experts trace)") from None
        raise
    finally:
        _PAGED.reset(token)
        linear_attention.ACTIVE.reset(linear)
        if watch is not None:
            watch.remove()
    if watch is None:
        return None
    layout = watch.layout(model, heads_of(model))
    layout.activations = dict.fromkeys(_REGIONS, 0)  # inference: nothing is saved for a backward
    return layout
