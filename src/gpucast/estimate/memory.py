"""Device memory of a job's process, as nvidia-smi would show it at the step's peak.

``total = outside the allocator + the caching allocator's reserved peak (+ DDP buckets)``, the
quantity ``nvidia-smi memory.used`` shows for the process (``allocated_peak_bytes`` is torch's
``max_memory_allocated``, ``reserved_peak_bytes`` its ``max_memory_reserved``). Each term is a
key of :attr:`MemoryEstimate.breakdown` (``gpucast explain`` shows them; they sum to the total):

* outside the allocator (:mod:`gpucast.estimate.memory_context`): ``cuda_context`` (the context and
  the kernel images it loaded, by the stack's loading mode, CUDA release and the architecture),
  ``cublas_handles`` and ``cudnn_handles`` (the libraries' own memory, per handle, where measured);
* the tensors live at the allocated peak, by class (``parameters``, ``gradients``,
  ``optimizer_state``, ``inputs``, ``activations``, ``temporaries``);
* ``cublas_workspaces``: PyTorch's cuBLAS workspace per (handle, stream), 32 MiB on Hopper and
  Blackwell and 8,519,680 bytes before (``CUBLAS_WORKSPACE_CONFIG``'s defaults), plus the 1 MiB
  cuBLASLt one from PyTorch 2.0; one handle per thread that runs GEMMs (training: the main thread and
  the autograd engine's). From PyTorch 1.13 they are allocated through the caching allocator
  (``CublasHandlePool.cpp``, ``getNewWorkspace``; pytorch/pytorch#83461) and kept, so they sit in its
  segments from the first GEMM on; before, cuBLAS allocated its own, outside it;
* ``cudnn_workspaces``: what the convolutions' workspaces add to the reserved peak. PyTorch allocates
  a convolution's workspace from the caching allocator at every call and frees it after. With
  ``cudnn.benchmark`` it is the autotuned algorithm's (``cudnn_benchmark_workspace_ratio`` x 4 bytes
  x the convolution's input, output and filter elements, x ``cudnn_fp16_workspace_factor`` for half
  convolutions; PyTorch empties the cache after the search itself, so the trial workspaces are gone by
  the steady state), without it the heuristics' pick (``EstimatorConfig.cudnn_heuristic_workspace_ratio``);
* ``allocator_overhead``: the rest of the reserved peak: the allocator's 512-byte rounding, its
  segment sizes and the fragmentation of its segments. The reserved peak is the caching allocator
  replayed over the step's allocations in order (:func:`gpucast.graph.allocator.replay`, three steps,
  the optimizer's state made in the first step's optimizer phase, where its first ``step()`` makes it)
  with the libraries' workspaces inserted at their ops (:func:`library_blocks`), with growing
  segments where the stack sets ``expandable_segments``;
* ``ddp_buckets``: with data parallelism (``gpus > 1``), DDP's gradient buckets: one flat copy of
  the gradients.

Not modelled: the autotuner's trial workspaces in the first step (they reach the peak a monitor
samples only if it catches that step), which algorithm cuDNN really picks (the ratio is a typical
size, not a per-algorithm table), cuDNN RNN workspaces, NCCL's own buffers, the allocator's
``PYTORCH_CUDA_ALLOC_CONF`` settings other than ``expandable_segments``, several streams, other
processes, MIG.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.environment import Environment
from gpucast.estimate.memory_context import (  # noqa: F401  (re-exported: callers import them from here)
    EAGER_CONTEXT_TIERS, GEMM_CATEGORIES, MAIN_THREAD_PHASES, cuda_context_bytes, eager_context_field,
    library_handle_bytes, uses_cudnn)
from gpucast.graph.allocator import LibraryBlock, replay
from gpucast.graph.trace import OpRecord, Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job
from gpucast.surroundings import Surroundings, version_tuple

# Architectures whose cuBLAS workspace default is PyTorch's 32 MiB (CublasHandlePool.cpp).
LARGE_CUBLAS_WORKSPACE_ARCHITECTURES = ("hopper", "blackwell")
HALF_DTYPES = ("float16", "bfloat16")
# PyTorch releases that allocate the cuBLAS workspace through the caching allocator
# (pytorch/pytorch#83461, in 1.13) and keep a cuBLASLt workspace per handle beside it (2.0 on).
CUBLAS_WORKSPACE_IN_ALLOCATOR_FROM = (1, 13)
CUBLASLT_WORKSPACE_FROM = (2, 0)
# Steps the allocator is replayed over (gpucast.graph.memory.REPLAYED_STEPS, restated so that this
# module does not import torch; a test checks they agree).
REPLAYED_STEPS = 3
# gpucast.graph.memory's fragmentation allowance (estimate.parallel's per-stage memory uses it).
FRAGMENTATION = 0.05
K_ROUND_LARGE = 2 << 20


@dataclass
class MemoryEstimate:
    total_bytes: int
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    breakdown: dict[str, int]  # tensor classes at the peak + the named terms (module docstring); sums to total


def cublas_workspace_bytes(gpu: GpuSpec, cfg: EstimatorConfig, mode: str) -> int:
    """PyTorch's default cuBLAS workspaces: one per handle, two handles in training."""
    return cublas_handle_workspace(gpu, cfg) * (cfg.cublas_handles_train if mode == "train" else 1)


