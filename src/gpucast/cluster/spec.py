"""The simulated cluster: nodes of GPUs of catalog types.

A node holds GPUs of one type. GPUs are numbered 0..n-1 node by node; that order is the
first-fit order of the packing policies. The interconnects are not modelled here: a multi-GPU
job without a plan split across nodes runs as fast as one inside a node; a planned gang
(:mod:`gpucast.cluster.gangs`) carries its plan's inter-node communication in its predicted step.

A GPU type may be a MIG slice (``a100-80gb:3g.40gb``, :mod:`gpucast.mig`): :meth:`ClusterSpec.partitioned`
carves the GPUs of some nodes into a static layout, each slice a GPU of the simulated cluster
that takes one one-GPU job at a time (or shares it like any GPU: MPS and time-slicing work inside
a slice), never part of a multi-GPU job (slices have no peer access). A slice counts as its share
of the whole GPU in the cluster's utilization (:meth:`ClusterSpec.weights`). Re-partitioning a
GPU while the simulation runs is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[tuple[str, int], ...]   # (catalog GPU name, GPUs on the node), in GPU-index order

    def __post_init__(self):
        from gpucast.hardware import get_gpu

        if not self.nodes:
            raise ValueError("a cluster needs at least one node")
        for gpu, n in self.nodes:
            get_gpu(gpu)  # raises on an unknown GPU name
            if int(n) < 1:
                raise ValueError(f"a node needs at least one GPU, got {n}")

    @classmethod
    def homogeneous(cls, gpu: str, n_gpus: int, gpus_per_node: int = 8) -> "ClusterSpec":
        """``n_gpus`` GPUs of type ``gpu`` on nodes of ``gpus_per_node`` (the last may be smaller)."""
        return cls.mixed({gpu: n_gpus}, gpus_per_node)

    @classmethod
    def mixed(cls, counts: dict[str, int], gpus_per_node: int = 8) -> "ClusterSpec":
        """Several GPU types, e.g. ``{"v100-16gb": 64, "k80": 64}``; nodes are per type, in order."""
        if gpus_per_node < 1:
            raise ValueError("gpus_per_node must be >= 1")
        nodes = []
        for gpu, n in counts.items():
            if n < 1:
                raise ValueError(f"{gpu}: need at least one GPU, got {n}")
            full, rest = divmod(int(n), gpus_per_node)
            nodes += [(gpu, gpus_per_node)] * full + ([(gpu, rest)] if rest else [])
        return cls(tuple(nodes))

    @classmethod
    def partitioned(cls, gpu: str, n_gpus: int, layout: str, mig_nodes: int | None = None,
                    gpus_per_node: int = 8) -> "ClusterSpec":
        """``n_gpus`` GPUs of type ``gpu`` on nodes of ``gpus_per_node``, the GPUs of the first
        ``mig_nodes`` nodes (None: all) each carved into the MIG ``layout`` (:func:`gpucast.mig.layout`,
        e.g. ``"3g.40gb,2g.20gb,2g.20gb"``): those nodes hold the slices, one node entry per profile."""
        from gpucast import mig

        whole = cls.homogeneous(gpu, n_gpus, gpus_per_node)
        profiles = mig.layout(gpu, layout)
        k = len(whole.nodes) if mig_nodes is None else int(mig_nodes)
        if not 0 <= k <= len(whole.nodes):
            raise ValueError(f"--mig-nodes must be between 0 and the cluster's {len(whole.nodes)} nodes, got {k}")
        counts: dict[str, int] = {}
        for p in profiles:
            counts[p.full_name] = counts.get(p.full_name, 0) + 1
        nodes: list[tuple[str, int]] = []
        for i, (g, n) in enumerate(whole.nodes):
            if i < k:
                nodes += [(name, c * n) for name, c in counts.items()]
            else:
                nodes.append((g, n))
        return cls(tuple(nodes))

    @classmethod
    def build(cls, gpu: str, n_gpus: int, gpus_per_node: int = 8, mig_layout: str | None = None,
              mig_nodes: int | None = None) -> "ClusterSpec":
        """``gpucast simulate``'s cluster: :meth:`homogeneous`, or :meth:`partitioned` when a MIG
        layout is given."""
        if mig_layout is None:
            if mig_nodes is not None:
                raise ValueError("--mig-nodes goes with --mig-layout")
            return cls.homogeneous(gpu, n_gpus, gpus_per_node)
        return cls.partitioned(gpu, n_gpus, mig_layout, mig_nodes, gpus_per_node)

    def weights(self) -> list[float]:
        """Each GPU's share of a whole GPU, in GPU-index order (a MIG slice: its compute slices
        over the GPU's; 1 otherwise)."""
        from gpucast import mig

        return [w for g, n in self.nodes for w in [mig.weight(g)] * n]

    @property
    def physical_gpus(self) -> float:
        """Whole GPUs the cluster holds (its slices summed by their shares)."""
        return math.fsum(self.weights())

    @property
    def max_job_gpus(self) -> int:
        """The most GPUs one job can get: the whole (uncarved) GPUs, at least 1 (a MIG slice runs
        one-GPU jobs only)."""
        return max(1, sum(n for g, n in self.nodes if ":" not in g))

    @property
    def n_gpus(self) -> int:
        return sum(n for _, n in self.nodes)

    @property
    def gpu_types(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for gpu, n in self.nodes:
            out[gpu] = out.get(gpu, 0) + n
        return out

    def gpus(self) -> list[tuple[int, int, str]]:
        """``(gpu index, node index, GPU type)`` for every GPU."""
        out = []
        for node, (gpu, n) in enumerate(self.nodes):
            out += [(len(out) + i, node, gpu) for i in range(n)]
        return out

    @property
    def reference_gpu(self) -> str:
        """The most numerous GPU type (first on ties), a MIG slice counted as its share of its whole
        GPU: ``duration_s`` in traces is solo run time here (a partitioned GPU's whole type, so a
        trace's durations mean the same on a carved cluster)."""
        from gpucast import mig

        types: dict[str, float] = {}
        for g, n in self.nodes:
            base = mig.parent_name(g)
            types[base] = types.get(base, 0) + n * mig.weight(g)
        return max(types, key=lambda g: (types[g], -list(types).index(g)))
