"""The KV caches a serving iteration is traced with (:mod:`gpucast.graph.serving`'s module docstring).

* :func:`paged_cache`: a preallocated cache per layer (vLLM/SGLang/TensorRT-LLM), keys and values for
  ``context + new_tokens`` tokens of ``cache_k_dim``/``cache_v_dim`` per K/V head (MLA: the latent and the
  rotary key); an iteration writes only its new tokens (``PagedLayer.update``).
  A gated delta-net layer (:mod:`gpucast.graph.linear_attention`) gets a ``StateLayer`` instead: each
  sequence's conv and recurrent state, of a fixed size, updated in place by the layer's kernels.
* :func:`dynamic_cache`: transformers' own ``DynamicCache`` (the ``hf`` engine), pre-filled.

Not modelled: block tables and paging itself (the cache is one contiguous tensor per layer).
"""

from __future__ import annotations

import functools

import torch

from gpucast import imports


@functools.cache
def _state_class() -> type:
    """A gated delta-net layer's preallocated state (a transformers ``LinearAttentionCacheLayerMixin``)."""
    cu = imports.load("transformers.cache_utils")
    if not hasattr(cu, "LinearAttentionCacheLayerMixin"):
        raise ImportError(f"serving traces of linear-attention layers need transformers' "
                          f"LinearAttentionCacheLayerMixin, "
                          f"which transformers {imports.load('transformers').__version__} lacks: upgrade transformers")

    class StateLayer(cu.LinearAttentionCacheLayerMixin):
        """The conv and recurrent state of ``batch`` sequences that have seen ``cached`` tokens; the
        kernels (:mod:`gpucast.graph.linear_attention`) update them in place."""

        def __init__(self, conv: torch.Tensor, recurrent: torch.Tensor, cached: int) -> None:
            super().__init__()
            self.conv_states[0], self.recurrent_states[0] = conv, recurrent
            self.is_conv_states_initialized[0] = self.is_recurrent_states_initialized[0] = True
            self.has_previous_state[0] = True   # the layer passes its states to the kernels whatever the history
            self.conv_kernel_size[0] = conv.shape[-1]
            self.cached, self.device, self.dtype = cached, conv.device, conv.dtype

        def lazy_initialization(self, *args, **kwargs) -> None:
            pass

        def update_conv_state(self, conv_states, state_idx: int = 0, **kwargs):
            return self.conv_states[state_idx]

        def update_recurrent_state(self, recurrent_states, state_idx: int = 0, **kwargs):
            return self.recurrent_states[state_idx]

        def get_seq_length(self) -> int:
            return self.cached

    return StateLayer


@functools.cache
def _paged_classes() -> tuple[type, type]:
    """The paged cache (a transformers ``Cache`` of ``PagedLayer``), defined on first use."""
    cu = imports.load("transformers.cache_utils")
    if not hasattr(cu, "CacheLayerMixin"):
        raise ImportError(f"serving traces need transformers' cache-layer API (cache_utils.CacheLayerMixin), which "
                          f"transformers {imports.load('transformers').__version__} lacks: upgrade transformers")

    class PagedLayer(cu.CacheLayerMixin):
        """One layer's preallocated K/V for ``cached + new`` tokens; ``update`` writes the new ones."""

        is_sliding = False
        is_compileable = False

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, cached: int) -> None:
            super().__init__()
            self.keys, self.values, self.cached = keys, values, cached
            self.device = keys.device
            self.is_initialized = True

        def lazy_initialization(self, key_states, value_states) -> None:
            pass

        def update(self, key_states, value_states, *args, **kwargs):
            end = self.cached + key_states.shape[-2]
            self.keys[:, :, self.cached:end].copy_(key_states)
            self.values[:, :, self.cached:end].copy_(value_states)
            if end == self.keys.shape[-2]:
                return self.keys, self.values
            return self.keys[:, :, :end], self.values[:, :, :end]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.cached + query_length, 0

        def get_seq_length(self) -> int:
            return self.cached

        def get_max_length(self) -> int:
            return self.keys.shape[-2]

    class PagedCache(cu.Cache):
        """A preallocated cache as serving engines keep one (gpucast.graph.serving)."""

        def __init__(self, layers: list) -> None:
            super().__init__(layers=layers)

    return PagedCache, PagedLayer


def paged_cache(s: dict, dtype: torch.dtype, batch: int, new_tokens: int, context: int):
    """A preallocated cache holding ``context + new_tokens`` tokens per layer (``s``: the model's shape)."""
    PagedCache, PagedLayer = _paged_classes()
    total = context + new_tokens
    k, v = (batch, s["kv_heads"], total, s["cache_k_dim"]), (batch, s["kv_heads"], total, s["cache_v_dim"])
    from gpucast.graph.linear_attention import state_dtype

    linear = s.get("linear") or {"layers": ()}
    stateless = set(s.get("stateless_layers") or ())
    cu = imports.load("transformers.cache_utils")
    layers = []
    for i in range(s["layers"]):
        if i in linear["layers"]:
            layers.append(_state_class()(torch.empty((batch, *linear["conv"]), dtype=dtype, device="meta"),
                                         torch.empty((batch, *linear["state"]), dtype=state_dtype(linear, dtype),
                                                     device="meta"), context))
        elif i in stateless:   # an MLP or MoE block (Nemotron-H): no cache
            layers.append(cu.DummyLayer())
        else:
            layers.append(PagedLayer(torch.empty(k, dtype=dtype, device="meta"),
                                     torch.empty(v, dtype=dtype, device="meta"), context))
    return PagedCache(layers)


def dynamic_cache(s: dict, config, dtype: torch.dtype, batch: int, context: int):
    """transformers' ``DynamicCache`` for ``config``, pre-filled with ``context`` tokens per layer."""
    cu = imports.load("transformers.cache_utils")
    _paged_classes()  # the same cache-layer API check
    try:
        cache = cu.DynamicCache(config=config)  # sliding-window layers as HF makes them
    except TypeError:
        cache = cu.DynamicCache()
    if context:
        for i in range(s["layers"]):
            k = torch.empty((batch, s["kv_heads"], context, s["cache_k_dim"]), dtype=dtype, device="meta")
            v = torch.empty((batch, s["kv_heads"], context, s["cache_v_dim"]), dtype=dtype, device="meta")
            cache.update(k, v, i)
    return cache


def cache_tensors(cache) -> list[torch.Tensor]:
    tensors = []
    for layer in getattr(cache, "layers", ()):
        held = [getattr(layer, "keys", None), getattr(layer, "values", None),
                *getattr(layer, "conv_states", {}).values(), *getattr(layer, "recurrent_states", {}).values()]
        tensors += [t for t in held if isinstance(t, torch.Tensor)]
    return tensors