def cublas_handle_workspace(gpu: GpuSpec, cfg: EstimatorConfig) -> int:
    """The cuBLAS workspace of one (handle, stream) on ``gpu``."""
    return (cfg.cublas_workspace_bytes if gpu.architecture in LARGE_CUBLAS_WORKSPACE_ARCHITECTURES
            else cfg.cublas_workspace_pre_hopper_bytes)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def conv_operand_elements(op: OpRecord) -> int:
    """Input, output and filter elements of a convolution op (forward: ``(input, weight, ...)``
    -> output; backward: ``(grad_output, input, weight)``), 0 for an op of another shape."""
    shapes = [s for s in op.shapes if isinstance(s, tuple) and len(s) >= 3]
    if op.op.endswith("_backward"):
        return sum(_numel(s) for s in shapes[:3])
    outs = [s for s in op.out_shapes if isinstance(s, tuple) and len(s) >= 3]
    return sum(_numel(s) for s in shapes[:2]) + (_numel(outs[0]) if outs else 0)


def conv_workspace_bytes(op: OpRecord, env: Environment, benchmark: bool = True,
                         cfg: EstimatorConfig | None = None) -> int:
    """The workspace one convolution allocates at each call: the autotuned algorithm's under
    ``cudnn.benchmark`` (``env``'s ratio), else the heuristics' pick (``cfg``'s ratio)."""
    ratio = env.cudnn_benchmark_workspace_ratio if benchmark else (cfg or EstimatorConfig()).cudnn_heuristic_workspace_ratio
    ws = ratio * 4 * conv_operand_elements(op)
    if op.dtype in HALF_DTYPES:
        ws *= env.cudnn_fp16_workspace_factor
    return int(ws)


def cublas_in_allocator(sur: Surroundings) -> bool:
    """PyTorch allocates the cuBLAS workspaces through its caching allocator (1.13 on)."""
    return version_tuple(sur.stack.torch) >= CUBLAS_WORKSPACE_IN_ALLOCATOR_FROM


def cublas_blocks(trace: Trace, gpu: GpuSpec, cfg: EstimatorConfig, sur: Surroundings) -> list[LibraryBlock]:
    """The cuBLAS (and cuBLASLt) workspaces PyTorch allocates through the caching allocator at each
    thread's first GEMM (none before PyTorch 1.13: cuBLAS allocated its own, outside)."""
    if not cublas_in_allocator(sur):
        return []
    torch = version_tuple(sur.stack.torch)
    per = cublas_handle_workspace(gpu, cfg)
    out = []
    for thread in (MAIN_THREAD_PHASES, frozenset({"bwd"})):
        first = next((o.index for o in trace.ops if o.phase in thread and o.category in GEMM_CATEGORIES), None)
        if first is not None:
            out.append(LibraryBlock(first, per, persistent=True))
            if torch >= CUBLASLT_WORKSPACE_FROM:
                out.append(LibraryBlock(first, cfg.cublaslt_workspace_bytes, persistent=True))
    return out


