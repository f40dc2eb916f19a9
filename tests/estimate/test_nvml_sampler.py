"""NVML's sampler rule (gpucast.estimate.nvml) on timelines that can be checked by hand, and the
two numbers of a real prediction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import gpucast
from gpucast import Job
from gpucast.estimate.environment import Environment
from gpucast.estimate.nvml import combined_reported, held_share, hidden_idle_s, idle_visible, reported_share

MS = 1e-3


def test_one_long_kernel_per_period_reads_its_busy_share():
    # a 10 ms step: one 6 ms kernel, then 4 ms idle; a 1 ms tick hides 1 ms of the 4 ms gap
    assert held_share(10 * MS, 6 * MS) == pytest.approx(0.6)
    assert reported_share(10 * MS, 6 * MS, [4 * MS], 1 * MS) == pytest.approx(0.7)
    # a tick far shorter than the gap: NVML reads the held share
    assert reported_share(10 * MS, 6 * MS, [4 * MS], 1e-9) == pytest.approx(0.6)


def test_many_short_gaps_read_busy_though_the_kernels_hold_little():
    # 100 kernels of 20 us with 80 us gaps: the kernels hold 20 % of the 10 ms step; with a 100 us
    # tick every gap is shorter than a tick, so NVML reads 100 %
    gaps = [80e-6] * 100
    assert held_share(10 * MS, 2 * MS) == pytest.approx(0.2)
    assert reported_share(10 * MS, 2 * MS, gaps, 100e-6) == pytest.approx(1.0)
    # a 40 us tick: each gap hides 40 of its 80 us: 2 ms + 100 x 40 us = 6 ms of 10 ms
    assert hidden_idle_s(gaps, 40e-6) == pytest.approx(4 * MS)
    assert reported_share(10 * MS, 2 * MS, gaps, 40e-6) == pytest.approx(0.6)


@settings(max_examples=200, deadline=None)
@given(step=st.floats(1e-4, 10.0), busy_frac=st.floats(0.0, 1.0), tick=st.floats(0.0, 1e-2),
       gaps=st.lists(st.floats(0.0, 1.0), max_size=20))
def test_held_never_exceeds_what_nvml_reports(step, busy_frac, tick, gaps):
    busy = busy_frac * step
    idle = step - busy
    total = sum(gaps)
    lengths = [g / total * idle for g in gaps] if total > 0 else []
    h, r = held_share(step, busy), reported_share(step, busy, lengths, tick)
    assert 0.0 <= h <= r + 1e-12 <= 1.0 + 1e-12


def test_a_shared_gpu_reads_its_held_time_plus_the_common_idle_time_the_tick_misses():
    # every idle moment resolved: NVML reads the kernels' time
    assert combined_reported([0.3, 0.3], [1.0, 1.0]) == pytest.approx(0.6)
    # each job's idle time half hidden: a common idle moment reads idle with chance 1/4
    assert combined_reported([0.2, 0.2], [0.5, 0.5]) == pytest.approx(0.4 + 0.6 * (1 - 0.5 * 0.5))
    assert combined_reported([0.6, 0.6], [0.0, 1.0]) == 1.0
    # a 10 ms step in which the job wants the GPU 40 %: 6 ms idle, 1.5 ms of it hidden
    assert idle_visible(10 * MS, 0.4, 1.5 * MS) == pytest.approx(0.75)
    assert idle_visible(10 * MS, 1.0, 1.5 * MS) == 1.0


def test_a_prediction_carries_both_numbers_and_the_tick_moves_only_nvmls():
    job = Job("resnet18-cifar", batch_size=32)
    no_tick = Environment.default().replace(nvml_tick_s=0.0)
    wide = Environment.default().replace(nvml_tick_s=1e-3)
    a, b = gpucast.predict(job, "rtx-3090", env=no_tick), gpucast.predict(job, "rtx-3090", env=wide)
    assert a.gpu_held_pct == pytest.approx(a.gpu_util_pct, abs=0.01)    # no tick: NVML = held
    assert b.gpu_held_pct == pytest.approx(a.gpu_held_pct) and b.step_time_s == a.step_time_s
    assert b.gpu_util_pct >= a.gpu_util_pct
    assert b.gpu_held_interval[0] <= b.gpu_held_pct <= b.gpu_held_interval[1]
    assert b.to_dict()["gpu_held_pct"] == b.gpu_held_pct and b.gpu_syncs >= 1
