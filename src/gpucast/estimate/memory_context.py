"""Device memory a job's process holds outside PyTorch's caching allocator: what nvidia-smi counts
and ``torch.cuda.max_memory_reserved`` does not.

Two terms, each by the job's stack (:class:`gpucast.surroundings.Stack`: torch and CUDA releases,
lazy or eager module loading) and the GPU's architecture:

* **the CUDA context with the kernel images it holds** (:func:`cuda_context_bytes`). With lazy
  module loading (the stack's ``lazy``: PyTorch >= 2.0 on CUDA >= 11.7, or set) only the kernels a
  process runs are loaded: ``Environment.cuda_context_lazy_bytes`` (cited, ~300-600 MiB on
  Volta..Hopper), or on an architecture with a measured figure (:data:`LAZY_CONTEXT_BY_ARCHITECTURE`,
  CUDA >= 12) that figure. Without lazy loading every kernel image of PyTorch, cuBLAS and cuDNN for
  the GPU's architecture is loaded when the context is made: an eager extra with one tier per CUDA
  major version (:data:`EAGER_CONTEXT_TIERS`: cu10x, cu11x, >= 12, each fitted on the set measured on
  that build), plus cuDNN's sub-libraries when the step runs cuDNN (:func:`uses_cudnn`; cuDNN >= 8
  loads them on first use). Kepler/Pascal scale the whole context by ``old_gpu_context_factor``;
* **the libraries' handles** (:func:`library_handle_bytes`): device memory ``cublasCreate`` and
  ``cudnnCreate`` allocate for themselves, per handle. PyTorch keeps one handle of each library per
  thread and device (``CublasHandlePool.cpp``/``cudnn/Handle.cpp``, ``DeviceThreadHandlePool``), and
  the autograd engine runs backward on its own thread, so a step that runs GEMMs (convolutions) both
  in its forward and its backward holds two cuBLAS (cuDNN) handles, inference one. Per-handle figures
  exist where measured (:data:`LIBRARY_HANDLE_ARCHITECTURES`, lazily loading CUDA >= 12 stacks);
  elsewhere the handles are part of the cited or fitted context and count 0 here.

The measured figures (Hopper) come from the fresh-process runs of our H200 collection
(``benchmarks/h200_memory.py``: NVML process memory - ``max_memory_reserved``, torch 2.11+cu130,
driver 580.159.04): the Environment fields' sources give the fit. CUDA 12 stacks on Hopper take the
same figures: under lazy loading the context is the driver's (the same driver runs either build)
plus the kernels the job runs, and a cuBLAS 12 handle took ~60 MB on GH200 (pika-org/pika#1234).

Not modelled: kernel images a long-lived process accumulates across different jobs (a persistent
worker's context grows by a few MiB per job), the eager context's dependence on the GPU within a
tier, NCCL's own buffers, MPS and MIG contexts, other processes.
"""

from __future__ import annotations

from gpucast.estimate.constants import OLD_ARCHITECTURES
from gpucast.estimate.environment import Environment
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec
from gpucast.surroundings import Stack, Surroundings, version_tuple

# The eager context's extra over the lazy part, by the CUDA version PyTorch was built with: the
# first tier whose bound exceeds the version (Environment field names; sources there).
EAGER_CONTEXT_TIERS: tuple[tuple[tuple[int, ...], str], ...] = (
    ((11,), "cuda_context_eager_extra_cu10_bytes"),   # cu92..cu102
    ((12,), "cuda_context_eager_extra_cu11_bytes"),   # cu110..cu118
    ((10**6,), "cuda_context_eager_extra_bytes"),     # cu12x and later
)
# Lazily loaded contexts measured per architecture (Environment field names), for CUDA >= MEASURED_CUDA.
LAZY_CONTEXT_BY_ARCHITECTURE: dict[str, str] = {"hopper": "cuda_context_lazy_hopper_bytes"}
# Architectures whose cuBLAS/cuDNN handles have a measured per-handle figure (lazy, CUDA >= MEASURED_CUDA).
LIBRARY_HANDLE_ARCHITECTURES = frozenset({"hopper"})
MEASURED_CUDA = (12,)
# Op categories that run cuBLAS (a GEMM, attention's batched GEMMs, an RNN's input projections).
GEMM_CATEGORIES = frozenset({"matmul", "attention", "rnn"})
# The phases the main thread runs (forward, loss, optimizer); backward runs on the autograd engine's.
MAIN_THREAD_PHASES = frozenset({"fwd", "loss", "optim"})


