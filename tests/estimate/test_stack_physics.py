"""The software stack as physics (gpucast.estimate.stack and the tracer's 1.x structure): version
factors are monotone and documented, a 1.x stack costs more host time than 2.x for the same job on
the same host, and PyTorch 1.x's zero_grad() (in place) is in the trace."""

from __future__ import annotations

from collections import Counter

import pytest

import gpucast
from gpucast.estimate import stack as stack_mod
from gpucast.estimate.environment import Environment
from gpucast.job import Job
from gpucast.surroundings import Stack

VERSIONS = ["1.0", "1.4", "1.11", "1.13", "2.0", "2.4", "2.11"]


@pytest.mark.parametrize("tiers,fn", [(stack_mod.TORCH_HOST_TIERS, stack_mod.torch_host_factor),
                                      (stack_mod.TORCH_KERNEL_TIERS, stack_mod.torch_kernel_factor)])
def test_version_factors_never_rise_with_the_release(tiers, fn):
    env = Environment.default()
    factors = [fn(v, env) for v in VERSIONS]
    assert all(a >= b for a, b in zip(factors, factors[1:])), factors
    assert fn("2.0", env) == 1.0  # the constants' reference
    # Every tier's factor is an Environment constant with a source and a prior spread.
    for _, name in tiers:
        if name is not None:
            meta = {d["name"]: d for d in Environment.describe()}[name]
            assert meta["source"] and Environment.prior_sigma(name) > 0
            assert getattr(Environment.priors(), name) >= 1.0  # an older release is never faster


def test_the_packaged_fit_keeps_an_older_release_slower():
    """The tiers are monotone only if the fitted 1.x factors are at least 1 (the reference's)."""
    env = Environment.default()
    assert env.torch1_host_factor >= 1.0 and env.torch1_kernel_factor >= 1.0


def _step(torch_version: str, env=None, **job):
    j = Job(job.pop("model", "resnet18-cifar"), batch_size=job.pop("batch_size", 16),
            stack=Stack(torch=torch_version), **job)
    return gpucast.predict(j, "rtx-3090", env=env)


def test_a_1x_stack_steps_slower_than_2x_on_the_same_host():
    old, new = _step("1.11"), _step("2.4")
    assert old.host_time_s > new.host_time_s
    assert old.step_time_s > new.step_time_s


def test_the_host_factor_scales_dispatch_not_the_gpu():
    base = Environment.default()
    slow = base.replace(torch1_host_factor=base.torch1_host_factor * 2)
    a, b = _step("1.11", env=base), _step("1.11", env=slow)
    assert b.host_time_s > 1.5 * a.host_time_s
    assert b.gpu_busy_s == pytest.approx(a.gpu_busy_s)
    # A 2.x job does not notice the 1.x factor at all.
    assert _step("2.4", env=slow).step_time_s == pytest.approx(_step("2.4", env=base).step_time_s)


def test_a_slower_cpu_is_a_slower_host():
    j = Job("resnet18-cifar", batch_size=16, stack=Stack(torch="2.4", cpu_speed=0.5))
    slow = gpucast.predict(j, "rtx-3090")
    fast = gpucast.predict(j.with_(stack=Stack(torch="2.4", cpu_speed=1.0)), "rtx-3090")
    assert slow.host_time_s == pytest.approx(2 * fast.host_time_s, rel=0.05)


def test_zero_grad_in_place_before_2_0():
    """PyTorch 1.x zero_grad() zeroes every gradient in place (one kernel per parameter) and the
    backward accumulates into it (one add_ per parameter); 2.x frees them (set_to_none)."""
    from gpucast.api import trace

    old = trace(Job("resnet18-cifar", batch_size=8, stack=Stack(torch="1.11")))
    new = trace(Job("resnet18-cifar", batch_size=8, stack=Stack(torch="2.4")))
    n = old.param_tensors
    c_old = Counter((o.phase, o.op) for o in old.ops)
    c_new = Counter((o.phase, o.op) for o in new.ops)
    assert c_old[("optim", "zero_")] == n and c_new[("optim", "zero_")] == 0
    assert c_old[("bwd", "add_")] - c_new[("bwd", "add_")] == n
    # The gradients stay allocated across steps: at the start of backward they are already there.
    assert old.memory.at_backward_start["gradients"] == pytest.approx(old.gradient_bytes, rel=1e-3)  # 512-byte blocks
    assert new.memory.at_backward_start["gradients"] == 0


def test_gradscaler_unscales_per_gradient_on_1_6():
    from gpucast.api import trace

    def optim_ops(version):
        t = trace(Job("resnet18-cifar", batch_size=8, precision="amp-fp16", stack=Stack(torch=version)))
        c = Counter(o.op for o in t.ops if o.phase == "optim")
        return c, t.param_tensors

    c16, n = optim_ops("1.6")
    c111, _ = optim_ops("1.11")
    assert c111["_foreach_mul_"] == 1 and c16["_foreach_mul_"] == 0
    assert c16["mul_"] - c111["mul_"] == n  # the one foreach pass becomes one mul_ per gradient
