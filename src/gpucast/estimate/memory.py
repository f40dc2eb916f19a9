"""Device memory of a job's process, as nvidia-smi would show it at the step's peak.

``total = CUDA context + allocator reserved peak + library workspaces + DDP buckets``, the
quantity ``nvidia-smi memory.used`` shows for the process (``allocated_peak_bytes`` is torch's
``max_memory_allocated``, kept apart):

* CUDA context and kernel images (:class:`~gpucast.estimate.environment.Environment`), by the
  stack's loading mode and CUDA version (:func:`cuda_context_bytes`). With lazy module loading
  (the stack's ``lazy``: PyTorch >= 2.0 on CUDA >= 11.7, or set) only the kernels used are loaded
  (``cuda_context_lazy_bytes``). Without it every kernel image of PyTorch, cuBLAS and cuDNN for
  the GPU's architecture is loaded when the context is made, and how much that is depends on the
  build: the eager extra has one tier per CUDA major version (:data:`EAGER_CONTEXT_TIERS`:
  cu10x, cu11x, >= 12), each a fittable constant with its own prior, since each build ships its
  own set of images (the architectures it targets, its cuBLAS and cuDNN; published figures in the
  constants' sources), so sets measured on different builds fit different tiers.
  Since cuDNN 8 the library loads its convolution, normalisation and RNN sub-libraries on
  first use, so an eagerly loading step that runs cuDNN (:func:`uses_cudnn`) holds their images
  too (``cudnn_context_eager_bytes``). Kepler/Pascal scale the whole context by
  ``old_gpu_context_factor``. Not visible to ``torch.cuda.memory_allocated``;
* the caching allocator's reserved peak from the trace's timeline
  (``gpucast.graph.memory``: live tensors rounded and packed into segments);
* cuBLAS workspaces when the step runs GEMMs: PyTorch's default per (handle, stream), 32 MiB on
  Hopper and Blackwell and 8,519,680 bytes before (``CUBLAS_WORKSPACE_CONFIG``'s defaults), one
  handle per thread, so two in training (the autograd engine's thread runs backward);
* cuDNN workspaces when it runs convolutions. With ``cudnn.benchmark`` each convolution
  allocates the workspace of the algorithm the autotuner chose at every call and frees it after
  (PyTorch empties the cache after the search itself, so the search's larger trial workspace is
  gone by the steady state): a transient block on top of what is live at that op. Its size is
  ``cudnn_benchmark_workspace_ratio`` x 4 bytes x the convolution's input, output and filter
  elements (x ``cudnn_fp16_workspace_factor`` for half convolutions); the reserved memory grows
  only where live bytes plus that block exceed the step's reserved peak
  (:func:`cudnn_workspace_extra_bytes`). Without benchmark the heuristics' pick, the same way
  with the smaller ``EstimatorConfig.cudnn_heuristic_workspace_ratio``;
* with data parallelism (``gpus > 1``), DDP's gradient buckets: one flat copy of the gradients.

Not modelled: the eager context's dependence on the GPU within a tier (each tier is fitted on
one set's GPU), the autotuner's trial workspaces in the first step (they reach the peak a monitor
samples only if it catches that step), which algorithm cuDNN really picks (the ratio is a typical
size, not a per-algorithm table), cuDNN RNN workspaces, segments the allocator adds when smaller
requests split the cached blocks of large same-size tensors (vocabulary-wide logits), NCCL's own
buffers, other processes, MIG, ``expandable_segments``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.constants import OLD_ARCHITECTURES, EstimatorConfig
from gpucast.estimate.environment import Environment
from gpucast.graph.trace import OpRecord, Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job
from gpucast.surroundings import Stack, Surroundings, version_tuple

# The eager context's extra over the lazy part, by the CUDA version PyTorch was built with: the
# first tier whose bound exceeds the version (Environment field names; sources there).
EAGER_CONTEXT_TIERS: tuple[tuple[tuple[int, ...], str], ...] = (
    ((11,), "cuda_context_eager_extra_cu10_bytes"),   # cu92..cu102
    ((12,), "cuda_context_eager_extra_cu11_bytes"),   # cu110..cu118
    ((10**6,), "cuda_context_eager_extra_bytes"),     # cu12x and later
)
# Architectures whose cuBLAS workspace default is PyTorch's 32 MiB (CublasHandlePool.cpp).
LARGE_CUBLAS_WORKSPACE_ARCHITECTURES = ("hopper", "blackwell")
HALF_DTYPES = ("float16", "bfloat16")
# gpucast.graph.memory's large-block rounding and fragmentation allowance, restated so that this
# module does not import torch (that one does; a test checks they agree).
K_ROUND_LARGE = 2 << 20
FRAGMENTATION = 0.05


@dataclass
class MemoryEstimate:
    total_bytes: int
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    breakdown: dict[str, int]  # tensor classes at the peak + context, workspaces, buckets


def eager_context_field(stack: Stack) -> str:
    """The Environment field holding the eager context's extra for ``stack``'s CUDA version."""
    cuda = version_tuple(stack.cuda)
    for bound, name in EAGER_CONTEXT_TIERS:
        if cuda < bound:
            return name
    return EAGER_CONTEXT_TIERS[-1][1]


def uses_cudnn(trace: Trace) -> bool:
    """The step runs cuDNN: a convolution, a cuDNN RNN or a batch norm (cuDNN's on CUDA)."""
    return any(o.category in ("conv", "rnn") or "batch_norm" in o.op for o in trace.ops)


def cuda_context_bytes(gpu: GpuSpec, env: Environment, sur: Surroundings, cudnn: bool = False) -> int:
    """The CUDA context with the kernel images it holds: lazy, or eager by the CUDA tier, plus
    cuDNN's sub-libraries when an eagerly loading step runs cuDNN (``cudnn``)."""
    stack = sur.stack
    context = env.cuda_context_lazy_bytes
    if not stack.lazy:
        context += getattr(env, eager_context_field(stack)) + (env.cudnn_context_eager_bytes if cudnn else 0)
    if gpu.architecture in OLD_ARCHITECTURES:
        context *= env.old_gpu_context_factor
    return int(context)


def cublas_workspace_bytes(gpu: GpuSpec, cfg: EstimatorConfig, mode: str) -> int:
    """PyTorch's default cuBLAS workspaces: one per handle, two handles in training."""
    per_handle = (cfg.cublas_workspace_bytes if gpu.architecture in LARGE_CUBLAS_WORKSPACE_ARCHITECTURES
                  else cfg.cublas_workspace_pre_hopper_bytes)
    return per_handle * (cfg.cublas_handles_train if mode == "train" else 1)


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


def cudnn_workspace_extra_bytes(trace: Trace, env: Environment, benchmark: bool = True,
                                cfg: EstimatorConfig | None = None) -> int:
    """Reserved bytes beyond the step's reserved peak that the convolutions' workspaces need: the
    largest (live bytes at a convolution + its workspace, rounded to 2 MiB as a large block,
    with the allocator's fragmentation allowance) over the step, less the reserved peak."""
    m = trace.memory
    timeline = m.timeline
    need = 0
    for op in trace.ops:
        if op.category != "conv" or op.index >= len(timeline):
            continue
        ws = conv_workspace_bytes(op, env, benchmark, cfg)
        if ws <= 0:
            continue
        block = -(-ws // K_ROUND_LARGE) * K_ROUND_LARGE
        need = max(need, int((timeline[op.index] + block) * (1 + FRAGMENTATION)))
    return max(0, need - m.peak_reserved_bytes)


def device_memory(trace: Trace, job: Job, gpu: GpuSpec, cfg: EstimatorConfig, env: Environment,
                  sur: Surroundings) -> MemoryEstimate:
    m = trace.memory
    context = cuda_context_bytes(gpu, env, sur, uses_cudnn(trace))
    cats = {o.category for o in trace.ops}
    workspace = cublas_workspace_bytes(gpu, cfg, job.mode) if cats & {"matmul", "attention", "rnn"} else 0
    if "conv" in cats:
        workspace += cudnn_workspace_extra_bytes(trace, env, sur.loop.cudnn_benchmark, cfg)
    buckets = trace.gradient_bytes if job.gpus > 1 and job.mode == "train" else 0
    breakdown = dict(m.at_peak)
    breakdown["allocator_overhead"] = m.peak_reserved_bytes - m.peak_allocated_bytes
    breakdown["cuda_context"] = context
    breakdown["workspaces"] = workspace
    if buckets:
        breakdown["ddp_buckets"] = buckets
    total = context + m.peak_reserved_bytes + workspace + buckets
    return MemoryEstimate(total_bytes=int(total), allocated_peak_bytes=m.peak_allocated_bytes,
                          reserved_peak_bytes=m.peak_reserved_bytes, breakdown=breakdown)
