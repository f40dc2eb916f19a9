"""Device memory of one rank of a parallel plan, as nvidia-smi would show it at its peak.

``total = model states + activations + gathered weights + communication buffers + allocator
overhead + CUDA context + workspaces``, each a closed form with its source:

* model states: :func:`gpucast.estimate.parallel.sharding.model_states` (the ZeRO paper's bytes
  per parameter, sharded as the strategy says) over the parameters this rank holds (its stage's,
  divided by the tensor degree);
* activations: :func:`gpucast.estimate.parallel.activations.stage_activations` (Korthikanti et al.
  2022, 1F1B in-flight micro-batches);
* gathered weights: FSDP / ZeRO-3 hold ``gathered_units`` blocks unsharded in half precision
  while computing (FSDP SHARD_GRAD_OP keeps the whole stage gathered through the backward);
* communication buffers: DDP's gradient buckets (a flat copy of the gradients, PyTorch DDP
  paper), DeepSpeed's reduce and all-gather buckets (their defaults), the unsharded gradients of
  one FSDP unit before its reduce-scatter, and NCCL's own buffers per communicator. Megatron-Core's
  DDP and distributed optimizer (``contiguous``, weights not sharded) keep none beside NCCL's: their
  gradient all-reduces and reduce-scatters and the parameter all-gathers run in place on the buckets
  of its flat buffers (``param_and_grad_buffer.py``: ``start_grad_sync`` reduces ``bucket.grad_data``
  into its own shard view, ``start_param_sync`` gathers into ``bucket.param_data``);
* FP8 weight cache: under Megatron-Core, Transformer Engine's FP8 copy of each linear weight and
  its transpose, cast in the first micro-batch and kept for the step (``weight_cache``, two bytes a
  parameter of the FP8 layers on this rank; :mod:`gpucast.graph.te`);
* allocator overhead: :data:`gpucast.graph.memory.FRAGMENTATION` of what PyTorch allocates, except
  under Megatron-Core (``contiguous``) its weights and gradients: its ``ParamAndGradBuffer`` allocates
  each buffer's parameters and gradients as one flat tensor and hands out views of it
  (``megatron/core/distributed/param_and_grad_buffer.py``; NeMo's ``contiguous_grad_buffer`` /
  ``gradient_as_bucket_view``), so the caching allocator rounds those once, not per tensor;
* CUDA context and cuBLAS workspace: :func:`gpucast.estimate.memory.cuda_context_bytes`.

Not modelled: weight offload, the optimizer step's temporaries (foreach kernels over sharded
tensors), pipeline send/receive buffers beyond one micro-batch's activation.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.memory import MemoryEstimate
from gpucast.estimate.parallel.activations import StageActivations
from gpucast.estimate.parallel.constants import ParallelConstants
from gpucast.estimate.parallel.sharding import ModelStates, Strategy
from gpucast.graph.memory import FRAGMENTATION


@dataclass(frozen=True)
class RankParams:
    """The parameters one rank holds before data-parallel sharding."""

    params: float          # elements
    trainable: float       # trainable elements
    frozen_bytes: float    # bytes of the frozen ones as stored (bf16 or 4-bit)
    largest_block: float   # elements of its largest block (one FSDP unit)
    largest_block_trainable: float


def rank_memory(states: ModelStates, acts: StageActivations, rp: RankParams, strategy: Strategy,
                gather_bytes: float, reduce_bytes: float, communicators: int, context: int, workspaces: int,
                consts: ParallelConstants, weight_cache: float = 0.0, contiguous: bool = False) -> MemoryEstimate:
    if strategy.gathers:
        units = rp.params if strategy.name == "fsdp-grad-op" else consts.gathered_units * rp.largest_block
        gathered = min(units, rp.params) * gather_bytes
    else:
        gathered = 0.0
    if contiguous and not strategy.shards_weights:   # Megatron-Core's DDP and distributed optimizer: the
        buffers = 0.0                                # collectives run in place on its flat buffers (docstring)
    elif strategy.framework == "torch-ddp":
        buffers = rp.trainable * reduce_bytes if communicators else 0.0
    elif strategy.framework == "deepspeed":
        bucket = consts.deepspeed_bucket_elements
        if strategy.shards_weights:
            bucket = consts.zero3_prefetch_elements
        buffers = 2 * min(bucket, rp.params) * reduce_bytes
    else:
        buffers = rp.largest_block_trainable * reduce_bytes
    buffers += communicators * consts.nccl_buffer_bytes
    allocated = states.total + acts.total + gathered + buffers + weight_cache
    flat = states.weights + states.gradients if contiguous else 0.0   # one flat buffer (module docstring)
    overhead = FRAGMENTATION * (allocated - flat)
    total = allocated + overhead + context + workspaces
    breakdown = {"weights": int(states.weights), "gradients": int(states.gradients),
                 "optimizer_state": int(states.optimizer), "activations": int(acts.total),
                 "gathered_weights": int(gathered), **({"fp8_weight_cache": int(weight_cache)} if weight_cache else {}), "communication_buffers": int(buffers),
                 "allocator_overhead": int(overhead), "cuda_context": int(context), "workspaces": int(workspaces)}
    return MemoryEstimate(total_bytes=int(total), allocated_peak_bytes=int(allocated),
                          reserved_peak_bytes=int(allocated + overhead), breakdown=breakdown)
