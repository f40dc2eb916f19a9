"""Sequence packing: several short samples in one ``seq_len``-token sequence, attention per sample.

Fine-tuning recipes (NeMo's and Megatron-Bridge's packed SFT and LoRA, Hugging Face's
``DataCollatorWithFlattening``) pack samples end to end into each training sequence and run
attention on each sample alone: the fused attention kernels take the samples' boundaries
(``cu_seqlens``, Transformer Engine's THD layout, FlashAttention's varlen kernels), so a sequence of
``s`` tokens made of samples of ``L`` tokens computes ``(s / L)`` causal blocks of ``L x L``,
``L / s`` of the FLOPs of one ``s x s`` block. Everything else (the projections, the MLP, the
norms, the loss) works on the ``s`` tokens as before.

``data.packed_sample_len`` is ``L``, the samples' mean length. :func:`view` gives the trace whose
fused attention ops (category ``attention``: SDPA, cuDNN and FlashAttention kernels, forward and
backward) carry ``L / s`` of their FLOPs; their bytes stay (each still reads its Q, K, V once).

Not modelled: the spread of sample lengths (``sum l^2`` of a real mix is above ``s L``: a mean
length underestimates the attention of long-tailed sets), padding to the packed length, eager
attention (its ``s x s`` scores are computed whole and masked: no saving), the loss masking of
prompt tokens.
"""

from __future__ import annotations

from dataclasses import replace


def factor(job, tokens: int) -> float:
    """The share of an ``s x s`` causal attention's FLOPs a packed sequence of ``tokens`` computes."""
    length = job.data.packed_sample_len if job.data is not None else None
    if not length or tokens <= 1:
        return 1.0
    return min(1.0, length / tokens)


def view(trace, job):
    """``trace`` with its fused attention ops' FLOPs scaled to the job's packed samples (module
    docstring); the trace itself when the job packs nothing."""
    tokens = trace.layout.tokens if trace.layout is not None else (job.seq_len or 1)
    f = factor(job, tokens)
    if f >= 1.0:
        return trace
    return trace.view(
        ("packed", f), lambda _, o: replace(o, flops=int(o.flops * f)) if o.category == "attention" else o,
        f"sequence packing: samples of {job.data.packed_sample_len} tokens in {tokens}-token sequences, "
        f"attention per sample ({f:.3f} of a whole sequence's attention FLOPs)")
