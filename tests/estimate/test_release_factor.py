"""The PyTorch 1.x release's kernel factor is the GPU libraries' (cuDNN/cuBLAS): it slows the ops
those libraries run and leaves PyTorch's own kernels and the launch floor alone
(gpucast.estimate.stack.kernel_scales)."""

from __future__ import annotations

import numpy as np
import pytest

from gpucast import Job
from gpucast.api import trace
from gpucast.estimate import prepare
from gpucast.estimate.environment import Environment
from gpucast.estimate.kernels import OpArrays
from gpucast.estimate.stack import LIBRARY_CATEGORIES, kernel_scales
from gpucast.hardware import get_gpu
from gpucast.surroundings import Stack


def test_only_library_kernels_take_the_release_factor():
    env = Environment.priors().replace(torch1_kernel_factor=1.5, kernel_time_factor=1.2)
    cats = np.array(["conv", "elementwise", "matmul", "norm", "optimizer", "rnn"], dtype=object)
    old = kernel_scales(Stack(torch="1.11"), "rtx-3090", env, np.isin(cats, LIBRARY_CATEGORIES))
    assert list(old) == pytest.approx([1.8 if c in LIBRARY_CATEGORIES else 1.2 for c in cats])
    # The reference release: one scalar for every op (the cluster's factor only).
    assert kernel_scales(Stack(torch="2.3"), "rtx-3090", env, np.isin(cats, LIBRARY_CATEGORIES)) == 1.2


def test_a_model_of_small_ops_is_slowed_less_by_an_old_release_than_a_convolution_heavy_one():
    env = Environment.priors().replace(torch1_kernel_factor=1.5)
    gpu = get_gpu("rtx-3090")

    def busy_ratio(model: str, batch: int) -> float:
        # the same 1.11 trace (its per-parameter optimizer ops included) with and without the factor
        job = Job(model, batch_size=batch, stack=Stack(torch="1.11", cuda="11.3"))
        prep = prepare(trace(job), job, gpu, env=env)
        return prep.run(env)[0].gpu_busy_s / prep.run(env.replace(torch1_kernel_factor=1.0))[0].gpu_busy_s

    heavy, light = busy_ratio("resnet50", 64), busy_ratio("mobilenet-v2", 64)
    assert 1.0 < light < heavy <= 1.5
    # resnet50's GPU time is mostly convolutions: most of the factor shows
    job = Job("resnet50", batch_size=64)
    a = OpArrays.of(trace(job))
    kt = prepare(trace(job), job, gpu, env=env).kt.time
    lib_share = kt[np.isin(a.category, LIBRARY_CATEGORIES)].sum() / kt.sum()
    assert heavy - 1.0 <= 0.5 * lib_share + 0.05
