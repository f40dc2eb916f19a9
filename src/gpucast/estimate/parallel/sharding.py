"""What each data-parallel sharding strategy shards, and which collectives it runs when.

One row per strategy (:data:`STRATEGIES`), like torch's flop-formula registry: the model-state
bytes of a rank follow from the row (:func:`model_states`), and the collectives from its
``gathers``/``grad_collective``/``per_micro_batch`` columns (:mod:`gpucast.estimate.parallel`).

Model states per trainable parameter, mixed-precision Adam (the ZeRO paper, Rajbhandari et al.
2020, sec. 3.1: ``2 + 2 + K`` bytes with ``K = 12``: half-precision weights and gradients, an fp32
master copy and Adam's two fp32 moments):

==============  =============================  =========================================
strategy        shards over the *d* replicas    collectives (per micro-batch / per step)
==============  =============================  =========================================
ddp             nothing                         all-reduce of the gradients, once a step,
                                                overlapped with the last backward
zero1           optimizer states (K)            reduce-scatter of the gradients once a step,
                                                all-gather of the updated weights
zero2           + gradients                     reduce-scatter every micro-batch, all-gather
                                                of the updated weights once a step
zero3           + weights                       all-gather of the weights in forward and in
                                                backward, reduce-scatter, every micro-batch
fsdp-full       everything (FULL_SHARD)         as zero3
fsdp-grad-op    everything at rest, weights      all-gather in forward only (kept for the
                gathered from forward to the    backward), reduce-scatter every micro-batch
                end of backward (SHARD_GRAD_OP)
fsdp-hybrid     everything within a node,       as fsdp-full inside the node, plus an
                replicated across nodes          all-reduce of the gradient shard across nodes
                (HYBRID_SHARD)
==============  =============================  =========================================

Byte layout by framework: PyTorch DDP under autocast keeps fp32 weights and fp32 gradients and
Adam's fp32 moments (4 + 4 + 8 = 16 bytes, the same total as the ZeRO paper's 2 + 2 + 12);
DeepSpeed ZeRO under fp16/bf16 keeps half-precision weights and gradients and an fp32 master in
the optimizer (2 + 2 + 12); FSDP keeps its sharded flat parameters in fp32 (they are the master),
fp32 sharded gradients and fp32 moments, and gathers half-precision copies to compute
(``MixedPrecision(param_dtype=bf16)``, 4 + 4 + 8 sharded, plus the gathered units). Without mixed
precision every strategy is 4 + 4 + K' (K' the optimizer's own state bytes, 8 for Adam). A
pure half-precision model (precision ``bf16``/``fp16``) under plain DDP keeps its weights, gradients
and the optimizer's moments in that dtype (2 + 2 + K'/2); under ZeRO or FSDP the optimizer keeps
fp32 masters as above. ``K'`` is read from the trace (optimizer state bytes per trainable parameter,
counted at fp32), so SGD with
momentum (4) and no optimizer (0) follow. Frozen parameters (adapters' base weights) have no
gradient and no optimizer state; their bytes are the trace's (bf16 or 4-bit), sharded with the
weights.

The optimizer's state dtypes (``parallel.optimizer_moments`` / ``parallel.master_weights``, Megatron-Core's
precision-aware optimizer: ``OptimizerConfig.use_precision_aware_optimizer`` with ``exp_avg_dtype``,
``exp_avg_sq_dtype``, ``main_params_dtype`` and ``store_param_remainders``, on Transformer Engine's
``FusedAdam``): the moments' ``K'`` scales with their element size (:data:`MOMENT_BYTES` over fp32's 4),
and the master copy of the ZeRO layout is :data:`MASTER_WEIGHT_BYTES` a parameter: 4 in fp32, 2 in fp16,
and 2 as remainders, the low 16 bits of each fp32 weight whose high 16 are the bf16 weight itself (Megatron-
Core: "store the 16-bit FP32 parameter remainders ... excluding the 16 bits shared with the BF16
parameters"; Apex's ``DistributedFusedAdam`` the same). Megatron-Bridge's DeepSeek-V3 and Qwen3-MoE recipes
keep bf16 moments with fp32 master weights as remainders: 2 + 2 + 4 + 2 = 10 bytes a parameter before
sharding instead of 16. ``parallel.grad_dtype: fp32`` keeps the ZeRO layout's gradients in fp32 and reduces
them so (Megatron-Core's ``grad_reduce_in_fp32``; Megatron-LM's "bf16 param, fp32 grads" row: 6 + 12/d bytes
with its distributed optimizer).

Not modelled: the optimizer step's shorter kernels in the smaller dtypes (they read and write fewer bytes),
DeepSpeed's CPU/NVMe offload, ZeRO++ (quantised or hierarchical partitions),
FSDP2's per-parameter sharding (the same bytes), the optimizer's own temporaries.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    name: str
    shards_optimizer: bool
    shards_grads: bool
    shards_weights: bool
    framework: str             # "torch-ddp" | "deepspeed" | "fsdp": the byte layout (module docstring)
    gathers: str               # "" | "fwd" | "fwd+bwd": weight all-gathers per micro-batch
    grad_collective: str       # "all-reduce" | "reduce-scatter"
    grads_per_micro_batch: bool  # the gradient collective runs every micro-batch (sharded gradients)
    gather_after_step: bool    # updated weights all-gathered after the optimizer step
    hybrid: bool = False       # shards within a node, all-reduces the shard across nodes


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("ddp", False, False, False, "torch-ddp", "", "all-reduce", False, False),
    Strategy("zero1", True, False, False, "deepspeed", "", "reduce-scatter", False, True),
    Strategy("zero2", True, True, False, "deepspeed", "", "reduce-scatter", True, True),
    Strategy("zero3", True, True, True, "deepspeed", "fwd+bwd", "reduce-scatter", True, False),
    Strategy("fsdp-full", True, True, True, "fsdp", "fwd+bwd", "reduce-scatter", True, False),
    Strategy("fsdp-grad-op", True, True, True, "fsdp", "fwd", "reduce-scatter", True, False),
    Strategy("fsdp-hybrid", True, True, True, "fsdp", "fwd+bwd", "reduce-scatter", True, False, hybrid=True),
)}
AMP = ("amp-fp16", "amp-bf16", "fp8", "mxfp8", "nvfp4")  # TE's recipes: bf16 compute, fp32 master weights
PURE = ("fp16", "bf16")
HALF = AMP + PURE
# The fp32 master weights DeepSpeed's mixed-precision optimizer keeps (ZeRO paper, sec. 3.1).
MASTER_BYTES = 4
# Bytes a parameter of the master copy by gpucast.plan.MASTER_WEIGHTS (module docstring).
MASTER_WEIGHT_BYTES = {"fp32": MASTER_BYTES, "fp16": 2, "remainders": 2}
# Bytes a gradient of the ZeRO layout by gpucast.plan.GRAD_DTYPES (Megatron-Core's grad_reduce_in_fp32: fp32
# main grads, reduced in fp32; unset: in the weights' half dtype).
GRAD_BYTES = {"half": 2.0, "fp32": 4.0}
# Bytes an element of the optimizer's moments by gpucast.plan.OPTIMIZER_MOMENTS (FP8's per-tensor scales
# are not counted: one float a tensor).
MOMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelStates:
    """Bytes of one rank's weights, gradients and optimizer states at rest."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def model_states(strategy: Strategy, precision: str, trainable: float, frozen_bytes: float,
                 optimizer_bytes_per_param: float, shard: int, moments: str | None = None,
                 master: str | None = None, grad_kind: str | None = None) -> ModelStates:
    """One rank's model states: ``trainable`` parameters (elements on this rank before sharding),
    ``frozen_bytes`` of frozen weights, the optimizer's own state bytes per trainable parameter
    (8 for Adam, at fp32), sharded ``shard`` ways as the strategy says; ``moments`` / ``master`` the
    state's dtypes (``parallel.optimizer_moments`` / ``master_weights``; None: fp32), ``grad_kind`` the ZeRO
    layout's gradient dtype (``parallel.grad_dtype``; None: half; module docstring)."""
    half = precision in HALF
    k = optimizer_bytes_per_param * (MOMENT_BYTES[moments or "fp32"] / MOMENT_BYTES["fp32"])
    if strategy.framework == "deepspeed" and half:
        w, g, o = 2.0, GRAD_BYTES[grad_kind or "half"], MASTER_WEIGHT_BYTES[master or "fp32"] + k
    elif strategy.framework == "torch-ddp" and precision in PURE:  # a half-precision model, its
        w, g, o = 2.0, 2.0, k if moments else k / 2             # optimizer's state in its dtype
    else:
        w, g, o = 4.0, 4.0, k
    n = max(1, shard)
    weights = (trainable * w + frozen_bytes) / (n if strategy.shards_weights else 1)
    grads = trainable * g / (n if strategy.shards_grads else 1)
    opt = trainable * o / (n if strategy.shards_optimizer else 1)
    return ModelStates(weights=weights, gradients=grads, optimizer=opt)


