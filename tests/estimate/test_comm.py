"""Collective time (gpucast.estimate.comm): closed forms and the directions the physics demands.

Each expectation has a reason independent of the code:
* one rank, or nothing to send, moves no bytes;
* a ring all-reduce inside a node moves 2(n-1)/n of the buffer over each GPU's link (the
  textbook ring, Patarasuk & Yuan 2009), a reduce-scatter half of that;
* more nodes mean more ring steps and more bytes over the network, never fewer;
* 100 Gbit/s Ethernet per node is ~20x slower than NVLink per GPU, so splitting a group over it
  must cost time;
* for small messages latency dominates, and a tree's log2(k) steps beat a ring's 2(k-1);
* two groups sharing a node's NICs each get half of them;
* a ring over more than two PCIe GPUs runs through the host's root complexes, whose bandwidth its
  flows share: nccl-tests on 8 RTX 5090s (PCIe 5.0 x16) read 35 GB/s bus bandwidth over 4 GPUs and 28
  over 8 (NVIDIA/nccl issue #1639), where two GPUs reach ~80 % of the link peer to peer.
"""

import math

import pytest

from gpucast.estimate.comm import (COLLECTIVES, DEFAULT_COMM, CommConstants, Group, Links, busbw_gbs,
                                   collective_time, pcie_share)
from gpucast.hardware import get_gpu
from gpucast.plan import parse_network

A100 = get_gpu("a100-40gb")
NO_LATENCY = DEFAULT_COMM.replace(intra_latency_s=0.0, net_latency_s=0.0, base_latency_s=0.0)
GB = 1e9


def _links(network: str, gpu=A100) -> Links:
    return Links.of(gpu, parse_network(network, 8))


def test_one_rank_or_no_bytes_is_free():
    links = _links("ib-200/gpu")
    for kind in COLLECTIVES:
        assert collective_time(kind, GB, Group(1, 8), links) == 0.0
        assert collective_time(kind, 0, Group(16, 8), links) == 0.0


def test_links_of_a_gpu_and_network():
    links = _links("ib-200/gpu")
    assert (links.intra_kind, links.intra_gbs) == ("nvlink", 300.0)  # NVLink3: 600 GB/s both directions
    assert (links.net_kind, links.node_gbs) == ("ib", 200.0)         # 8 x 200 Gbit/s = 200 GB/s
    pcie = _links("eth-100", get_gpu("l4"))
    assert (pcie.intra_kind, pcie.intra_gbs, pcie.node_gbs) == ("pcie", 31.5, 12.5)


def test_intra_node_all_reduce_matches_ring_closed_form():
    eff = DEFAULT_COMM.nvlink_efficiency
    expected = 2 * 7 / 8 * GB / (300e9 * eff)
    got = collective_time("all-reduce", GB, Group(8, 8), _links("ib-200/gpu"))
    assert got == pytest.approx(expected, rel=0.01)


def test_all_reduce_is_twice_reduce_scatter_for_large_messages():
    links = _links("ib-200/gpu")
    for group in (Group(8, 8), Group(32, 8)):
        ar = collective_time("all-reduce", 4 * GB, group, links)
        rs = collective_time("reduce-scatter", 4 * GB, group, links)
        assert ar / rs == pytest.approx(2.0, rel=0.02)


def test_time_grows_with_ranks_across_nodes():
    links = _links("ib-200/gpu")
    times = [collective_time("all-reduce", GB, Group(n, 8), links) for n in (8, 16, 32, 64, 128, 256, 512)]
    assert all(a <= b for a, b in zip(times, times[1:])), times
    slow = [collective_time("all-reduce", GB, Group(n, 8), _links("eth-100")) for n in (8, 16, 64, 512)]
    assert all(a < b for a, b in zip(slow, slow[1:])), slow  # where the network is the slower phase


def test_splitting_a_group_over_a_slow_network_is_slower():
    links = _links("eth-100")
    one_node = collective_time("all-reduce", 256e6, Group(8, 8), links)
    two_nodes = collective_time("all-reduce", 256e6, Group(8, 4), links)
    assert two_nodes > 5 * one_node


