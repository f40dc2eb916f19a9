"""Sliding-window attention as fused kernels run it: a window's layers compute only their band.

A decoder whose layers alternate sliding-window and full attention (GPT-OSS, Gemma, Mistral's
windowed layers; the Hugging Face config's ``layer_types`` and ``sliding_window``) attends, in a
sliding layer, each token to at most the ``w`` tokens before it. Fused kernels that take the window
(cuDNN's, Transformer Engine's ``DotProductAttention``, FlashAttention's ``window_size``) skip the
tiles outside the band; the trace's attention op carries the FLOPs of a whole causal ``s x s``
attention, its triangle (:mod:`gpucast.graph.causal`). The band does ``w (s - w) + w^2 / 2`` query-key pairs where the
causal triangle does ``s^2 / 2`` (``w < s``), so :func:`view` scales the fused attention ops of
sliding layers by :func:`band_share`.

Applied where the capture runs Transformer Engine's layers (a Megatron-Core plan,
:mod:`gpucast.graph.te`): PyTorch's SDPA with a window's mask computes every tile and masks them,
so an eager or SDPA capture keeps the whole cost, as it runs.

Serving (:mod:`gpucast.estimate.serving.iteration`): the engines' paged attention kernels (vLLM's and
SGLang's FlashAttention/FlashInfer, TensorRT-LLM's) take the window too, so a sliding layer's decode and
prefill-chunk attention read and compute only the keys in its window (:func:`chunk_share`); ``hf``'s SDPA
with a mask keeps the whole cost.

Not modelled: FlashAttention's windows in a training capture outside Transformer Engine, windows wider
than the sequence (no saving), the attention sinks' extra logit, Llama-4's chunked attention (each token
within its chunk of ``attention_chunk_size``: costed as full attention). The cache a window frees (vLLM
V1's hybrid allocator keeps a sliding layer's last window only) is the serving memory plan's
(:func:`gpucast.estimate.serving.memory.windowed`).
"""

from __future__ import annotations

import json
from dataclasses import replace


def band_share(window: int, tokens: int) -> float:
    """The share of a causal ``tokens x tokens`` attention a causal window of ``window`` tokens computes."""
    if window <= 0 or window >= tokens:
        return 1.0
    return (window * (tokens - window) + window * window / 2) / (tokens * tokens / 2)


def chunk_share(window: int, context: int, new: int) -> float:
    """The share of the query-key pairs of ``new`` tokens attending causally over ``context`` cached ones
    (query i sees ``context + i`` keys) that a window of ``window`` tokens keeps (query i sees at most
    ``window``): a serving iteration's decode (``new = 1``) or prefill chunk."""
    if window <= 0 or new <= 0 or context + new <= window:
        return 1.0
    k = max(0, min(new, window - context))      # queries still inside the window's reach
    banded = k * context + k * (k + 1) / 2 + (new - k) * window
    return banded / (new * context + new * (new + 1) / 2)


def windows_of(job) -> list[int]:
    """Each layer's window (0: full attention) from the job's Hugging Face config; [] when it has none."""
    if not getattr(job, "hf_config", None):
        return []
    cfg = json.loads(job.hf_config)
    types, window = cfg.get("layer_types"), cfg.get("sliding_window")
    if not isinstance(types, list) or not isinstance(window, int) or window <= 0:
        return []
    return [window if t == "sliding_attention" else 0 for t in types]


def view(trace, job):
    """``trace`` with the fused attention ops of its sliding-window layers scaled to their band (module
    docstring); the trace itself when no layer has a window shorter than the sequence."""
    windows = windows_of(job)
    tokens = trace.layout.tokens if trace.layout is not None else 0
    shares = [band_share(w, tokens) for w in windows]
    if not any(s < 1.0 for s in shares):
        return trace
    def change(_, o):
        cut = o.category == "attention" and 0 <= o.block < len(shares) and shares[o.block] < 1.0
        return replace(o, flops=int(o.flops * shares[o.block])) if cut else o

    n = sum(s < 1.0 for s in shares)
    return trace.view(("windows", tuple(shares)), change,
                      f"sliding-window attention: {n} of {len(shares)} layers attend {max(windows)} tokens, their "
                      f"fused kernels computing {min(shares):.3f} of a whole {tokens}-token causal attention")
