"""The simulated cluster: nodes of GPUs of catalog types.

A node holds GPUs of one type. GPUs are numbered 0..n-1 node by node; that order is the
first-fit order of the packing policies. The interconnects are not modelled here: a multi-GPU
job without a plan split across nodes runs as fast as one inside a node; a planned gang
(:mod:`gpucast.cluster.gangs`) carries its plan's inter-node communication in its predicted step.

A GPU type may be a MIG slice (``a100-80gb:3g.40gb``, :mod:`gpucast.mig`): :meth:`ClusterSpec.partitioned`
carves the GPUs of some nodes into a static layout, each slice a GPU of the simulated cluster
that takes one one-GPU job at a time (or shares it like any GPU: MPS and time-slicing work inside
a slice), never part of a multi-GPU job (slices have no peer access). A slice counts as its share
of the whole GPU in the cluster's utilization (:meth:`ClusterSpec.weights`). A carved node may
instead keep both its faces (``faces``, ``partitioned(..., dynamic=True)``): it starts carved (or
whole: ``start_whole``) and the simulator re-partitions it either way on demand
(:mod:`gpucast.cluster.repartition`).

Nodes may differ in how their GPUs are shared, as operators configure it per node (the NVIDIA
device plugin's per-node config label picks time-slicing or MPS replicas): ``modes`` names each
node's sharing mode (:data:`gpucast.cluster.timeshare.MODES`, or ``"mps:N"``: MPS as the device
plugin's ``sharing.mps.replicas: N`` runs it, at most N clients each limited to ``1 / N`` of the
SMs, alone too, :mod:`gpucast.cluster.timeshare.mps`; None: the run's mode, ``simulate(sharing=...)``);
:meth:`ClusterSpec.with_mode` sets it on some nodes of whole GPUs. The truth and the policies read
each GPU's mode; a GPU shared as MPS replicas takes one-GPU jobs only, as a MIG slice does (the
device plugin refuses more than one replica to a request). A node's mode is fixed for the run: switching it
(draining the node, restarting the MPS daemon) is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STARTS = ("carved", "whole")   # the face a node that may be re-partitioned starts with


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[tuple[str, int], ...]   # (catalog GPU name, GPUs on the node), in GPU-index order
    modes: tuple[str | None, ...] | None = None   # each node's sharing mode (None: the run's)
    # A node the policy may re-partition (partitioned(..., dynamic=True)): its two faces are node
    # entries, (group, 1) for each carved entry and (group, 0) for the whole one; None: a fixed node
    faces: tuple[tuple[int, int] | None, ...] | None = None
    start_whole: bool = False    # the nodes with two faces start with their whole GPUs open (else carved)

    def __post_init__(self):
        from gpucast.cluster.timeshare import mps
        from gpucast.cluster.timeshare import MODES
        from gpucast.hardware import get_gpu

        if not self.nodes:
            raise ValueError("a cluster needs at least one node")
        for gpu, n in self.nodes:
            get_gpu(gpu)  # raises on an unknown GPU name
            if int(n) < 1:
                raise ValueError(f"a node needs at least one GPU, got {n}")
        if self.faces is not None and len(self.faces) != len(self.nodes):
            raise ValueError(f"{len(self.nodes)} nodes but {len(self.faces)} faces")
        if self.start_whole and self.faces is None:
            raise ValueError("--mig-start goes with --mig-dynamic")
        if self.modes is not None:
            if len(self.modes) != len(self.nodes):
                raise ValueError(f"{len(self.nodes)} nodes but {len(self.modes)} sharing modes")
            for m in self.modes:
                if m is not None and m not in MODES and mps.replicas(m) is None:
                    raise ValueError(f"unknown sharing mode {m!r} ({', '.join(MODES)}, mps:N)")

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
                    gpus_per_node: int = 8, dynamic: bool = False, start: str = "carved") -> "ClusterSpec":
        """``n_gpus`` GPUs of type ``gpu`` on nodes of ``gpus_per_node``, the GPUs of the first
        ``mig_nodes`` nodes (None: all) each carved into the MIG ``layout`` (:func:`gpucast.mig.layout`,
        e.g. ``"3g.40gb,2g.20gb,2g.20gb"``): those nodes hold the slices, one node entry per profile.
        ``dynamic``: each carved node is followed by an entry of its whole GPUs, its other face
        (``faces``): it starts ``start`` ("carved" or "whole") and the policy may re-partition it
        either way (the engine drains and reconfigures it: :mod:`gpucast.cluster.repartition`)."""
        from gpucast import mig

        if start not in STARTS:
            raise ValueError(f"unknown --mig-start {start!r}; choose from {', '.join(STARTS)}")
        whole = cls.homogeneous(gpu, n_gpus, gpus_per_node)
        profiles = mig.layout(gpu, layout)
        k = len(whole.nodes) if mig_nodes is None else int(mig_nodes)
        if not 0 <= k <= len(whole.nodes):
            raise ValueError(f"--mig-nodes must be between 0 and the cluster's {len(whole.nodes)} nodes, got {k}")
        counts: dict[str, int] = {}
        for p in profiles:
            counts[p.full_name] = counts.get(p.full_name, 0) + 1
        nodes: list[tuple[str, int]] = []
        faces: list = []
        for i, (g, n) in enumerate(whole.nodes):
            if i < k:
                nodes += [(name, c * n) for name, c in counts.items()]
                faces += [(i, 1)] * len(counts)
                if dynamic:
                    nodes.append((g, n))
                    faces.append((i, 0))
            else:
                nodes.append((g, n))
                faces.append(None)
        return cls(tuple(nodes), faces=tuple(faces) if dynamic else None, start_whole=dynamic and start == "whole")

    def with_mode(self, mode: str, n_nodes: int) -> "ClusterSpec":
        """This cluster with the first ``n_nodes`` nodes of whole GPUs (not MIG slices) sharing
        their GPUs in ``mode`` (:data:`gpucast.cluster.timeshare.MODES` or ``"mps:N"``); the others
        keep theirs."""
        whole = [i for i, (g, _n) in enumerate(self.nodes) if ":" not in g]
        k = int(n_nodes)
        if not 0 <= k <= len(whole):
            raise ValueError(f"--mps-nodes must be between 0 and the cluster's {len(whole)} nodes of whole "
                             f"GPUs, got {k}")
        modes = list(self.modes) if self.modes is not None else [None] * len(self.nodes)
        for i in whole[:k]:
            modes[i] = mode
        return ClusterSpec(self.nodes, tuple(modes), self.faces, self.start_whole)

    @classmethod
    def build(cls, gpu: str, n_gpus: int, gpus_per_node: int = 8, mig_layout: str | None = None,
              mig_nodes: int | None = None, mps_nodes: int | None = None,
              mps_replicas: int | None = None, mig_dynamic: bool = False,
              mig_start: str = "carved") -> "ClusterSpec":
        """``gpucast simulate``'s cluster: :meth:`homogeneous`, or :meth:`partitioned` when a MIG
        layout is given; ``mps_nodes``: that many nodes of whole GPUs (after the carved ones) share
        their GPUs through MPS (:meth:`with_mode`), with ``mps_replicas`` clients at most each
        limited to that share of the SMs (None: no limit); ``mig_dynamic``: the carved nodes may be
        re-partitioned by the policy, starting ``mig_start`` (:meth:`partitioned`)."""
        if mig_layout is None:
            if mig_nodes is not None or mig_dynamic:
                raise ValueError(f"{'--mig-nodes' if mig_nodes is not None else '--mig-dynamic'} goes with --mig-layout")
        if mig_start not in STARTS:
            raise ValueError(f"unknown --mig-start {mig_start!r}; choose from {', '.join(STARTS)}")
        if mig_start != "carved" and not mig_dynamic:
            raise ValueError("--mig-start goes with --mig-dynamic")
        if mig_layout is None:
            spec = cls.homogeneous(gpu, n_gpus, gpus_per_node)
        else:
            spec = cls.partitioned(gpu, n_gpus, mig_layout, mig_nodes, gpus_per_node, mig_dynamic, mig_start)
        if mps_replicas is not None and mps_nodes is None:
            raise ValueError("--mps-replicas goes with --mps-nodes")
        if mps_nodes is None:
            return spec
        return spec.with_mode("mps" if mps_replicas is None else f"mps:{int(mps_replicas)}", mps_nodes)

    def gpu_modes(self) -> list[str | None]:
        """Each GPU's sharing mode, in GPU-index order (None: the run's)."""
        modes = self.modes if self.modes is not None else (None,) * len(self.nodes)
        return [m for (_g, n), m in zip(self.nodes, modes) for _ in range(n)]

    def weights(self) -> list[float]:
        """Each GPU's share of a whole GPU, in GPU-index order (a MIG slice: its compute slices
        over the GPU's; 1 otherwise)."""
        from gpucast import mig

        return [w for g, n in self.nodes for w in [mig.weight(g)] * n]

    @property
    def physical_gpus(self) -> float:
        """Whole GPUs the cluster holds (its slices summed by their shares; a node that may be
        re-partitioned counted once, by its whole face)."""
        from gpucast import mig

        faces = self.faces if self.faces is not None else (None,) * len(self.nodes)
        return math.fsum(n * mig.weight(g) for (g, n), f in zip(self.nodes, faces) if f is None or f[1] == 0)

    def gpu_faces(self) -> list[tuple[int, int] | None]:
        """Each GPU's (group, face) of a node that may be re-partitioned (``faces``), else None."""
        faces = self.faces if self.faces is not None else (None,) * len(self.nodes)
        return [f for (_g, n), f in zip(self.nodes, faces) for _ in range(n)]

    @property
    def max_job_gpus(self) -> int:
        """The most GPUs one job can get: the whole (uncarved) GPUs not shared as MPS replicas, at
        least 1 (a MIG slice and an ``"mps:N"`` GPU run one-GPU jobs only)."""
        from gpucast.cluster.timeshare import mps

        modes = self.modes if self.modes is not None else (None,) * len(self.nodes)
        return max(1, sum(n for (g, n), m in zip(self.nodes, modes) if ":" not in g and mps.replicas(m) is None))

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
