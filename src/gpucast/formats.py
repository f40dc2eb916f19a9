"""Transformer Engine's low-precision formats: which tensor-core rate their GEMMs run at, what a GPU
needs for them, and the bytes of an element as TE stores it (training and inference steps; a
deployment's weight format is ``serve.weights``).

Three of a job's precisions run the linear layers' GEMMs through Transformer Engine's recipes
(the trace is the same for all three, :mod:`gpucast.graph.fp8`: operands cast and transposed,
``torch._scaled_mm``; everything but those GEMMs in bf16):

* ``fp8``: per-tensor scaling (TE's delayed or current scaling; E4M3 forward, E5M2 gradients), at
  the FP8 tensor rate, on Ada, Hopper and Blackwell;
* ``mxfp8``: OCP MX FP8 (Open Compute Project *Microscaling Formats (MX) v1.0*, 2023): blocks of
  32 elements along the GEMM's reduction dimension with one E8M0 (power-of-two) scale each; the
  block-scaled MMA of Blackwell's fifth-generation tensor cores runs it at the FP8 rate (NVIDIA
  Blackwell architecture technical brief); TE's ``MXFP8BlockScaling`` recipe needs compute
  capability 10.0 or later. An element is 1 byte plus 1/32 of a scale byte;
* ``nvfp4``: NVIDIA's NVFP4 (E2M1 values in blocks of 16 with an E4M3 scale each and an fp32
  scale a tensor; *Pretraining Large Language Models with NVFP4*, NVIDIA 2025), its GEMMs at the
  FP4 tensor rate, on GPUs with FP4 tensor cores (Blackwell). An element is half a byte plus 1/16
  of a scale byte.

The layers a recipe keeps in bf16 are ``stack.bf16_layers`` (:func:`gpucast.graph.fp8.bf16_blocks`).

Not modelled: NVFP4's random Hadamard transforms of the weight-gradient GEMM's inputs and
stochastic rounding of the gradients (their kernels), the block scales' own quantisation kernels
(costed as the per-tensor cast), MXFP8's second, column-wise quantisation from bf16 (costed as the
FP8 transpose).
"""

from __future__ import annotations

# Precisions whose linear layers run Transformer Engine's low-precision GEMMs (module docstring).
TE_RECIPES = ("fp8", "mxfp8", "nvfp4")
# The recipes whose weights TE can keep as FP8 parameters (Float8Tensor, MXFP8Tensor: Megatron-Core's
# --fp8-param-gather; gpucast.estimate.parallel.fp8_params).
FP8_PARAM_RECIPES = ("fp8", "mxfp8")
# The tensor-core rate (GpuSpec.sustained_tflops dtype) each recipe's GEMMs run at.
GEMM_RATE = {"fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4"}
# Bytes of one stored element, its block scales included (module docstring).
ELEMENT_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32, "nvfp4": 0.5 + 1.0 / 16,
                 "mxfp4": 0.5 + 1.0 / 32}   # OCP MX: E2M1 in blocks of 32 with an E8M0 scale (GPT-OSS's experts)
# Block-scaled FP8 (MXFP8) needs Blackwell's tensor cores: compute capability 10.0 and later.
MXFP8_FROM = (10, 0)


def unsupported(precision: str, gpu) -> str | None:
    """Why ``gpu`` cannot train at ``precision`` (one line), or None."""
    if precision == "mxfp8" and tuple(gpu.compute_capability) < MXFP8_FROM:
        return (f"mxfp8 needs block-scaled FP8 tensor cores (Blackwell, compute capability 10.0 and "
                f"later); {gpu.name} has none: use fp8")
    if precision == "nvfp4" and gpu.fp4_tflops is None:
        return f"nvfp4 needs FP4 tensor cores (Blackwell); {gpu.name} has none: use fp8"
    return None
