"""A decoder layer's small ops as an engine with its own kernels runs them: a few fused kernels.

vLLM, SGLang and TensorRT-LLM run a layer's norms, rotary embedding, cache write and gated activation as
fused kernels, where the traced Hugging Face layer runs each as a chain of elementwise ops (transformers'
RMSNorm alone: pow, mean, rsqrt, two multiplies, casts). :func:`fused` keeps the trace's GEMMs, attention
and embedding as traced and puts the rest into :data:`FUSED_KERNELS_PER_LAYER` elementwise kernels a layer
that move :data:`FUSION_BYTES` times fewer bytes than the chain. ``hf`` (eager transformers) keeps the trace.

Not modelled: which op fuses with which (the bytes are pooled over the layer's small ops), GEMM epilogues
that absorb an activation or a quantisation.
"""

from __future__ import annotations

import dataclasses

# vLLM's Llama layer (vllm/model_executor/models/llama.py) launches two fused_add_rms_norm, one rotary_embedding,
# one reshape_and_cache and one silu_and_mul kernel beside its four GEMMs and its attention: 5 small kernels
# per layer, where Hugging Face's eager layer launches ~70.
FUSED_KERNELS_PER_LAYER = 5
# Bytes the unfused chain of a layer's small ops moves per byte its fused kernels move: each fused kernel reads
# its inputs and writes its output once where the chain writes and re-reads every intermediate; an assumption
# of ~3.
FUSION_BYTES = 3.0
KEEP = ("matmul", "attention", "embedding")   # the categories engines run as traced


def fused(trace, layers: int):
    """The trace as an engine with fused kernels runs it (module docstring); ``layers``: the traced model's."""
    kept = [o for o in trace.ops if o.category in KEEP]
    rest = [o for o in trace.ops if o.category not in KEEP and o.kernels > 0]
    if not rest:
        return trace
    n = FUSED_KERNELS_PER_LAYER * layers
    per = int(sum(o.bytes_read + o.bytes_written for o in rest) / FUSION_BYTES / n)
    numel = (max(1, per // 4),)  # elements of 2-byte data read and written: the kernel's grid follows them
    small = [dataclasses.replace(rest[0], op="fused_elementwise", category="elementwise", flops=0, shapes=(numel,),
                                 out_shapes=(numel,), bytes_read=per // 2, bytes_written=per - per // 2, kernels=1)
             for _ in range(n)]
    return dataclasses.replace(trace, ops=[dataclasses.replace(o, index=i) for i, o in enumerate(kept + small)])
