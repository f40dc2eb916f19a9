"""Memory as nvidia-smi reads it, term by term (gpucast.estimate.memory and .memory_context), each
expectation with a reason independent of the code:

* the lazily loaded context measured on Hopper applies to lazily loading CUDA >= 12 stacks on
  Hopper only: an A100, a CUDA 11 build or an eagerly loading process keeps the cited/fitted
  figures of its own stack (the GPUMemNet and Lucid sets' stacks are not touched);
* PyTorch keeps one cuBLAS/cuDNN handle per thread, and backward runs on the autograd engine's
  thread: a training step that runs GEMMs both ways holds two cuBLAS handles, inference one, and a
  network without GEMMs (a convolutional GAN) none;
* every term is named in the breakdown and the terms sum to the total (what ``gpucast explain``
  prints);
* from PyTorch 1.13 the cuBLAS workspaces come from the caching allocator, so torch's
  ``max_memory_allocated`` holds them; before, cuBLAS allocated its own;
* a fitted constant says what it was fitted on;
* with ``expandable_segments`` the allocator's segments do not fragment across requests: a
  ResNet-18 step, whose freed activations of many sizes leave slivers between the default
  allocator's segments, reserves less, never less than it allocates, and the tensors stay the same.
"""

from __future__ import annotations

import pytest

import gpucast
from gpucast import Job
from gpucast.api import trace
from gpucast.estimate import EstimatorConfig
from gpucast.estimate import memory as em
from gpucast.estimate import memory_context as mc
from gpucast.estimate.environment import Environment
from gpucast.hardware import get_gpu
from gpucast.surroundings import Data, Loop, Stack, resolve

BENCH = dict(data=Data(source="device"), loop=Loop.benchmark())
CUDA13 = Stack(torch="2.11", cuda="13.0")
FITTED = ("cuda_context_lazy_hopper_bytes", "cublas_handle_bytes", "cudnn_handle_bytes")


def _mem(model: str, gpu: str, stack: Stack, **kw):
    return gpucast.explain(Job(model, stack=stack, **BENCH, **kw), gpu).estimate.memory


@pytest.mark.parametrize("gpu, stack, field", [
    ("h200", CUDA13, "cuda_context_lazy_hopper_bytes"),
    ("h100", Stack(torch="2.4", cuda="12.1"), "cuda_context_lazy_hopper_bytes"),
    ("a100-40gb", CUDA13, "cuda_context_lazy_bytes"),
    ("h100", Stack(torch="2.0", cuda="11.8"), "cuda_context_lazy_bytes"),
])
def test_the_lazy_context_is_chosen_by_architecture_and_cuda_major(gpu, stack, field):
    env = Environment.default()
    sur = resolve(Job("mlp-small", stack=stack))
    assert mc.cuda_context_bytes(get_gpu(gpu), env, sur) == getattr(env, field)


def test_an_eager_process_on_hopper_keeps_its_tiers():
    env = Environment.default()
    sur = resolve(Job("mlp-small", stack=Stack(torch="2.4", cuda="12.1", lazy_loading=False)))
    assert mc.cuda_context_bytes(get_gpu("h100"), env, sur) == \
        env.cuda_context_lazy_bytes + env.cuda_context_eager_extra_bytes
    assert mc.library_handle_bytes(trace(Job("mlp-small", **BENCH)), get_gpu("h100"), env, sur) == {}


def test_handles_follow_the_threads_that_run_each_library():
    env = Environment.default()
    train = _mem("mlp-small", "h200", CUDA13).breakdown
    infer = _mem("mlp-small", "h200", CUDA13, mode="infer", optimizer=None).breakdown
    gan = _mem("dcgan", "h200", CUDA13, batch_size=8).breakdown
    assert train["cublas_handles"] == 2 * env.cublas_handle_bytes and "cudnn_handles" not in train
    assert infer["cublas_handles"] == env.cublas_handle_bytes
    assert gan["cudnn_handles"] == 2 * env.cudnn_handle_bytes and "cublas_handles" not in gan
    # where no per-handle figure exists the handles are part of the context
    assert not {"cublas_handles", "cudnn_handles"} & set(_mem("mlp-small", "a100-40gb", CUDA13).breakdown)


@pytest.mark.parametrize("model, gpu, stack", [
    ("resnet18-cifar", "h200", CUDA13),
    ("mlp-small", "a100-40gb", Stack(torch="2.4", cuda="12.1", lazy_loading=False)),
    ("resnet18-cifar", "rtx-3090", Stack(torch="1.11", cuda="11.3", lazy_loading=False)),
])
def test_every_term_is_named_and_they_sum_to_the_total(model, gpu, stack):
    m = _mem(model, gpu, stack, batch_size=16)
    for term in ("cuda_context", "cublas_workspaces", "cudnn_workspaces", "allocator_overhead", "parameters",
                 "activations"):
        assert term in m.breakdown
    assert sum(m.breakdown.values()) == m.total_bytes
    assert m.breakdown["allocator_overhead"] >= 0 and m.breakdown["cudnn_workspaces"] >= 0
    assert m.total_bytes >= m.reserved_peak_bytes >= m.allocated_peak_bytes


def test_cublas_workspaces_are_in_the_allocator_from_pytorch_1_13():
    new = _mem("mlp-small", "a100-80gb", Stack(torch="2.4", cuda="12.1"))
    old = _mem("mlp-small", "a100-80gb", Stack(torch="1.12", cuda="11.3"))
    blas = em.cublas_workspace_bytes(get_gpu("a100-80gb"), EstimatorConfig(), "train")
    # 2.4: two handles' workspaces and their 1 MiB cuBLASLt ones, inside torch's allocated peak
    assert new.breakdown["cublas_workspaces"] == blas + 2 * 2**20
    assert new.allocated_peak_bytes >= new.breakdown["cublas_workspaces"]
    # 1.12: cuBLAS's own, outside the allocator: counted in the total, not in torch's figures
    assert old.breakdown["cublas_workspaces"] == blas
    assert old.allocated_peak_bytes < blas
    assert old.total_bytes - old.reserved_peak_bytes >= blas + old.breakdown["cuda_context"]


def test_the_fitted_constants_name_their_measurements():
    described = {d["name"]: d for d in Environment.describe()}
    for name in FITTED:
        src = described[name]["source"]
        assert "H200" in src and "torch 2.11" in src and "CUDA 13.0" in src and "h200_memory.py" in src
        assert Environment.prior_sigma(name) > 0 and described[name]["value"] > 0
    # the cited context other architectures keep is not the Hopper fit
    assert Environment.default().cuda_context_lazy_bytes != Environment.default().cuda_context_lazy_hopper_bytes


def test_expandable_segments_reserve_less_for_a_fragmenting_step():
    plain = gpucast.explain(Job("resnet18", batch_size=128), "a100-80gb").estimate.memory
    grown = gpucast.explain(Job("resnet18", batch_size=128, stack=Stack(expandable_segments=True)),
                            "a100-80gb").estimate.memory
    assert grown.reserved_peak_bytes < 0.9 * plain.reserved_peak_bytes
    assert grown.reserved_peak_bytes >= grown.allocated_peak_bytes
    assert abs(grown.allocated_peak_bytes - plain.allocated_peak_bytes) < 0.01 * plain.allocated_peak_bytes
    assert grown.total_bytes - grown.reserved_peak_bytes == plain.total_bytes - plain.reserved_peak_bytes


def test_expandable_segments_must_be_a_bool():
    from gpucast.job import JobError

    with pytest.raises((JobError, ValueError), match="expandable_segments"):
        Stack(expandable_segments="yes")
