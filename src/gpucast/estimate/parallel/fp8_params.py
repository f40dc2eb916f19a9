"""FP8 parameters: the weights of Transformer Engine's FP8 layers stored in FP8, not in bf16
(``parallel.fp8_param``; Megatron-Core's ``--fp8-param-gather``, NeMo's ``fp8_params``).

Under ``fp8_param`` Megatron-Core builds the model inside TE's ``fp8_model_init``: each FP8 layer's
weight *is* an FP8 tensor (its data and the cached transpose the backward reads, or MXFP8's row- and
column-wise copies with their block scales), so the bf16 copy of those weights is gone; the fp32
master weights stay in the (distributed) optimizer, which writes its shard of the updated weights
straight into FP8. What moves (:func:`weight_bytes`, :func:`gather_bytes`):

* **memory**: a rank keeps the FP8 copy (:mod:`gpucast.estimate.parallel.memory`'s
  ``fp8_weight_cache``, two elements in the recipe's bytes a parameter) and no bf16 weight of its
  FP8 layers: its weights shrink by the FP8 layers' share of the parameters;
* **communication**: the distributed optimizer's all-gather of the updated weights (``zero1``) moves
  the FP8 layers' weights in the recipe's bytes (1 a parameter for FP8, 1 + 1/32 for MXFP8) instead
  of bf16's 2.

Default (:func:`enabled`): on for a ``megatron`` plan at precision ``fp8`` (delayed or current
scaling) or ``mxfp8``, off for ``fp8`` with ``blockwise`` scaling, for ``nvfp4`` and for the other
frameworks, as NVIDIA's recipes run: Megatron-Bridge's presets
(``megatron/bridge/training/mixed_precision.py``: ``bf16_with_fp8_delayed_scaling_mixed``,
``bf16_with_fp8_current_scaling_mixed`` and ``bf16_with_mxfp8_mixed`` set ``fp8_param_gather=True``;
``bf16_with_fp8_subchannel_scaling_mixed`` and ``bf16_with_nvfp4_mixed`` set it False), NeMo 2.0's
``bf16_with_fp8_mixed`` (``fp8_params=True``) and NeMo-Framework-Launcher's H100 performance
scripts (``fp8_params=true``).

**Once a step** (:func:`once_a_step`, with or without FP8 parameters): the trace records each FP8
weight's cast and transpose in every forward (tagged ``fp8_weight``: :mod:`gpucast.graph.fp8`), but
Megatron-Core passes Transformer Engine ``is_first_microbatch``, so TE casts and transposes a weight
in the first micro-batch of a step and reuses the cached FP8 copy in the others (``TELinear``'s
``is_first_microbatch``; with FP8 parameters the optimizer writes the FP8 weight and the transpose is
made once after it): a micro-batch of ``m`` runs ``1/m`` of that work on average. Plans whose
sharding gathers the weights each micro-batch (ZeRO-3, FSDP) cast them again each time.

Not modelled: MXFP8's reuse of the gradient buffer for the parameter all-gather,
``disable_parameter_transpose_cache``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpucast.formats import FP8_PARAM_RECIPES

# (NVFP4 keeps none: Megatron-Bridge's bf16_with_nvfp4_mixed sets fp8_param_gather False.)
PRECISIONS = FP8_PARAM_RECIPES
# bf16: the bytes a weight of a non-FP8 layer keeps and all-gathers.
HALF_BYTES = 2.0


def enabled(par, framework: str, precision: str, fp8_recipe: str | None) -> bool:
    """Whether the plan keeps its FP8 layers' weights in FP8 (module docstring, Default)."""
    if precision not in PRECISIONS:
        return False
    if par.fp8_param is not None:
        return bool(par.fp8_param)
    return framework == "megatron" and (precision == "mxfp8" or fp8_recipe != "blockwise")


def weight_bytes(weights: float, fp8_share: float) -> float:
    """A rank's weight bytes without the bf16 copy of its FP8 layers (``fp8_share``: their share of
    the parameters)."""
    return weights * (1.0 - fp8_share)


def gather_bytes(gather: float, fp8_share: float, element_bytes: float) -> float:
    """Bytes a parameter on the wire of the updated weights' all-gather: the FP8 layers' in the
    recipe's ``element_bytes``, the rest as before (``gather``)."""
    return gather * (1.0 - fp8_share) + element_bytes * fp8_share


def once_a_step(kt, host: np.ndarray, mask: np.ndarray, m: int):
    """Kernel times and host seconds of one micro-batch with the FP8 weight work (``mask``) at ``1/m``
    of its cost: done in one micro-batch of the step's ``m`` (module docstring, Once a step)."""
    if m <= 1 or not mask.any():
        return kt, host
    f = np.where(mask, 1.0 / m, 1.0)
    return replace(kt, time=kt.time * f, compute=kt.compute * f, memory=kt.memory * f), host * f
