"""Causal fused attention computes the causal triangle, not the whole ``q x k`` square.

``torch.utils.flop_counter``'s SDPA formulas (``sdpa_flop_count``, ``sdpa_backward_flop_count``) count every
query-key pair whatever ``is_causal`` says, but a fused kernel with a causal mask skips the tiles above the
diagonal: FlashAttention's kernels (``flash_fwd_kernel``'s ``n_block_max`` for ``Is_causal``), cuDNN's and
PyTorch's memory-efficient kernel all stop each query block's loop at the diagonal. The rates the kernel
model applies to attention (``achieved.yaml``'s ``attention`` shares: FlashAttention-2 and -3's published
TFLOPs/s, our H200's cuDNN rows in ``benchmarks/h200_kernels.py``) count a causal kernel's FLOPs as
half the square's, the convention of FlashAttention's benchmarks (``flops(..., causal)`` divides by 2).
So a causal fused attention op (forward or backward) carries the share of the pairs it computes:
with ``q`` queries over ``k`` keys, query ``i`` sees keys ``0..i`` (PyTorch's ``is_causal``: the mask is
``tril(ones(q, k))``, aligned top-left), ``sum_i min(i + 1, k)`` pairs of ``q k``; ``(s + 1) / (2 s)`` for a
square of ``s``.

Registered with :func:`gpucast.graph.rules.flop_share_rule` (:mod:`gpucast.graph.mirror`, which records these
ops, imports this module). Read from the op's own ``is_causal`` argument (every fused SDPA op of ``aten`` and its backward has one;
the varlen ``_flash_attention_forward`` family, which captures do not record, is left whole),
so an op given an explicit mask (``attn_bias``, ``is_causal`` False) keeps the whole square, as its kernel
computes it. Not modelled: the diagonal tiles computed whole (a ``1 / (2 s / tile)`` share more: 3 % at
2,048 tokens and 128-row tiles), bottom-right aligned masks (FlashAttention's own API past 2.1 for
``q < k``; SDPA's ``is_causal`` is top-left).
"""

from __future__ import annotations

from torch.utils.flop_counter import sdpa_flop_count

from gpucast.graph import rules

# The fused SDPA ops (query and key as (..., tokens, head dim)) whose flop_counter formulas count the whole square,
# forward and backward: the ones a capture records (gpucast.graph.mirror)
FUSED = frozenset({
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
})


def pairs_share(queries: int, keys: int) -> float:
    """The share of the ``queries x keys`` pairs a top-left aligned causal mask keeps."""
    if queries <= 0 or keys <= 0:
        return 1.0
    inside = min(queries, keys)   # queries 0..inside-1 see i + 1 keys; the rest see all k
    kept = inside * (inside + 1) / 2 + (queries - inside) * keys
    return kept / (queries * keys)


def _arg(func, args, kwargs, name: str):
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if name in kwargs:
                return kwargs[name]
            return args[i] if i < len(args) else a.default_value
    return None


@rules.flop_share_rule(*FUSED)
def share(func, args, kwargs) -> float:
    """The share of its flop_counter FLOPs a fused attention op computes (module docstring): 1 unless its
    ``is_causal`` is set."""
    if not _arg(func, args, kwargs, "is_causal"):
        return 1.0
    query, key = _arg(func, args, kwargs, "query"), _arg(func, args, kwargs, "key")
    if query is None or key is None or query.dim() < 2:
        return 1.0
    return pairs_share(int(query.shape[-2]), int(key.shape[-2]))


def chunk_pairs(new: int, cached: int) -> float:
    """Query-key pairs of a causal chunk of ``new`` tokens over ``cached`` ones, aligned bottom-right as the
    serving engines' paged kernels run a chunked prefill (query ``i`` sees ``cached + i + 1`` keys)."""
    return new * cached + new * (new + 1) / 2


def traced_causal(op) -> bool:
    """Whether a traced fused attention forward (an :class:`~gpucast.graph.trace.OpRecord`) was counted as causal:
    fewer FLOPs than flop_counter's whole square for its shapes."""
    if op.op not in FUSED or len(op.shapes) < 3:
        return False
    return op.flops < 0.999 * sdpa_flop_count(*op.shapes[:3])
