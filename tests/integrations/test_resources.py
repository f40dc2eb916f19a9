"""The one sizing rule: a prediction -> a share of a GPU (hand-checked arithmetic)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpucast.hardware import get_gpu
from gpucast.integrations.resources import GRANULARITY, gpu_share
from gpucast.prediction import Prediction
from made_predictions import made_prediction


def _pred(util=30.0, mem_hi=8 * 2**30, **kw) -> Prediction:
    return made_prediction(util, mem_hi, **kw)


def test_compute_bound_share():
    s = gpu_share(_pred(util=30.0, mem_hi=2**30))
    assert s.compute_fraction == pytest.approx(0.40)  # 30 % + 10 points of margin
    assert s.share == pytest.approx(0.40) and not s.exclusive
    assert s.memory_bytes == math.ceil(2**30 * 1.1)  # the interval's upper end + 10 % headroom


def test_memory_bound_share_rounds_up():
    gpu = get_gpu("a100-80gb")
    mem = int(0.52 * gpu.memory_bytes / 1.1)  # 52 % of the card after headroom
    s = gpu_share(_pred(util=5.0, mem_hi=mem))
    assert s.memory_fraction == pytest.approx(0.52, abs=1e-6)
    assert s.share == pytest.approx(0.55)  # rounded up to the 0.05 grid
    assert s.share >= s.memory_fraction and s.share >= s.compute_fraction


def test_exclusive_when_busy_or_too_big():
    assert gpu_share(_pred(util=95.0)).exclusive
    too_big = gpu_share(_pred(util=10.0, mem_hi=100 * 2**30, fits=False))
    assert too_big.exclusive and too_big.share == 1.0


def test_minimum_share_and_data_parallel():
    s = gpu_share(_pred(util=0.0, mem_hi=1024, gpus=4))
    assert s.share == pytest.approx(max(GRANULARITY, 0.10))
    assert s.gpus == 4


def test_margin_is_a_parameter():
    p = _pred(util=30.0, mem_hi=2**30)
    assert gpu_share(p, util_margin_pct=0).share == pytest.approx(0.30)
    with pytest.raises(ValueError):
        gpu_share(p, granularity=0)
    assert dataclasses.asdict(gpu_share(p)) == gpu_share(p).to_dict()


def test_the_compute_share_is_sized_from_the_held_time_not_nvmls_reading():
    # NVML reads 60 % (short gaps counted busy), the kernels hold the GPU 25 %: 25 + 10 points
    p = dataclasses.replace(_pred(util=60.0, mem_hi=2**30), gpu_held_pct=25.0)
    s = gpu_share(p)
    assert s.compute_fraction == pytest.approx(0.35) and s.share == pytest.approx(0.35)
    assert s.util_pct == 60.0 and s.held_pct == 25.0
    # a prediction without a held share (older callers): NVML's reading, as before
    assert gpu_share(_pred(util=60.0, mem_hi=2**30)).compute_fraction == pytest.approx(0.70)


def test_a_plan_across_nodes_asks_for_whole_nodes():
    s = gpu_share(_pred(util=20.0, mem_hi=2**30, gpus=16, nodes=2))
    assert s.exclusive and s.share == 1.0 and s.whole_nodes
    assert (s.nodes, s.gpus_per_node, s.gpus) == (2, 8, 16) and s.node_gpus() == [8, 8]
    uneven = gpu_share(_pred(util=20.0, gpus=12, nodes=2))          # 12 GPUs on 8-GPU nodes: 8 + 4
    assert uneven.node_gpus() == [8, 4] and uneven.whole_nodes
    four = gpu_share(_pred(util=20.0, gpus=16, nodes=4, gpus_per_node=4))
    assert four.node_gpus() == [4, 4, 4, 4]
    assert s.to_dict()["nodes"] == 2 and s.to_dict()["whole_nodes"] is True


def s_planned(**kw) -> bool:
    return gpu_share(_pred(util=20.0, mem_hi=2**30, **kw)).planned


def test_a_plan_inside_one_node_is_exclusive_on_its_gpus():
    # a planned gang never shares, though 20 % + margin would make a 0.30 share per GPU
    inside = gpu_share(_pred(util=20.0, mem_hi=2**30, gpus=8, nodes=1))
    assert inside.exclusive and not inside.whole_nodes and inside.nodes == 1 and inside.node_gpus() == [8]
    assert inside.planned and s_planned(gpus=16, nodes=2) and not s_planned(gpus=8)
    ddp = gpu_share(_pred(util=20.0, mem_hi=2**30, gpus=8))               # no plan: the per-GPU share, as before
    assert not ddp.exclusive and ddp.share == pytest.approx(0.30) and ddp.node_gpus() == [8]
    single = gpu_share(_pred(util=20.0, mem_hi=2**30, gpus=1, nodes=1))   # a plan on one GPU: no gang
    assert not single.exclusive and single.share == pytest.approx(0.30)
