"""Slurm: a prediction as a ``--gres`` request (shards, MPS or whole GPUs).

Slurm shares a GPU through two GRES types (Slurm's "Generic Resource (GRES) Scheduling" guide,
https://slurm.schedmd.com/gres.html, sections *Sharding* and *MPS Management*):

* ``shard``: a site configures a number of shards per GPU (``Gres=gpu:2,shard:16`` spreads 16
  shards over 2 GPUs, 8 each); a job asking ``--gres=shard:N`` gets N of one GPU's shards. Shards
  do not fence anything: they only count.
* ``mps``: a site configures a count per GPU (commonly 100); ``--gres=mps:N`` gets that part of
  one GPU, and Slurm sets ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` for it.

Both are, by default, satisfied on **one GPU per node** (the guide: "job requests for shards are
required to fit on a single gpu on each node", likewise for MPS). So this module spells
:func:`gpucast.integrations.resources.gpu_share` as:

* a shared single-GPU job: ``shard:ceil(share x shards_per_gpu)`` or
  ``mps:ceil(share x mps_per_gpu)``;
* a job predicted on a MIG slice (``a100-80gb:1g.10gb``, :mod:`gpucast.mig`): ``gpu:1g.10gb:1``,
  the slice as a typed GPU (the guide's *MIG Management* example names the types by profile;
  ``mig_type`` renames them for a site whose gres.conf does otherwise); a job on more than one
  GPU cannot run on slices (ValueError: no peer access between slices);
* an exclusive job, or a data-parallel one (``gpus > 1``, which shards or MPS cannot spread over
  several GPUs): ``gpu:G``, G = the job's GPUs, on one node;
* a job whose parallel plan spans nodes (:class:`~gpucast.integrations.resources.GpuShare`
  ``whole_nodes``): whole nodes, never shards or MPS, ``--nodes=N --ntasks-per-node=G
  --gpus-per-node=G --exclusive`` with G the plan's GPUs per node and one task per GPU
  (``--ntasks=gpus`` instead of ``--ntasks-per-node`` when ``gpus`` is not a multiple of G: the
  last node runs the rest). ``--exclusive`` keeps other jobs off the nodes.

The ``job_submit`` Lua plugin shipped in ``gpucast/data/slurm/job_submit.lua`` applies this at
submission by running ``gpucast slurm SPEC --json`` (with ``--service URL`` when the site points
it at a running ``gpucast serve``: :mod:`gpucast.integrations.remote`). It sets the per-node GRES
(``tres_per_node``) only: for a plan across nodes the JSON's ``nodes``, ``whole_nodes`` and
``sbatch_options`` say what else to ask, and the plugin does not set them yet (submit such a job
with ``sbatch $(gpucast slurm SPEC) ...``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucast.integrations.resources import GpuShare, gpu_share

DEFAULT_SHARDS_PER_GPU = 8
DEFAULT_MPS_PER_GPU = 100


@dataclass(frozen=True)
class GresRequest:
    kind: str          # "shard", "mps", "gpu" or "gpu:<MIG type>"
    count: int         # per node
    share: GpuShare    # what it spells

    @property
    def nodes(self) -> int:
        """Nodes the job asks for (more than 1 only for a plan across nodes)."""
        return self.share.nodes if self.share.whole_nodes else 1

    @property
    def whole_nodes(self) -> bool:
        return self.share.whole_nodes

    @property
    def node_options(self) -> list[str]:
        """The sbatch/srun options of a plan across nodes (empty for a job on one node)."""
        if not self.whole_nodes:
            return []
        s = self.share
        even = s.gpus == s.gpus_per_node * s.nodes
        tasks = f"--ntasks-per-node={s.gpus_per_node}" if even else f"--ntasks={s.gpus}"
        return [f"--nodes={s.nodes}", tasks, f"--gpus-per-node={s.gpus_per_node}", "--exclusive"]

    @property
    def gres(self) -> str:
        """``shard:3``: the value of ``--gres`` (and of ``job_desc.gres`` in job_submit.lua)."""
        return f"{self.kind}:{self.count}"

    @property
    def tres_per_node(self) -> str:
        """``gres/shard:3``: the value of ``job_desc.tres_per_node`` in job_submit.lua, as Slurm
        23.02+ spells it (22.05 wants ``gres:shard:3``; the plugin respells it for the running Slurm)."""
        return f"gres/{self.gres}"

    @property
    def sbatch(self) -> str:
        """``--gres=shard:3``: the sbatch/srun option; for a plan across nodes the node options
        (``--nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --exclusive``)."""
        if self.whole_nodes:
            return " ".join(self.node_options)
        return f"--gres={self.gres}"

    def to_dict(self) -> dict:
        s = self.share
        return {"sbatch": self.sbatch, "gres": self.gres, "tres_per_node": self.tres_per_node, "kind": self.kind,
                "count": self.count, "gpu": s.gpu, "gpus": s.gpus, "share": s.share, "exclusive": s.exclusive,
                "memory_bytes": s.memory_bytes, "util_pct": s.util_pct, "model_version": s.model_version,
                "nodes": self.nodes, "whole_nodes": self.whole_nodes, "gpus_per_node": s.node_gpus()[0],
                "sbatch_options": self.node_options or [self.sbatch]}


def _ceil(x: float) -> int:
    return math.ceil(round(x, 9))  # 0.35 x 20 is 7.000000000000001 in floating point: still 7


def gres_request(prediction_or_share, *, shards_per_gpu: int = DEFAULT_SHARDS_PER_GPU, mps: bool = False,
                 mps_per_gpu: int = DEFAULT_MPS_PER_GPU, mig_type: str = "{profile}") -> GresRequest:
    """The ``--gres`` request for a :class:`~gpucast.prediction.Prediction` (or a
    :class:`~gpucast.integrations.resources.GpuShare`) on a site with ``shards_per_gpu`` shards
    (or, with ``mps``, an MPS count of ``mps_per_gpu``) per GPU; ``mig_type``: the site's GRES
    type of a MIG slice (``{profile}``, ``{gpu}``: the profile and the whole GPU's catalog name)."""
    for name, value in (("shards_per_gpu", shards_per_gpu), ("mps_per_gpu", mps_per_gpu)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    s = prediction_or_share if isinstance(prediction_or_share, GpuShare) else gpu_share(prediction_or_share)
    if ":" in s.gpu:
        from gpucast import mig

        gpu, prof = mig.split(s.gpu)
        if s.gpus > 1 or s.planned:
            raise ValueError(f"{s.gpu} is a MIG slice, one device per job, but the job runs on {s.gpus} GPUs "
                             f"(slices have no peer access)")
        return GresRequest(f"gpu:{mig_type.format(profile=prof, gpu=gpu)}", 1, s)
    if s.whole_nodes:
        return GresRequest("gpu", s.gpus_per_node, s)
    if s.exclusive or s.gpus > 1:
        return GresRequest("gpu", s.gpus, s)
    per_gpu = mps_per_gpu if mps else shards_per_gpu
    count = min(per_gpu, max(1, _ceil(s.share * per_gpu)))
    return GresRequest("mps" if mps else "shard", count, s)


def lua_plugin_path():
    """Where the shipped ``job_submit.lua`` is (copy it next to slurm.conf)."""
    from importlib.resources import files

    return files("gpucast") / "data" / "slurm" / "job_submit.lua"
