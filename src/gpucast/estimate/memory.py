"""Device memory of a job's process, as nvidia-smi would show it at the step's peak.

``total = CUDA context + allocator reserved peak + library workspaces + DDP buckets``, the
quantity ``nvidia-smi memory.used`` shows for the process (``allocated_peak_bytes`` is torch's
``max_memory_allocated``, kept apart):

* CUDA context and kernel images (:class:`~gpucast.estimate.environment.Environment`): with lazy
  module loading (the stack's ``lazy``: PyTorch >= 2.0 on CUDA >= 11.7, or set) only the kernels
  used are loaded (``cuda_context_lazy_bytes``); without it every image of PyTorch, cuBLAS and
  cuDNN is (``+ cuda_context_eager_extra_bytes``); Kepler/Pascal scale both by
  ``old_gpu_context_factor``. Not visible to ``torch.cuda.memory_allocated``;
* the caching allocator's reserved peak from the trace's timeline
  (``gpucast.graph.memory``: live tensors rounded and packed into segments);
* cuBLAS workspace when the step runs GEMMs, cuDNN workspace when it runs convolutions (the
  larger ``cudnn_benchmark_workspace_bytes`` when ``cudnn.benchmark`` autotunes);
* with data parallelism (``gpus > 1``), DDP's gradient buckets: one flat copy of the gradients.

Not modelled: NCCL's own buffers, other processes, MIG, ``expandable_segments``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.constants import OLD_ARCHITECTURES, EstimatorConfig
from gpucast.estimate.environment import Environment
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job
from gpucast.surroundings import Surroundings


@dataclass
class MemoryEstimate:
    total_bytes: int
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    breakdown: dict[str, int]  # tensor classes at the peak + context, workspaces, buckets


def cuda_context_bytes(gpu: GpuSpec, env: Environment, sur: Surroundings) -> int:
    context = env.cuda_context_lazy_bytes + (0 if sur.stack.lazy else env.cuda_context_eager_extra_bytes)
    if gpu.architecture in OLD_ARCHITECTURES:
        context *= env.old_gpu_context_factor
    return int(context)


def device_memory(trace: Trace, job: Job, gpu: GpuSpec, cfg: EstimatorConfig, env: Environment,
                  sur: Surroundings) -> MemoryEstimate:
    m = trace.memory
    context = cuda_context_bytes(gpu, env, sur)
    cats = {o.category for o in trace.ops}
    cudnn = env.cudnn_benchmark_workspace_bytes if sur.loop.cudnn_benchmark else cfg.cudnn_workspace_bytes
    workspace = (cfg.cublas_workspace_bytes if cats & {"matmul", "attention", "rnn"} else 0) + \
                (cudnn if "conv" in cats else 0)
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
