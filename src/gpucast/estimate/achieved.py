"""What each kernel family reaches of a GPU's sustained peak, per architecture and software.

``data/achieved.yaml`` holds, per kernel family (``matmul`` and ``matmul_fp8``, ``conv``,
``attention`` and ``attention_backward``, ``rnn``, ``other``), the fraction of the sustained peak (:meth:`GpuSpec.sustained_tflops
<gpucast.hardware.GpuSpec.sustained_tflops>`: the datasheet peak at the clock the card holds
under its power limit) that the family's kernels reach in steady state: a large problem, every SM
busy with the architecture's largest tile. What a smaller grid loses on top is
:mod:`gpucast.estimate.tiles`'s. The ``reference`` row is the one the constants were built on
(Volta to Ada, and the older SIMT GPUs); an architecture lists only the families whose kernels
reach a different share there, each with the published figures it comes from. Attention also
depends on the kernel the job's stack runs (``stack.attention``: ``flash2``, PyTorch's own SDPA
flash kernel in every release, or ``flash3``, the Hopper kernels of the flash-attn 3 package).

Not modelled: differences between cuBLAS/cuDNN releases within an architecture (one figure per
architecture and family, for the stacks the sources measured), per-dtype differences beyond the
datasheet peaks other than FP8's (FP16, BF16 and TF32 GEMMs share the matmul fraction).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

FAMILIES = ("matmul", "matmul_fp8", "conv", "attention", "attention_backward", "rnn", "other")
DEFAULT_ATTENTION = "flash2"


@lru_cache(maxsize=1)
def _table() -> dict:
    return yaml.safe_load(resources.files("gpucast").joinpath("data/achieved.yaml").read_text())


def _value(entry, attention: str) -> float:
    if isinstance(entry, dict) and "value" not in entry:  # per attention kernel
        entry = entry.get(attention) or entry[DEFAULT_ATTENTION]
    return float(entry["value"])


@lru_cache(maxsize=64)
def fractions(architecture: str, attention: str | None = None) -> dict[str, float]:
    """Family -> steady-state fraction of the sustained peak on ``architecture`` with the
    ``attention`` kernel (``None``: :data:`DEFAULT_ATTENTION`)."""
    t = _table()
    att = attention or DEFAULT_ATTENTION
    own = t.get("architectures", {}).get(architecture, {}) or {}
    return {f: _value(own.get(f, t["reference"][f]), att) for f in FAMILIES}


def family_of(category: str, op: str = "", dtype: str = "") -> str:
    """The kernel family of an op (anything not a library family is ``other``; a fused attention
    op's backward is ``attention_backward``, a GEMM on FP8 operands ``matmul_fp8``)."""
    if category == "attention" and op.endswith("backward"):
        return "attention_backward"
    if category == "matmul" and dtype.startswith("float8"):
        return "matmul_fp8"
    return category if category in FAMILIES else "other"