def test_tree_beats_ring_at_64_nodes_for_a_small_message():
    links, c, k, size = _links("ib-200/gpu"), DEFAULT_COMM, 64, 64e3
    big = 200e9 * c.net_efficiency
    ring = 2 * (k - 1) / k * size / big + 2 * (k - 1) * c.net_latency_s
    tree = 2 * size / big + 2 * math.log2(k) * c.net_latency_s
    got = collective_time("all-reduce", size, Group(k, 1), links)
    assert got < ring / 5
    assert got == pytest.approx(c.base_latency_s + tree, rel=1e-6)  # and the call's fixed cost


def test_a_small_collective_pays_the_calls_base_and_every_ring_step():
    # NCCL's tuning model (src/graph/tuning.cc): latency = baseLat + (nsteps - nInterSteps) * intraLat
    # + nInterSteps * interLat, its ring spanning every rank: an all-gather over 128 GPUs on 16 nodes
    # takes 127 steps, 15 of them between nodes; one byte moves in no time.
    c, links = DEFAULT_COMM, _links("ib-200/gpu")
    got = collective_time("all-gather", 1, Group(128, 8), links)
    assert got == pytest.approx(c.base_latency_s + 112 * c.intra_latency_s + 15 * c.net_latency_s, rel=1e-3)
    two = collective_time("all-reduce", 1, Group(2, 8), links)
    assert two == pytest.approx(c.base_latency_s + 2 * c.intra_latency_s, rel=1e-3)
    # so 12 small calls cost 12 base latencies, one call of the same bytes only one
    assert 12 * collective_time("all-gather", 1e3, Group(8, 8), links) > \
        collective_time("all-gather", 12e3, Group(8, 8), links) + 11 * c.base_latency_s * 0.99


def test_concurrent_groups_halve_the_network_bandwidth():
    links, size = _links("ib-200/gpu"), GB
    # The network is the slower phase here (NVLink inside the node), so it sets the time.
    intra = collective_time("all-gather", size, Group(8, 8), links, NO_LATENCY)
    alone = collective_time("all-gather", size, Group(32, 8), links, NO_LATENCY)
    shared = collective_time("all-gather", size, Group(32, 8, concurrent=2), links, NO_LATENCY)
    assert alone > intra
    assert shared == pytest.approx(2 * alone, rel=1e-9)


def test_send_recv_across_nodes_shares_the_nics_between_the_senders():
    # 8 stages' GPUs per node send at once over 8 x 200 Gbit/s: each gets one NIC, 25 GB/s.
    got = collective_time("send-recv", GB, Group(2, 1, concurrent=8), _links("ib-200/gpu"), NO_LATENCY)
    assert got == pytest.approx(GB / (25e9 * DEFAULT_COMM.net_efficiency), rel=1e-9)


def test_busbw_of_an_nvlink_node_is_the_efficient_link():
    assert busbw_gbs(Group(8, 8), _links("ib-200/gpu")) == pytest.approx(300 * DEFAULT_COMM.nvlink_efficiency)
    assert busbw_gbs(Group(1, 8), _links("ib-200/gpu")) == math.inf


def test_invalid_inputs_raise_one_line():
    links = _links("ib-200/gpu")
    bad = [lambda: collective_time("broadcast", GB, Group(8, 8), links),
           lambda: busbw_gbs(Group(8, 8), links, kind="broadcast"),
           lambda: Group(0, 8),
           lambda: DEFAULT_COMM.replace(nvlink_eff=0.5),
           lambda: CommConstants(net_efficiency=1.5)]
    for call in bad:
        with pytest.raises(ValueError) as err:
            call()
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="all-reduce, all-gather, reduce-scatter, send-recv, all-to-all"):
        collective_time("broadcast", GB, Group(8, 8), links)