def grad_dtype(strategy: Strategy, precision: str, grad_kind: str | None = None) -> str:
    """The dtype a rank keeps its gradients in, as :func:`model_states` lays them out: ``half`` or ``fp32``."""
    if strategy.framework == "deepspeed" and precision in HALF:
        return grad_kind or "half"
    return "half" if strategy.framework == "torch-ddp" and precision in PURE else "fp32"


def comm_bytes_per_param(strategy: Strategy, precision: str, grad_kind: str | None = None) -> tuple[float, float]:
    """Bytes per parameter of (weight all-gathers, gradient reduction) on the wire: half precision
    under mixed precision (FSDP's ``reduce_dtype``/``param_dtype``, DeepSpeed's fp16/bf16
    communication), except PyTorch DDP, which all-reduces its fp32 gradients, and a ZeRO layout told to
    keep fp32 gradients (``grad_kind``, ``parallel.grad_dtype``: Megatron-Core reduces them in fp32 then)."""
    half = precision in HALF
    gather = 2.0 if half else 4.0
    reduce = 4.0 if (strategy.framework == "torch-ddp" and precision in AMP) or not half else 2.0
    if half and strategy.framework == "deepspeed" and grad_kind:
        reduce = GRAD_BYTES[grad_kind]
    return gather, reduce