def cudnn_blocks(trace: Trace, env: Environment, benchmark: bool, cfg: EstimatorConfig) -> list[LibraryBlock]:
    """Every convolution's workspace, made and freed around its op."""
    out = []
    for op in trace.ops:
        if op.category == "conv":
            ws = conv_workspace_bytes(op, env, benchmark, cfg)
            if ws > 0:
                out.append(LibraryBlock(op.index, ws))
    return out


def library_blocks(trace: Trace, gpu: GpuSpec, cfg: EstimatorConfig, env: Environment,
                   sur: Surroundings) -> tuple[list[LibraryBlock], list[LibraryBlock]]:
    """(cuBLAS, cuDNN) workspaces the step allocates through the caching allocator."""
    return cublas_blocks(trace, gpu, cfg, sur), cudnn_blocks(trace, env, sur.loop.cudnn_benchmark, cfg)


def _reserved(trace: Trace, blocks: list[LibraryBlock], expandable: bool = False) -> tuple[int, int]:
    """(reserved, allocated) peaks with ``blocks``: the allocator replayed when the trace kept its
    allocation log (``expandable``: with expandable segments), else the trace's own peaks plus the
    blocks' bytes, each rounded to 2 MiB."""
    m = trace.memory
    if m.allocations is not None:
        return replay(m.allocations, tuple(blocks), REPLAYED_STEPS, expandable)
    persistent = sum(-(-b.nbytes // K_ROUND_LARGE) * K_ROUND_LARGE for b in blocks if b.persistent)
    transient = max((-(-b.nbytes // K_ROUND_LARGE) * K_ROUND_LARGE for b in blocks if not b.persistent), default=0)
    return m.peak_reserved_bytes + persistent + transient, m.peak_allocated_bytes + persistent


def device_memory(trace: Trace, job: Job, gpu: GpuSpec, cfg: EstimatorConfig, env: Environment,
                  sur: Surroundings) -> MemoryEstimate:
    m = trace.memory
    outside = {"cuda_context": cuda_context_bytes(gpu, env, sur, uses_cudnn(trace))}
    outside.update(library_handle_bytes(trace, gpu, env, sur))
    cublas, cudnn = library_blocks(trace, gpu, cfg, env, sur)
    expandable = bool(sur.stack.expandable_segments) and m.allocations is not None
    reserved_blas, allocated = _reserved(trace, cublas, expandable)
    # the trace's own peak is the default allocator's: a floor only for it
    reserved_blas = max(reserved_blas, m.peak_allocated_bytes if expandable else m.peak_reserved_bytes)
    reserved = max(_reserved(trace, cublas + cudnn, expandable)[0], reserved_blas) if cudnn else reserved_blas
    blas_bytes = sum(b.nbytes for b in cublas)
    gemms = bool({o.category for o in trace.ops} & GEMM_CATEGORIES)
    own_blas = cublas_workspace_bytes(gpu, cfg, job.mode) if gemms and not cublas_in_allocator(sur) else 0
    buckets = trace.gradient_bytes if job.gpus > 1 and job.mode == "train" else 0
    breakdown = dict(m.at_peak)
    tensors = sum(breakdown.values())
    breakdown["cublas_workspaces"] = blas_bytes + own_blas
    breakdown["cudnn_workspaces"] = reserved - reserved_blas
    breakdown["allocator_overhead"] = reserved_blas - tensors - blas_bytes
    breakdown.update(outside)
    if buckets:
        breakdown["ddp_buckets"] = buckets
    total = sum(outside.values()) + reserved + own_blas + buckets
    return MemoryEstimate(total_bytes=int(total), allocated_peak_bytes=int(max(allocated, m.peak_allocated_bytes)),
                          reserved_peak_bytes=int(reserved), breakdown={k: int(v) for k, v in breakdown.items()})
