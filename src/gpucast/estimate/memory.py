"""Device memory of a job's process, as nvidia-smi would show it at the step's peak.

``total = CUDA context + allocator reserved peak + library workspaces + DDP buckets``:

* CUDA context and lazily loaded kernel images: ``cuda_context_bytes`` (older GPUs
  ``cuda_context_old_bytes``); not visible to ``torch.cuda.memory_allocated``;
* the caching allocator's reserved peak from the trace's timeline
  (``gpucast.graph.memory``: live tensors rounded and packed into segments);
* cuBLAS workspace when the step runs GEMMs, cuDNN workspace when it runs convolutions;
* with data parallelism (``gpus > 1``), DDP's gradient buckets: one flat copy of the gradients.

Not modelled: NCCL's own buffers, other processes, MIG, ``expandable_segments``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.constants import OLD_ARCHITECTURES, EstimatorConfig
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job


@dataclass
class MemoryEstimate:
    total_bytes: int
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    breakdown: dict[str, int]  # tensor classes at the peak + context, workspaces, buckets


def device_memory(trace: Trace, job: Job, gpu: GpuSpec, cfg: EstimatorConfig) -> MemoryEstimate:
    m = trace.memory
    context = cfg.cuda_context_old_bytes if gpu.architecture in OLD_ARCHITECTURES else cfg.cuda_context_bytes
    cats = {o.category for o in trace.ops}
    workspace = (cfg.cublas_workspace_bytes if cats & {"matmul", "attention", "rnn"} else 0) + \
                (cfg.cudnn_workspace_bytes if "conv" in cats else 0)
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
