"""The served model's transformers config and shape, as a serving engine reads them (no tracing here).

:func:`hf_config` is the job's transformers config, cached by its text: a composite (vision-language) config's
language model (``text_config``, :func:`_text`), a sparse-attention model as its dense sibling
(:mod:`gpucast.graph.sparse_attention`). :func:`shape` is what the serving estimator needs of it (layers,
heads, K/V dims, MLA's latent, experts, linear-attention layers, DeepSeek sparse attention's indexer), cached
the same way; :func:`kv_bytes_per_token` and :func:`state_bytes_per_sequence` are the cache's closed forms.
Building and tracing the model is :mod:`gpucast.graph.serving`'s.

Not modelled here: the cache an engine frees (sliding windows: :func:`gpucast.estimate.serving.memory.windowed`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from gpucast.graph import linear_attention, sparse_attention
from gpucast.graph.blocks import experts_of
from gpucast.job import JobError

ATTENTION_LAYERS = {"full_attention", "sliding_attention", "chunked_attention"}  # HF's layer_types we trace


class LRU:
    """A small thread-safe least-recently-used map."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_CONFIGS = LRU(64)   # config text -> (transformers config, its shape)


def hf_config(job):
    """The job's transformers config (cached by config text; read it, never change it)."""
    return _entry(job)[0]


def shape(job) -> dict:
    """The job's model shape (:func:`gpucast.graph.serving.model_shape` less the built model's counts; cached:
    read it, never change it)."""
    return _entry(job)[1]


def _entry(job) -> tuple:
    if not job.model.startswith("hf:") or not job.hf_config:
        raise JobError(f"a serving iteration needs a Hugging Face config (Job.from_hf_config); {job.model} has none")
    got = _CONFIGS.get(job.hf_config)
    if got is None:
        cfg = built_config(job)
        got = (cfg, shape_of(cfg))
        _CONFIGS.put(job.hf_config, got)
    return got


def traced(job):
    """The job whose config transformers builds: a sparse-attention model as its dense sibling
    (:mod:`gpucast.graph.sparse_attention`), any other as it is."""
    import json

    from gpucast.job import canonical_json

    data = json.loads(job.hf_config)
    dense = sparse_attention.traced_data(data)
    return job if dense is data else job.with_(model=f"hf:{dense['model_type']}", hf_config=canonical_json(dense))


def _text(cfg):
    """The language model of a composite (vision-language) config, as an engine serves text prompts with it
    (Qwen3.5's and Llama-4's Hub configs nest it in ``text_config``); the config itself otherwise."""
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    if text is not cfg and getattr(text, "num_hidden_layers", None) and not getattr(cfg, "num_hidden_layers", None):
        return text
    return cfg


def built_config(job):
    """A fresh transformers config of the job's model, as :func:`hf_config` reads it (building a model sets
    its attention implementation: never build from the cached one)."""
    from gpucast.graph import hf

    return _text(hf._config(traced(job)))


def shape_of(cfg) -> dict:
    """The serving shape of a transformers config (:func:`shape`)."""
    heads, hidden = getattr(cfg, "num_attention_heads", None), getattr(cfg, "hidden_size", None)
    if not heads or not hidden or not getattr(cfg, "num_hidden_layers", None):
        raise JobError(f"a serving iteration needs a transformer decoder with attention heads; the "
                       f"{cfg.model_type!r} config has none")
    heads, hidden = int(heads), int(hidden)
    experts, per_token = experts_of(cfg)
    out = {
        "layers": int(cfg.num_hidden_layers),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": int(getattr(cfg, "num_key_value_heads", None) or heads),
        "head_dim": int(getattr(cfg, "head_dim", None) or hidden // heads),
        "vocab": int(cfg.vocab_size),
        # GPT-2-style configs: n_inner None means 4 x hidden
        "intermediate": int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * hidden),
        "max_context": int(getattr(cfg, "max_position_embeddings", None) or 0),
        "experts": experts,
        "experts_per_token": per_token,
        "tied": bool(getattr(cfg, "tie_word_embeddings", False)),
    }
    lora = getattr(cfg, "kv_lora_rank", None)
    if lora:  # MLA: one latent "head" cached per token, its compressed K/V and its rotary key
        rope = int(cfg.qk_rope_head_dim)
        out.update(kv_heads=1, cache_k_dim=int(lora), cache_v_dim=rope,
                   mla=dict(lora=int(lora), rope=rope, nope=int(cfg.qk_nope_head_dim), v=int(cfg.v_head_dim)))
    else:
        out.update(cache_k_dim=out["head_dim"], cache_v_dim=out["head_dim"], mla=None)
    try:
        linear = linear_attention.dims(cfg)
    except ValueError as exc:
        raise JobError(f"a serving iteration: {exc}") from None
    types = list(getattr(cfg, "layer_types", None) or ())
    attention = sum(t in ATTENTION_LAYERS for t in types) if types else out["layers"]
    out.update(linear=linear, attention_layers=attention, sparse=sparse_attention.dims(cfg),
               stateless_layers=[i for i, t in enumerate(types) if t in linear_attention.STATELESS_LAYERS])
    return out


def kv_bytes_per_token(job, kv_dtype_bytes: float | None = None) -> int:
    """Bytes of K and V one token occupies in the whole model's cache: layers x KV heads x head dim
    x 2 x dtype size. The dtype is the cache dtype of :func:`gpucast.graph.serving.trace_iteration` unless given:
    2 for fp16/bf16/amp-*/fp8 (fp8 weights keep a bf16 cache, vLLM's ``kv_cache_dtype="auto"``), 4 for
    fp32/tf32; pass 1 for an fp8 cache. From the HF config: ``num_key_value_heads`` (default
    ``num_attention_heads``), ``head_dim`` (default ``hidden_size // num_attention_heads``),
    ``num_hidden_layers``; MLA (DeepSeek-V2/V3): layers x (``kv_lora_rank`` + ``qk_rope_head_dim``) x
    dtype size, the one latent a token keeps, plus DeepSeek sparse attention's FP8 indexer key and its scale
    (:mod:`gpucast.graph.sparse_attention`). Gated delta-net layers keep no K/V (their state is
    :func:`state_bytes_per_sequence`): only the attention layers count. Sliding-window layers count every token
    here; an engine that frees what their window has passed is the serving memory plan's
    (:func:`gpucast.estimate.serving.memory.windowed`)."""
    s = shape(job)
    size = kv_dtype_bytes if kv_dtype_bytes is not None else cache_bytes(job)
    index_keys = s["attention_layers"] * sparse_attention.key_bytes(s["sparse"])   # DSA's indexer keys (FP8)
    return int(s["attention_layers"] * s["kv_heads"] * (s["cache_k_dim"] + s["cache_v_dim"]) * size + index_keys)


def cache_bytes(job) -> int:
    """Bytes of a cached element at the model's dtype (the cache :func:`gpucast.graph.serving.trace_iteration`
    holds)."""
    return 4 if job.precision in ("fp32", "tf32") else 2


def state_bytes_per_sequence(job) -> int:
    """Bytes of one sequence's gated delta-net state over the whole model (conv and recurrent, at the cache's
    dtype: :mod:`gpucast.graph.linear_attention`); 0 for a model without linear-attention layers."""
    return linear_attention.state_bytes(shape(job)["linear"], cache_bytes(job))
