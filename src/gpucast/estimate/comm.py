"""Collective communication time of multi-GPU training: NCCL-style rings and trees, in closed form.

What is modelled: the time of one collective (``all-reduce``, ``all-gather``, ``reduce-scatter``,
``send-recv``, ``all-to-all``) over a communicator (:class:`Group`) on the links of one GPU type and one network
(:class:`Links`), as a bandwidth term plus a per-step latency term, with the efficiencies and
latencies of :class:`CommConstants` (each cited where it is defined). ``S`` is ``nbytes``: for
all-reduce the buffer each rank holds, for all-gather / reduce-scatter the *full* gathered buffer,
for send-recv the bytes one rank sends to its peer, for all-to-all the buffer each rank scatters
(a ``1/n`` share of it to each rank, its own share staying put).

* ``n == 1`` or ``S <= 0``: 0 seconds. Otherwise every call pays NCCL's fixed cost once
  (``base_latency_s``) on top of the forms below.
* One node (``group.nodes == 1``), a ring over the ``r = n`` GPUs' intra-node links, each at
  ``b = intra_gbs * eff`` and ``l = intra_latency_s`` per step. ``eff`` is ``nvlink_efficiency`` on
  NVLink; on PCIe it falls with the ranks a collective spans, times the groups of the node
  communicating at once (``group.concurrent``: a pipeline's stages; :func:`pcie_share`): two GPUs talk
  peer to peer at ``pcie_efficiency``, while rings over more cross the CPUs' root complexes, whose
  bandwidth all their flows share (``pcie_host_share_4`` at 4 ranks, ``pcie_host_share_8`` at 8,
  log-linear between, a fixed total beyond 8):

  ==============================  =========================================
  all-reduce                      ``2(r-1)/r * S / b + 2(r-1) * l``
  all-gather, reduce-scatter      ``(r-1)/r * S / b + (r-1) * l``
  send-recv                       ``S / b + l``
  all-to-all                      ``(r-1)/r * S / b + l`` (NCCL's grouped peer sends, all at once)
  ==============================  =========================================

* Across ``k = group.nodes`` nodes, hierarchically (as NCCL's rings and trees behave with one NIC
  per GPU): the intra-node part is the formula above with ``r = ranks_per_node`` (the
  reduce-scatter / all-gather phases inside each node; for all-reduce both, i.e. the intra
  all-reduce formula), plus an inter-node part in which each node acts as one super-rank with
  bandwidth ``B = node_gbs * net_efficiency / concurrent`` (groups that share a node's NICs
  split them; a group using fewer than all GPUs of a node gets its share of the NICs through
  ``concurrent``, which the caller sets) and ``L = net_latency_s`` per step:

  ==============================  ==================================================================
  all-reduce                      ``min(ring max(intra, 2(k-1)/k * S / B) + 2((n-k) l + (k-1) L),``
                                  ``tree 2 * S / B + 2 * ceil(log2 k) * L)`` (NCCL's double binary
                                  tree; NCCL picks the faster)
  all-gather, reduce-scatter      ``max(intra, (k-1)/k * S / B) + (n-k) l + (k-1) L`` (ring only,
                                  as in NCCL)
  send-recv                       ``S / B_gpu + L`` with no intra part, ``B_gpu = node_gbs *
                                  net_efficiency / max(1, ranks_per_node * concurrent)``: every
                                  GPU of a pipeline stage sends at once
  all-to-all                      ``max((r-1)/n * S / b, (n-r)/n * S * r / B) + L``: each GPU's
                                  shares for other nodes leave through its node's NICs, shared by
                                  the group's ``r`` ranks there (the MoE dispatch and combine of
                                  expert parallelism; DeepEP's normal kernels reach about the
                                  network's rate, Zhao et al. 2025)
  ==============================  ==================================================================

:func:`busbw_gbs` gives the bus bandwidth (nccl-tests' convention: algorithm bandwidth times
``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather / reduce-scatter, 1 for send-recv) that
these formulas imply for large messages, for explanations.

The ring's latency is NCCL's flat ring's (``tuning.cc``: ``(nsteps - nInterSteps) * intraLat +
nInterSteps * interLat``): a ring over ``n`` ranks on ``k`` nodes takes ``n - 1`` steps a pass, ``k - 1``
of them across nodes, so a small-message collective over 128 GPUs pays ~127 steps, not the 15 of
a node-level ring; its bandwidth stays the hierarchical form above.

What is not modelled: NCCL's protocol choice (LL / LL128 / Simple: one latency per step and one
base latency, the LL figures' order); the imperfect overlap of the intra- and inter-node phases
(taken as perfect: the maximum of the two) and the flat ring's inter-node traffic, ``2(n-1)/n * S``
rather than ``2(k-1)/k * S``; NVLS / SHARP in-network reductions and CollNet; message-size dependent
efficiency (small messages reach a lower share of the link than the large-message efficiency);
a PCIe host's exact topology (switches, sockets: one published host's figures stand for every
PCIe box); NVLink bridges that join only pairs of GPUs (``rtx-3090``: NVLink is assumed
between all ranks of a node); differences between network transports (TCP sockets on plain
Ethernet, EFA's SRD, RoCE congestion) beyond the single ``net_efficiency``; congestion from
other jobs; and the overlap of communication with computation, which is the caller's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucast.estimate.constants import NamedConstants, _c

if TYPE_CHECKING:  # the type only; nothing of plan runs here
    from gpucast.hardware import GpuSpec
    from gpucast.plan import Network

__all__ = ["COLLECTIVES", "CommConstants", "DEFAULT_COMM", "Group", "Links", "busbw_gbs", "call_latency",
           "collective_time", "pcie_share"]

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "send-recv", "all-to-all")
INTRA_KINDS = ("nvlink", "pcie")


@dataclass(frozen=True)
class CommConstants(NamedConstants):
    """Link efficiencies and per-step latencies of NCCL collectives (module docstring)."""

    _KIND = "comm"

    nvlink_efficiency: float = _c(
        0.77, "fraction of per-direction NVLink peak",
        "Achieved NCCL all-reduce bus bandwidth over NVLink / the link's per-direction peak. "
        "NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc, v2.8) caps the bus bandwidth of an "
        "all-A100 communicator at 235 GB/s of NVLink3's 300 GB/s per direction (0.78); nccl-tests "
        "all_reduce_perf on a DGX A100 reports ~230 GB/s bus bandwidth for large messages.")
    pcie_efficiency: float = _c(
        0.80, "fraction of per-direction PCIe peak",
        "Order of magnitude: nccl-tests rings through a PCIe switch reach ~75-85% of the x16 "
        "link's per-direction rate for large messages (e.g. ~12-13 GB/s of 15.75 on Gen3): two GPUs "
        "peer to peer. Rings over more go through the CPUs' root complexes: pcie_host_share_4 / _8.")
    pcie_host_share_4: float = _c(
        0.56, "fraction of per-direction PCIe peak, 4 ranks",
        "A ring over more than two PCIe GPUs runs through the CPUs' root complexes (and across sockets): "
        "nccl-tests all_reduce_perf on 8 RTX 5090 (PCIe 5.0 x16, 63 GB/s a direction) in a dual Xeon "
        "8480+ host reached 35 GB/s bus bandwidth over 4 GPUs and 28 over 8 (NVIDIA/nccl issue #1639, "
        "2025; an NCCL maintainer there: on PCI systems the bandwidth the CPU and memory deliver sets "
        "it, 8 flows at 28 GB/s both ways): 35 / 63.")
    pcie_host_share_8: float = _c(
        0.44, "fraction of per-direction PCIe peak, 8 ranks",
        "As pcie_host_share_4: 28 / 63 over 8 GPUs (NVIDIA/nccl issue #1639). Beyond 8 ranks the host's "
        "total is taken as fixed, shared by more flows.")
    net_efficiency: float = _c(
        0.89, "fraction of the network's line rate",
        "Fitted on llm-foundry A100-40GB (78 rows, benchmarks/llm_foundry.py: FSDP over 1,600 "
        "Gbit/s RoCE, 32 rows on 2-16 nodes; jointly with gather_overlap and the Environment's "
        "kernel_time_factor, Huber loss on log tokens/s): weakly constrained, as most of that "
        "traffic hides behind compute (benchmarks/results/llm_foundry.md). Prior 0.9 +- 0.1: "
        "nccl-tests multi-node all_reduce_perf on RDMA fabrics reports bus bandwidth of ~90% of "
        "line rate (~180-190 GB/s per DGX A100 node with 8x HDR 200 Gbit/s = 200 GB/s). One "
        "factor for every network kind, so that it can be fitted.")
    intra_latency_s: float = _c(
        2e-6, "s per ring step",
        "Order of magnitude of NCCL's per-step hardware latency inside a node "
        "(NVIDIA/nccl src/graph/tuning.cc, hwLat, ring: NVLink 0.47 / 1.9 / 3.4 us and PCI "
        "1.0 / 2.5 / 5.7 us for the LL / LL128 / Simple protocols).")
    net_latency_s: float = _c(
        6e-6, "s per ring or tree step",
        "Order of magnitude of NCCL's per-step hardware latency across nodes "
        "(NVIDIA/nccl src/graph/tuning.cc, hwLat, NET: ring 2.7 / 4.0 / 9.6 us, tree 5.0 / 8.5 us "
        "for LL / LL128 / Simple).")
    base_latency_s: float = _c(
        6.6e-6, "s per call",
        "NCCL's fixed cost of one collective call, whatever its size and ranks (NVIDIA/nccl "
        "src/graph/tuning.cc, baseLat: ring 6.6 / 14.0 / 8.4 us, tree 6.8 / 14.0 us for LL / LL128 / "
        "Simple): the ring's LL figure, the protocol NCCL picks for the small messages where this "
        "cost matters.")

    def __post_init__(self) -> None:
        for name in ("nvlink_efficiency", "pcie_efficiency", "pcie_host_share_4", "pcie_host_share_8",
                     "net_efficiency"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1):
                raise ValueError(f"comm constant {name!r} must be in (0, 1], got {v!r}")
        for name in ("intra_latency_s", "net_latency_s", "base_latency_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and math.isfinite(v)):
                raise ValueError(f"comm constant {name!r} must be a finite number >= 0, got {v!r}")



DEFAULT_COMM = CommConstants()


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


@dataclass(frozen=True)
class Group:
    """A communicator: n ranks, ranks_per_node of them on each node it spans (nodes = ceil(n / ranks_per_node)),
    and how many such groups share each node's network at once (concurrent, >= 1; inside a PCIe node, its
    host's bandwidth too: :func:`pcie_share` of the ranks of all of them)."""

    n: int
    ranks_per_node: int
    concurrent: int = 1

    def __post_init__(self) -> None:
        for name in ("n", "ranks_per_node", "concurrent"):
            v = getattr(self, name)
            if not _positive_int(v):
                raise ValueError(f"Group.{name} must be an integer >= 1, got {v!r}")

    @property
    def nodes(self) -> int:
        return -(-self.n // self.ranks_per_node)

    @property
    def local(self) -> int:
        """Ranks of the group on one node: ``ranks_per_node``, or ``n`` when it fits on one."""
        return min(self.n, self.ranks_per_node)


@dataclass(frozen=True)
class Links:
    """The links a collective runs over: per GPU inside a node, per node across nodes."""

    intra_gbs: float      # per-GPU one-direction bandwidth inside a node (NVLink: nvlink_gbs/2; else PCIe host_link_gbs)
    intra_kind: str       # "nvlink" | "pcie"
    node_gbs: float       # network GB/s per node, one direction
    net_kind: str         # ib | roce | eth | efa

    def __post_init__(self) -> None:
        if self.intra_kind not in INTRA_KINDS:
            raise ValueError(f"Links.intra_kind must be one of {', '.join(INTRA_KINDS)}, got {self.intra_kind!r}")
        for name in ("intra_gbs", "node_gbs"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)):
                raise ValueError(f"Links.{name} must be a finite number > 0 (GB/s), got {v!r}")

    @classmethod
    def of(cls, gpu: "GpuSpec", network: "Network") -> "Links":
        """NVLink where the GPU has it (NVIDIA quotes both directions, so half of ``nvlink_gbs``),
        else its PCIe host link per direction; the network's GB/s per node, one direction."""
        if gpu.nvlink_gbs and gpu.nvlink_gbs > 0:
            intra, kind = gpu.nvlink_gbs / 2.0, "nvlink"
        else:
            intra, kind = gpu.host_link_gbs, "pcie"
        return cls(intra_gbs=float(intra), intra_kind=kind, node_gbs=float(network.node_gbs), net_kind=network.kind)


