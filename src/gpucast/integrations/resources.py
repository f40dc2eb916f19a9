"""How much of a GPU a job needs: the one rule every scheduler translation uses.

From a :class:`~gpucast.prediction.Prediction`:

* **compute share** = the predicted share of time the job's kernels hold the GPU
  (``Prediction.gpu_held_pct``: what a neighbour competes for; NVML's ``gpu_util_pct`` also
  counts the short idle gaps its counter does not resolve, :mod:`gpucast.estimate.nvml`) plus a
  margin (``UTIL_MARGIN_PCT`` points: the typical spread of the prediction's interval on
  well-covered models), as a fraction of the GPU, at least ``MIN_SHARE``;
* **memory** = the upper end of the memory interval plus ``MEMORY_HEADROOM`` (allocator growth
  between steps, a second CUDA context for a data loader), as bytes and as a fraction of the
  GPU's memory;
* **share** = the larger of the two, rounded up to ``GRANULARITY``; a job whose share reaches
  1, or whose memory does not fit, is **exclusive** (it gets whole GPUs).

A data-parallel job (``job.gpus > 1``) gets that share on each of its GPUs; schedulers that
cannot gang fractional GPUs (Ray's ``num_gpus``) are given whole GPUs for it instead.

A job with a parallel plan (``Prediction.plan`` set, ``job.parallel``) on more than one GPU is a
*gang* and is always **exclusive** (its GPUs run near 100 % and hold large shards: no sharing).
When its plan spans nodes (``plan["nodes"] > 1``) it asks for **whole nodes**: ``nodes`` of them,
``gpus_per_node`` (the plan's) GPUs on each, the nodes its alone; a plan inside one node asks for
that node's ``gpus`` GPUs, as a data-parallel job does. The translations spell the node count
and the per-node GPUs in their units (Slurm ``--nodes``/``--exclusive``, one Kubernetes pod per
node, a Ray placement group of one bundle per node).

Under NVIDIA MPS a share can also be enforced in the client's environment (:func:`mps_env`, from
NVIDIA's MPS documentation): ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = the share in percent (the SMs
its kernels may use: :mod:`gpucast.cluster.timeshare.mps`) and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` =
``<device>=<MiB>M`` per visible device (its memory). The Kubernetes MPS mode
(:mod:`gpucast.integrations.k8s_sharing`) and Ray (:mod:`gpucast.integrations.ray`, ``mps=True``)
spell it so.

Not modelled: interference between the jobs that end up sharing (the placement policies in
``gpucast.cluster`` use the co-location model; these translations only size requests), MIG.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# Margin over predicted utilization, percentage points. The analytic model's utilization
# interval on zoo models spans about +-10 points around the point value (docs/accuracy.md).
UTIL_MARGIN_PCT = 10.0
# Extra memory over the upper end of the predicted interval (fraction of it).
MEMORY_HEADROOM = 0.10
# Shares are rounded up to this step (Ray accepts 0.0001; HAMi percent; Slurm shards are coarse).
GRANULARITY = 0.05
MIN_SHARE = GRANULARITY
# An MPS client's limits (NVIDIA, "Multi-Process Service", environment variables of a client).
MPS_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEMORY = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
MIB = 2**20


@dataclass(frozen=True)
class GpuShare:
    gpu: str                 # catalog name of the GPU the prediction is for
    gpus: int                # GPUs the job runs on (data parallel)
    compute_fraction: float  # of one GPU's time, margin included
    memory_bytes: int        # per GPU, headroom included
    memory_fraction: float   # of one GPU's memory
    share: float             # max(compute, memory), rounded up to GRANULARITY, at most 1
    exclusive: bool          # needs whole GPUs
    util_pct: float          # the prediction it came from (NVML's reading), for annotations
    model_version: str
    held_pct: float = 0.0    # the held share the compute fraction was sized from
    nodes: int = 1           # nodes the job spans (more than 1 only for a plan across nodes)
    gpus_per_node: int = 0   # GPUs it asks on each node (the plan's; its ``gpus`` on one node)
    whole_nodes: bool = False  # a plan across nodes: the nodes are its alone
    planned: bool = False    # a parallel plan over more than one GPU (a gang: always exclusive)

    def to_dict(self) -> dict:
        return asdict(self)

    def node_gpus(self) -> list[int]:
        """GPUs the job runs on, node by node: ``[gpus]`` on one node; ``gpus_per_node`` on each
        node of a plan across nodes (the last one takes the rest when ``gpus`` is not a multiple)."""
        if self.nodes <= 1:
            return [self.gpus]
        per = self.gpus_per_node
        return [per] * (self.nodes - 1) + [self.gpus - per * (self.nodes - 1)]


def _round_up(x: float, step: float) -> float:
    return min(1.0, math.ceil(round(x / step, 9)) * step)


def gpu_share(prediction, *, util_margin_pct: float = UTIL_MARGIN_PCT, memory_headroom: float = MEMORY_HEADROOM,
              granularity: float = GRANULARITY) -> GpuShare:
    """The share of a GPU ``prediction``'s job needs (see module docstring)."""
    from gpucast.hardware import get_gpu

    if not 0 < granularity <= 1:
        raise ValueError(f"granularity must be in (0, 1], got {granularity}")
    gpu = get_gpu(prediction.gpu)
    held = getattr(prediction, "gpu_held_pct", 0.0) or prediction.gpu_util_pct   # 0: not predicted
    compute = max(MIN_SHARE, min(100.0, min(held, prediction.gpu_util_pct) + util_margin_pct) / 100.0)
    memory = int(math.ceil(prediction.memory_interval[1] * (1.0 + memory_headroom)))
    mem_frac = memory / gpu.memory_bytes
    share = _round_up(max(compute, mem_frac), granularity)
    gpus = int(prediction.job.get("gpus", 1))
    plan = getattr(prediction, "plan", None) or {}
    gang = bool(plan) and gpus > 1
    nodes = int(plan.get("nodes", 1)) if gang else 1
    per_node = int(plan.get("gpus_per_node", gpus)) if nodes > 1 else gpus
    exclusive = share >= 1.0 or mem_frac > 1.0 or not prediction.fits_in_memory or gang
    return GpuShare(gpu=prediction.gpu, gpus=gpus, compute_fraction=round(compute, 4),
                    memory_bytes=memory, memory_fraction=round(mem_frac, 6), share=1.0 if exclusive else round(share, 4),
                    exclusive=exclusive, util_pct=prediction.gpu_util_pct, model_version=prediction.model_version,
                    held_pct=min(held, prediction.gpu_util_pct), nodes=nodes, gpus_per_node=per_node,
                    whole_nodes=nodes > 1, planned=gang)


def mps_env(share: GpuShare, devices: int = 1) -> dict[str, str]:
    """The MPS client limits that enforce ``share`` on each of ``devices`` visible GPUs (numbered
    from 0 in the client's view): its share of the SMs in percent and its memory in MiB (rounded
    up). Empty for an exclusive job (whole GPUs: nothing to limit)."""
    if share.exclusive:
        return {}
    mib = math.ceil(share.memory_bytes / MIB)
    return {MPS_THREADS: str(int(round(share.share * 100))),
            MPS_MEMORY: ",".join(f"{i}={mib}M" for i in range(devices))}
