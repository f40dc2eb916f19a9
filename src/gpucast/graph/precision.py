"""How a job's precision casts the captured model: the weights' dtype and autocast's.

``bf16``/``fp16`` (pure half precision) cast the model's floating weights and inputs; ``amp-*``
keep fp32 weights under autocast; Transformer Engine's recipes (``fp8``, ``mxfp8``, ``nvfp4``,
:mod:`gpucast.formats`) run under bf16 autocast over fp32 weights, except as Megatron-Core runs
them (``stack.kernels: transformer-engine``, :mod:`gpucast.graph.te`): bf16 weights, no autocast.
"""

from __future__ import annotations

import torch

from gpucast.formats import TE_RECIPES

# Autocast's dtype by precision: TE's recipes run the model under bf16 autocast (gpucast.graph.fp8).
AMP_DTYPES = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16,
              **{p: torch.bfloat16 for p in TE_RECIPES}}
# Pure half precision: the model's floating weights and inputs are cast (no autocast).
PURE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def te_layers_of(job) -> bool:
    """Whether the job runs Transformer Engine's layers as Megatron-Core builds them (gpucast.graph.te)."""
    return job.stack is not None and job.stack.kernels == "transformer-engine"


def pure_dtype(job):
    """The dtype the model's weights are cast to, or None: pure half precision, and TE's recipes under
    Megatron-Core (bf16 weights, no autocast)."""
    if job.precision in TE_RECIPES and te_layers_of(job):
        return torch.bfloat16
    return PURE_DTYPES.get(job.precision)


def amp_dtype(job):
    """Autocast's dtype for the job, or None (no autocast)."""
    return None if job.precision in TE_RECIPES and te_layers_of(job) else AMP_DTYPES.get(job.precision)