def _check_kind(kind: str) -> None:
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}; expected one of {', '.join(COLLECTIVES)}")


def _ring(kind: str, nbytes: float, ranks: int, bw: float, lat: float) -> float:
    """Ring over ``ranks`` members at ``bw`` bytes/s and ``lat`` s per step (send-recv: one hop)."""
    if kind == "send-recv":
        return nbytes / bw + lat
    if ranks <= 1:
        return 0.0
    passes = 2 if kind == "all-reduce" else 1
    return passes * ((ranks - 1) / ranks * nbytes / bw + (ranks - 1) * lat)


def _tree(nbytes: float, k: int, bw: float, lat: float) -> float:
    """NCCL's double binary tree all-reduce over ``k`` nodes: reduce up and broadcast down."""
    return 2 * nbytes / bw + 2 * math.ceil(math.log2(k)) * lat


def _flat_ring_latency(kind: str, group: Group, c: CommConstants) -> float:
    """NCCL's flat ring over all ``n`` ranks on ``k`` nodes: ``n - 1`` steps a pass, ``k - 1`` of them between nodes."""
    passes = 2 if kind == "all-reduce" else 1
    k = group.nodes
    return passes * ((group.n - k) * c.intra_latency_s + (k - 1) * c.net_latency_s)


def pcie_share(ranks: int, c: CommConstants | None = None) -> float:
    """The share of a PCIe link's per-direction peak a collective over ``ranks`` GPUs of one host gets
    (module docstring): ``pcie_efficiency`` for two, the host's shares at 4 and 8 (log-linear between
    2, 4 and 8), ``8 / ranks`` of the 8-rank share beyond."""
    c = c or DEFAULT_COMM
    if ranks <= 2:
        return c.pcie_efficiency
    if ranks >= 8:
        return c.pcie_host_share_8 * 8 / ranks
    lo, hi, a, b = (2, 4, c.pcie_efficiency, c.pcie_host_share_4) if ranks <= 4 else \
        (4, 8, c.pcie_host_share_4, c.pcie_host_share_8)
    w = math.log2(ranks / lo) / math.log2(hi / lo)
    return a + (b - a) * w