def eager_context_field(stack: Stack) -> str:
    """The Environment field holding the eager context's extra for ``stack``'s CUDA version."""
    cuda = version_tuple(stack.cuda)
    for bound, name in EAGER_CONTEXT_TIERS:
        if cuda < bound:
            return name
    return EAGER_CONTEXT_TIERS[-1][1]


def uses_cudnn_op(op) -> bool:
    """An op cuDNN runs: a convolution, a cuDNN RNN or a batch norm (cuDNN's on CUDA)."""
    return op.category in ("conv", "rnn") or "batch_norm" in op.op


def uses_cudnn(trace: Trace) -> bool:
    """The step runs cuDNN (:func:`uses_cudnn_op`)."""
    return any(uses_cudnn_op(o) for o in trace.ops)


def measured_stack(gpu: GpuSpec, stack: Stack) -> bool:
    """The stack and GPU have measured context and handle figures (:data:`LAZY_CONTEXT_BY_ARCHITECTURE`)."""
    return (stack.lazy and gpu.architecture in LAZY_CONTEXT_BY_ARCHITECTURE
            and version_tuple(stack.cuda) >= MEASURED_CUDA)


def cuda_context_bytes(gpu: GpuSpec, env: Environment, sur: Surroundings, cudnn: bool = False) -> int:
    """The CUDA context with the kernel images it holds: lazy (measured per architecture where a
    figure exists), or eager by the CUDA tier, plus cuDNN's sub-libraries when an eagerly loading
    step runs cuDNN (``cudnn``)."""
    stack = sur.stack
    if measured_stack(gpu, stack):
        return int(getattr(env, LAZY_CONTEXT_BY_ARCHITECTURE[gpu.architecture]))
    context = env.cuda_context_lazy_bytes
    if not stack.lazy:
        context += getattr(env, eager_context_field(stack)) + (env.cudnn_context_eager_bytes if cudnn else 0)
    if gpu.architecture in OLD_ARCHITECTURES:
        context *= env.old_gpu_context_factor
    return int(context)


def handles(trace: Trace, uses) -> int:
    """Threads that run a library's ops in the step (``uses(op)``): the main thread (forward, loss,
    optimizer) and the autograd engine's (backward), each with a handle of its own."""
    main = any(o.phase in MAIN_THREAD_PHASES and uses(o) for o in trace.ops)
    engine = any(o.phase == "bwd" and uses(o) for o in trace.ops)
    return int(main) + int(engine)


def library_handle_bytes(trace: Trace, gpu: GpuSpec, env: Environment, sur: Surroundings) -> dict[str, int]:
    """Device memory of the cuBLAS and cuDNN handles the step creates, by library (empty where the
    stack and GPU have no per-handle figure: the context holds them)."""
    if not (measured_stack(gpu, sur.stack) and gpu.architecture in LIBRARY_HANDLE_ARCHITECTURES):
        return {}
    out = {}
    blas = handles(trace, lambda o: o.category in GEMM_CATEGORIES)
    if blas:
        out["cublas_handles"] = blas * env.cublas_handle_bytes
    dnn = handles(trace, uses_cudnn_op)
    if dnn:
        out["cudnn_handles"] = dnn * env.cudnn_handle_bytes
    return out
