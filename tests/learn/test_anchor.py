"""Anchoring gpucast's simulated step to a measured run (gpucast.learn.anchor), on a real job."""

from __future__ import annotations

import pytest

from gpucast import Job
from gpucast.api import trace
from gpucast.estimate import prepare, reported_util
from gpucast.estimate.environment import Environment
from gpucast.hardware import get_gpu
from gpucast.learn.anchor import anchor


@pytest.fixture(scope="module")
def prepared():
    job = Job("resnet18-cifar", batch_size=32)
    env = Environment.default()
    return prepare(trace(job), job, get_gpu("rtx-3090"), None, env), env


def test_the_anchored_step_matches_the_measured_step_and_utilization(prepared):
    prep, env = prepared
    tl, _ = prep.run(env)
    step, util = 2.0 * tl.step_time_s, 55.0       # a run twice as slow as predicted, NVML at 55 %
    a = anchor(prep, env, step, util)
    assert a.step_s == pytest.approx(step, rel=0.03)
    assert a.util_pct == pytest.approx(util, abs=2.0)
    assert a.held_pct <= a.util_pct + 1e-9          # what the kernels hold, never above NVML's reading
    assert a.host_factor > 1.0                       # the slower run is explained by the host first
    assert a.residual < 1.0


def test_without_a_utilization_only_the_step_is_matched(prepared):
    prep, env = prepared
    tl, _ = prep.run(env)
    a = anchor(prep, env, 1.5 * tl.step_time_s)
    assert a.step_s == pytest.approx(1.5 * tl.step_time_s, rel=0.03)
    sim = prep.run(env, a.kernel_factor, a.host_factor)[0]
    assert a.util_pct == pytest.approx(100.0 * reported_util(sim, env))


def test_a_step_time_that_is_not_positive_is_refused(prepared):
    prep, env = prepared
    with pytest.raises(ValueError, match="positive"):
        anchor(prep, env, 0.0, 50.0)