def _intra_bw(links: Links, c: CommConstants, ranks: int = 2) -> float:
    """Per-GPU bytes/s of a ring or all-to-all over ``ranks`` GPUs of one node."""
    eff = c.nvlink_efficiency if links.intra_kind == "nvlink" else pcie_share(ranks, c)
    return links.intra_gbs * 1e9 * eff


def _all_to_all(nbytes: float, group: Group, links: Links, c: CommConstants) -> float:
    """An all-to-all's time less NCCL's base latency (module docstring)."""
    n, r = group.n, group.local
    b = _intra_bw(links, c, r * group.concurrent)
    if group.nodes == 1:
        return (n - 1) / n * nbytes / b + c.intra_latency_s
    big = links.node_gbs * 1e9 * c.net_efficiency / group.concurrent
    return max((r - 1) / n * nbytes / b, (n - r) / n * nbytes * r / big) + c.net_latency_s


def collective_time(kind: str, nbytes: float, group: Group, links: Links, consts: CommConstants | None = None) -> float:
    """Seconds for one collective of `nbytes` (for all-reduce: the buffer each rank holds; for all-gather /
    reduce-scatter: the FULL gathered buffer size; for send-recv: bytes sent by one rank to its peer; for
    all-to-all: the buffer each rank scatters)."""
    _check_kind(kind)
    c = consts or DEFAULT_COMM
    if group.n == 1 or nbytes <= 0:
        return 0.0
    if kind == "all-to-all":
        return c.base_latency_s + _all_to_all(nbytes, group, links, c)
    b = _intra_bw(links, c, 2 if kind == "send-recv" else group.local * group.concurrent)   # a send is one pair's
    if group.nodes == 1:
        return c.base_latency_s + _ring(kind, nbytes, group.n, b, c.intra_latency_s)
    k = group.nodes
    if kind == "send-recv":
        per_gpu = links.node_gbs * 1e9 * c.net_efficiency / max(1, group.ranks_per_node * group.concurrent)
        return c.base_latency_s + nbytes / per_gpu + c.net_latency_s
    # Bandwidth: each phase at its own links, pipelined in chunks (the slower one sets the pace).
    # Latency: NCCL's ring spans all n ranks, n - 1 steps a pass, k - 1 of them between nodes.
    big = links.node_gbs * 1e9 * c.net_efficiency / group.concurrent
    intra = _ring(kind, nbytes, group.local, b, 0.0)
    inter = _ring(kind, nbytes, k, big, 0.0)
    ring = max(intra, inter) + _flat_ring_latency(kind, group, c)
    if kind == "all-reduce":
        ring = min(ring, _tree(nbytes, k, big, c.net_latency_s))
    return c.base_latency_s + ring