def test_all_to_all_moves_each_ranks_foreign_shares_once():
    # Inside a node each rank sends the (n-1)/n of its buffer that belongs to others over its own link,
    # all peers at once: an all-gather's bandwidth term with one step of latency.
    c = DEFAULT_COMM
    links = _links("ib-400/gpu")
    b = links.intra_gbs * 1e9 * c.nvlink_efficiency
    assert collective_time("all-to-all", GB, Group(8, 8), links) == pytest.approx(
        c.base_latency_s + 7 / 8 * GB / b + c.intra_latency_s)
    # Two nodes of 8: half of every rank's buffer leaves its node, 8 x GB/2 through the node's
    # 8 x 400 Gbit/s of NICs, far slower than the NVLink half.
    net = 8 * 400 / 8 * 1e9 * c.net_efficiency
    assert collective_time("all-to-all", GB, Group(16, 8), links) == pytest.approx(
        c.base_latency_s + 8 * GB / 2 / net + c.net_latency_s)
    assert busbw_gbs(Group(8, 8), links, kind="all-to-all") == pytest.approx(links.intra_gbs * c.nvlink_efficiency)


def test_call_latency_is_the_small_message_limit():
    # One byte moves in no time: a call's fixed part is what a one-byte collective costs.
    from gpucast.estimate.comm import call_latency

    links = _links("ib-200/gpu")
    for kind in COLLECTIVES:
        for group in (Group(2, 8), Group(8, 8), Group(128, 8), Group(64, 1)):
            assert call_latency(kind, group, links) == pytest.approx(collective_time(kind, 1, group, links),
                                                                     rel=1e-3), (kind, group)
    assert call_latency("all-gather", Group(1, 8), links) == 0.0


def test_pcie_rings_over_more_gpus_share_the_hosts_bandwidth():
    links = Links.of(get_gpu("rtx-5090"), parse_network("eth-100", 8))
    assert links.intra_kind == "pcie"
    bus = {n: busbw_gbs(Group(n, 8), links) for n in (2, 3, 4, 6, 8)}
    # the published 8 x RTX 5090 figures (module docstring), within the 2 % of the link's rounding
    assert bus[4] == pytest.approx(35, rel=0.02) and bus[8] == pytest.approx(28, rel=0.02)
    assert bus[2] > bus[3] > bus[4] > bus[6] > bus[8]
    # peer to peer (a pipeline's send) keeps the pair's rate whatever the group
    assert busbw_gbs(Group(8, 8), links, kind="send-recv") == pytest.approx(bus[2])
    # NVLink does not go through the host: its share does not fall with the ranks
    nv = _links("ib-200/gpu")
    assert busbw_gbs(Group(8, 8), nv) == pytest.approx(busbw_gbs(Group(2, 8), nv))
    # past 8 GPUs the host's total is fixed: per-GPU bandwidth falls as 1 / ranks
    assert pcie_share(16) == pytest.approx(pcie_share(8) / 2)
    # groups of one host communicating at once (a pipeline's stages) share it as one group of all their ranks
    assert busbw_gbs(Group(2, 8, concurrent=2), links) == pytest.approx(bus[4])
    assert busbw_gbs(Group(4, 8, concurrent=2), links) == pytest.approx(bus[8])
    assert busbw_gbs(Group(4, 8, concurrent=2), nv) == pytest.approx(busbw_gbs(Group(4, 8), nv))


def test_a_training_plans_tensor_groups_on_one_node_communicate_at_once():
    # Megatron's rank order puts a node's data-parallel replicas' tensor groups side by side: they all-reduce
    # at the same time, so on a PCIe node they share its host (pcie_share of all their ranks)
    from gpucast.estimate.parallel.collectives import placement
    from gpucast.plan import Parallel

    gpu = get_gpu("rtx-5090")
    place = placement(Parallel(tensor=2, gpus_per_node=8).resolved(gpu), 8, hybrid=False)
    assert (place.tp.n, place.tp.local, place.tp.concurrent) == (2, 2, 4)
    links = Links.of(gpu, parse_network("eth-100", 8))
    assert busbw_gbs(place.tp, links) == pytest.approx(busbw_gbs(Group(8, 8), links))
    # a tensor group spanning nodes keeps its own NICs' share as before
    assert placement(Parallel(tensor=16, gpus_per_node=8).resolved(gpu), 16, hybrid=False).tp.concurrent == 1
