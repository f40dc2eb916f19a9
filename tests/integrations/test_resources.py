"""The one sizing rule: a prediction -> a share of a GPU (hand-checked arithmetic)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpucast.hardware import get_gpu
from gpucast.integrations.resources import GRANULARITY, gpu_share
from gpucast.prediction import Prediction


def _pred(util=30.0, mem_hi=8 * 2**30, gpu="a100-80gb", fits=True, gpus=1) -> Prediction:
    """A Prediction with chosen numbers (the translation reads only these fields)."""
    return Prediction(
        job={"model": "resnet50", "batch_size": 32, "gpus": gpus}, job_key="k", gpu=gpu, gpu_util_pct=util,
        gpu_util_interval=(util - 5, util + 5), memory_peak_bytes=int(mem_hi * 0.9),
        memory_interval=(int(mem_hi * 0.8), int(mem_hi)), step_time_s=0.1, step_time_interval=(0.08, 0.12),
        gpu_busy_s=0.03, host_time_s=0.05, flops=1, bytes=1, kernels=1, ops=1, parameters=1,
        memory_allocated_peak_bytes=1, fits_in_memory=fits, bottleneck="launch-bound", bottleneck_reason="",
        op_coverage=1.0, time_coverage=1.0, uncosted_ops={}, model_version="analytic-test", samples_per_s=1.0)


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