def call_latency(kind: str, group: Group, links: Links, consts: CommConstants | None = None) -> float:
    """The fixed part of one call, whatever its size: NCCL's base latency plus its ring's (or, for an
    all-reduce across nodes, the tree's, whichever is shorter) per-step latencies (the forms of
    :func:`collective_time` without their bandwidth terms); 0 for a group of one rank."""
    _check_kind(kind)
    c = consts or DEFAULT_COMM
    if group.n == 1:
        return 0.0
    if kind in ("send-recv", "all-to-all"):
        lat = c.intra_latency_s if group.nodes == 1 else c.net_latency_s
    elif group.nodes == 1:
        lat = _ring(kind, 0.0, group.n, 1.0, c.intra_latency_s)
    else:
        lat = _flat_ring_latency(kind, group, c)
        if kind == "all-reduce":
            lat = min(lat, _tree(0.0, group.nodes, 1.0, c.net_latency_s))
    return c.base_latency_s + lat


def busbw_gbs(group: Group, links: Links, consts: CommConstants | None = None, kind: str = "all-reduce") -> float:
    """The bus bandwidth (GB/s, nccl-tests' convention) the formulas imply for large messages: latencies
    dropped, ``busbw = S / time * factor`` with factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for
    all-gather / reduce-scatter and 1 for send-recv. ``inf`` for a group of one rank (nothing moves)."""
    _check_kind(kind)
    c = (consts or DEFAULT_COMM).replace(intra_latency_s=0.0, net_latency_s=0.0, base_latency_s=0.0)
    n = group.n
    if n == 1:
        return math.inf
    size = 1e9  # any size: without latencies the time is linear in it
    t = collective_time(kind, size, group, links, c)
    factor = {"all-reduce": 2 * (n - 1) / n, "send-recv": 1.0}.get(kind, (n - 1) / n)
    return size / t * factor / 1e9
