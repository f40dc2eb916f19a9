"""The simulated cluster: nodes of GPUs of catalog types.

A node holds GPUs of one type. GPUs are numbered 0..n-1 node by node; that order is the
first-fit order of the packing policies. The interconnects are not modelled here: a multi-GPU
job without a plan split across nodes runs as fast as one inside a node; a planned gang
(:mod:`gpucast.cluster.gangs`) carries its plan's inter-node communication in its predicted step.
"""

from __future__ import annotations

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
        """The most numerous GPU type (first on ties): ``duration_s`` in traces is solo run time here."""
        types = self.gpu_types
        return max(types, key=lambda g: (types[g], -list(types).index(g)))
