"""Model FLOPs of a training step and the utilizations quoted from them (MFU, HFU).

Convention (PaLM, Chowdhery et al. 2022, appendix B, which llm-foundry and Megatron-LM report):
for a transformer of ``N`` parameters and ``L`` layers of width ``h`` trained on sequences of
``s`` tokens, one token costs ``6N + 12 L h s`` FLOPs (forward ``2N``, backward ``4N``, plus the
attention scores' ``QK^T`` and ``AV`` matmuls) whatever is recomputed: MFU counts the work the
model needs, HFU (hardware FLOPs utilization) the work the GPUs run, recomputation included.
With adapters the frozen weights get no weight gradient: ``4N + 2N_trainable`` per token plus
attention (the backward computes the input gradients through every layer, the weight gradients
only of the adapters); say so wherever such an MFU is shown. A model without repeated blocks or
sequences takes the trace's own FLOPs (``torch.utils.flop_counter``'s formulas) per sample. A
mixture-of-experts model counts the parameters a token is routed through: ``N`` less the routed
experts' ``(1 - k/E)`` a token skips (the active parameters, as Megatron-Core's MoE MFU counts them).
A hybrid model's ``L`` counts only the blocks that run softmax attention (:func:`attention_blocks`): its gated
delta-net and Mamba-2 blocks have no ``s x s`` scores (Megatron-LM counts a hybrid's attention layers apart from
its Mamba layers); their mixers' own FLOPs are small beside ``6N`` and are left out, as the convention leaves
out norms.

Peak: the GPU's dense tensor-core rate for the job's precision (bf16, fp16, tf32) or fp32.
"""

from __future__ import annotations

from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec

# fp8: quoted against the BF16 peak, as NVIDIA's and Megatron-LM's FP8 throughput reports do
_PEAK_DTYPE = {"fp8": "bf16", "mxfp8": "bf16", "nvfp4": "bf16", "amp-bf16": "bf16", "amp-fp16": "fp16", "bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp32": "fp32"}


def convention(trace: Trace, adapter: bool) -> str:
    lay = trace.layout
    if lay is None or lay.tokens <= 1:
        return "the trace's FLOPs (torch.utils.flop_counter) per sample"
    return ("4N + 2N_trainable + 12·L·h·s per token (adapters: no weight gradients of frozen weights)"
            if adapter else "6N + 12·L·h·s per token (PaLM appendix B)")


def model_flops_per_sample(trace: Trace, trainable: int, adapter: bool) -> float:
    """Model FLOPs of one training sample (module docstring)."""
    lay = trace.layout
    if lay is None or lay.tokens <= 1:
        return trace.flops / max(trace.batch_size, 1)
    idle = 1.0 - min(lay.experts_per_token, lay.experts) / lay.experts if lay.experts else 0.0
    n = trace.parameters - idle * sum(lay.block_expert_params)       # the parameters a token meets
    trainable = trainable - idle * sum(lay.block_expert_trainable)
    s = lay.tokens
    per_token = (4 * n + 2 * trainable if adapter else 6 * n) + 12 * attention_blocks(trace) * lay.hidden * s
    return per_token * s


def attention_blocks(trace: Trace) -> int:
    """The repeated blocks whose forward runs a softmax-attention op (a fused SDPA/flash kernel); every block when
    none does (attention written as matmuls and a softmax)."""
    seen = {o.block for o in trace.ops
            if o.block >= 0 and o.phase == "fwd" and o.category == "attention" and "attention" in o.op}
    return len(seen) or trace.layout.blocks


def peak_flops(gpu: GpuSpec, precision: str) -> float:
    """FLOP/s of one GPU at its dense peak for the job's precision."""
    dtype = _PEAK_DTYPE.get(precision, "fp32")
    return gpu.peak_tflops(dtype, tensor_cores=dtype != "fp32") * 1e12
