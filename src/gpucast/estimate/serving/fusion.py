"""A decoder layer's small ops as an engine with its own kernels runs them: a few fused kernels.

vLLM, SGLang and TensorRT-LLM run a layer's norms, rotary embedding, cache write and gated activation as
fused kernels, where the traced Hugging Face layer runs each as a chain of elementwise ops (transformers'
RMSNorm alone: pow, mean, rsqrt, two multiplies, casts). :func:`fused` keeps the trace's GEMMs, attention
and embedding as traced and puts the rest into :data:`FUSED_KERNELS_PER_LAYER` elementwise kernels a layer
that move :data:`FUSION_BYTES` times fewer bytes than the chain. ``hf`` (eager transformers) keeps the trace.

A mixture-of-experts layer's token movement (:func:`moe_kernels`): transformers' grouped-GEMM experts gather
every token's ``k`` copies in bf16 (``index``), scale the experts' outputs by the routing weights (``mul``),
scatter them back to token order (a second ``index``) and sum the ``k`` copies (``sum``), each a pass over
``n k`` rows of the hidden size. The engines run that as two kernels: a permute that reads each token once
and writes its ``k`` copies in the expert GEMMs' operand format (FP8 or NVFP4 where the activations are
quantised: TensorRT-LLM's ``expandInputRowsKernel`` quantises while it copies), and a finalize that reads the
``k`` outputs once, weights and sums them and writes the token's row (TensorRT-LLM's
``finalizeMoeRoutingKernel``; vLLM's fused_moe applies the weights in the second GEMM's epilogue and sums
with ``moe_sum``: the same bytes). The weighting ``mul`` and the ``sum`` go into the finalize. Under attention
data parallelism over ``t`` ranks (``ranks``) the layer takes all ``t`` ranks' gathered tokens (already in
the operand format: post-quantisation dispatch) and writes all of theirs before the reduce-scatter, while a
rank's experts get its share of the routed rows, ``n k`` with as many expert ranks as attention ranks.

Not modelled: which op fuses with which (the bytes are pooled over the layer's small ops), GEMM epilogues
that absorb an activation or a quantisation; vLLM's Triton fused_moe reading the permuted rows inside its
first GEMM instead of copying them (it then reads the ``n k`` rows there: taken as the permute's bytes).
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


def _rows(shape) -> tuple[int, int] | None:
    """(rows, width) of a 2-D shape, else None."""
    ok = isinstance(shape, tuple) and len(shape) == 2 and all(isinstance(d, int) for d in shape)
    return (shape[0], shape[1]) if ok else None


def moe_kernels(ops: list, model: dict, operand_bytes: float = 2.0, ranks: int = 1) -> list:
    """``ops`` with each MoE layer's gather, weighting, scatter and sum as an engine's permute and finalize
    kernels (module docstring). ``model``: the served shape (``hidden``, ``experts``, ``experts_per_token``);
    ``operand_bytes``: bytes of an element of the expert GEMMs' activations (2, FP8 1, NVFP4 with its scales
    0.5625); ``ranks``: the attention-data-parallel ranks whose tokens the layer takes (1: its own)."""
    h, k = model.get("hidden") or 0, model.get("experts_per_token") or 0
    if not model.get("experts") or k < 1 or not h:
        return ops
    src_bytes = operand_bytes if ranks > 1 else 2.0   # gathered tokens arrive quantised
    out, permuted = [], set()
    for o in ops:
        src = _rows(o.shapes[0]) if o.shapes else None
        dst = _rows(o.out_shapes[0]) if o.out_shapes else None
        if o.op == "index" and src and dst and src[1] == h == dst[1]:
            if dst[0] == src[0] * k:          # the permute: each token read once, its k copies written
                permuted.add(dst[0])
                out.append(dataclasses.replace(o, bytes_read=int(ranks * src[0] * h * src_bytes),
                                               bytes_written=int(dst[0] * h * operand_bytes)))
                continue
            if dst[0] == src[0] and src[0] in permuted:   # the scatter back: the finalize reads the k outputs once
                out.append(dataclasses.replace(o, op="moe_finalize", bytes_read=int(src[0] * h * 2),
                                               bytes_written=int(ranks * (src[0] // k) * h * 2)))
                continue
        if o.op == "mul" and src and src[0] in permuted and src[1] == h and len(o.shapes) == 2 \
                and _rows(o.shapes[1]) == (src[0], 1):
            continue                          # the routing weights: in the finalize
        if o.op == "sum" and o.shapes and len(o.shapes[0]) == 3 and tuple(o.shapes[0][1:]) == (k, h) \
                and o.shapes[0][0] * k in permuted:
            continue                          # the k copies' sum: in the finalize
        out.append(o)
    return out


def fused(trace, layers: int, model: dict | None = None, operand_bytes: float = 2.0, ranks: int = 1):
    """The trace as an engine with fused kernels runs it (module docstring); ``layers``: the traced model's;
    ``model``, ``operand_bytes``, ``ranks``: a MoE model's shape, its expert GEMMs' operand bytes and its
    attention-data-parallel ranks (:func:`moe_kernels`)."""
    ops = moe_kernels(list(trace.ops), model, operand_bytes, ranks) if model else list(trace.ops)
    kept = [o for o in ops if o.category in KEEP]
    rest = [o for o in ops if o.category not in KEEP and o.kernels > 0]
    if not rest:
        return dataclasses.replace(trace, ops=[dataclasses.replace(o, index=i) for i, o in enumerate(kept)]) \
            if len(kept) != len(trace.ops) else trace
    n = FUSED_KERNELS_PER_LAYER * layers
    per = int(sum(o.bytes_read + o.bytes_written for o in rest) / FUSION_BYTES / n)
    numel = (max(1, per // 4),)  # elements of 2-byte data read and written: the kernel's grid follows them
    small = [dataclasses.replace(rest[0], op="fused_elementwise", category="elementwise", flops=0, shapes=(numel,),
                                 out_shapes=(numel,), bytes_read=per // 2, bytes_written=per - per // 2, kernels=1)
             for _ in range(n)]
    return dataclasses.replace(trace, ops=[dataclasses.replace(o, index=i) for i, o in enumerate(kept + small)])
