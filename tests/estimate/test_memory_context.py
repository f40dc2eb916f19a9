"""Memory as nvidia-smi sees it beyond the tensors: the CUDA context by loading mode and CUDA
build, cuDNN's images, cuBLAS and cuDNN workspaces; and the LSTM whose forward ends in log_softmax.

Each expectation has a reason independent of the code:

* lazy loading loads only the kernels a process uses, so its context is smaller than the eager
  one of the same build (NVIDIA, CUDA C++ Programming Guide, 'Lazy Loading');
* which eager tier a stack gets depends only on the CUDA version it was built with, and a later
  version never falls in an earlier tier;
* PyTorch's default cuBLAS workspace is ':4096:2:16:8' (8,519,680 bytes) before Hopper and
  4096 KiB x 8 on Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp), one per thread's handle;
* a convolution's workspace grows with its operands, and the allocator only has to grow where
  the workspace does not fit in the blocks it holds at that convolution;
* a model that returns log_softmax trained with CrossEntropyLoss (which applies log_softmax
  again) runs two log-softmaxes, each with its backward.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import gpucast
from gpucast import Job
from gpucast.api import trace
from gpucast.estimate import EstimatorConfig
from gpucast.estimate import memory as em
from gpucast.estimate.environment import Environment
from gpucast.graph import memory as gm
from gpucast.graph.trace import OpRecord
from gpucast.hardware import get_gpu
from gpucast.surroundings import Data, Loop, Stack, Surroundings

BENCH = dict(data=Data(source="device"), loop=Loop.benchmark())
MIB = 2**20


def _sur(**stack) -> Surroundings:
    """Resolved surroundings with the given stack fields (the rest gpucast's defaults)."""
    from gpucast.surroundings import resolve

    return resolve(Job("mlp-small", stack=Stack(**stack)))


# ------------------------------------------------------------------------------ the context

@pytest.mark.parametrize("cuda, field", [
    ("10.2", "cuda_context_eager_extra_cu10_bytes"),
    ("11.0", "cuda_context_eager_extra_cu11_bytes"),
    ("11.3", "cuda_context_eager_extra_cu11_bytes"),
    ("11.8", "cuda_context_eager_extra_cu11_bytes"),
    ("12.1", "cuda_context_eager_extra_bytes"),
    ("13.0", "cuda_context_eager_extra_bytes"),
])
def test_the_eager_tier_is_chosen_by_the_cuda_version(cuda, field):
    assert em.eager_context_field(Stack(torch="1.11", cuda=cuda)) == field
    # the torch version does not move the tier
    assert em.eager_context_field(Stack(torch="2.4", cuda=cuda)) == field


def test_tiers_are_ordered_and_every_tier_is_a_fitted_constant():
    order = [name for _, name in em.EAGER_CONTEXT_TIERS]
    versions = ["9.2", "10.0", "10.2", "11.0", "11.1", "11.3", "11.7", "11.8", "12.0", "12.4", "12.8", "13.0"]
    picked = [order.index(em.eager_context_field(Stack(cuda=v))) for v in versions]
    assert picked == sorted(picked)  # a later CUDA never falls in an earlier tier
    for name in order:
        assert name in Environment.fittable() and Environment.prior_sigma(name) > 0
        assert Environment.priors().param(name) > 0


@pytest.mark.parametrize("cuda", ["10.2", "11.3", "12.1"])
def test_lazy_loading_holds_less_than_eager_loading(cuda):
    env = Environment.default()
    gpu = get_gpu("rtx-3090")
    lazy = em.cuda_context_bytes(gpu, env, _sur(cuda=cuda, lazy_loading=True))
    eager = em.cuda_context_bytes(gpu, env, _sur(cuda=cuda, lazy_loading=False))
    assert lazy == env.cuda_context_lazy_bytes < eager
    # cuDNN's sub-libraries come on top only when an eagerly loading process runs cuDNN
    eager_cudnn = em.cuda_context_bytes(gpu, env, _sur(cuda=cuda, lazy_loading=False), cudnn=True)
    assert eager_cudnn - eager == env.cudnn_context_eager_bytes > 0
    assert em.cuda_context_bytes(gpu, env, _sur(cuda=cuda, lazy_loading=True), cudnn=True) == lazy


def test_the_lucid_and_mlp_stacks_get_their_own_eager_tiers():
    from gpucast.learn.lucid_jobs import LUCID_STACK
    from gpucast.learn.shared_records import MLP_STACK
    from gpucast.surroundings import DEFAULT_STACK

    lucid = em.eager_context_field(LUCID_STACK.merged(DEFAULT_STACK))
    mlp = em.eager_context_field(MLP_STACK.merged(DEFAULT_STACK))
    assert lucid == "cuda_context_eager_extra_cu11_bytes"  # torch 1.11+cu113
    assert mlp != lucid


def test_a_convnet_on_an_eager_stack_holds_cudnn_images_an_mlp_does_not():
    assert em.uses_cudnn(trace(Job("resnet18-cifar", batch_size=2, **BENCH)))
    assert em.uses_cudnn(trace(Job("lstm-lm-small", batch_size=2, seq_len=4, **BENCH)))
    assert not em.uses_cudnn(trace(Job("mlp-small", batch_size=2, **BENCH)))


# ------------------------------------------------------------------------------ cuBLAS

def test_cublas_workspaces_are_pytorchs_defaults_per_handle():
    cfg = EstimatorConfig()
    assert em.cublas_workspace_bytes(get_gpu("h100"), cfg, "train") == 2 * 4096 * 1024 * 8
    assert em.cublas_workspace_bytes(get_gpu("a100-80gb"), cfg, "train") == 2 * 8_519_680
    assert em.cublas_workspace_bytes(get_gpu("a100-80gb"), cfg, "infer") == 8_519_680


# ------------------------------------------------------------------------------ cuDNN

def _conv(shape_in, weight, shape_out, dtype="float32", backward=False) -> OpRecord:
    if backward:
        return OpRecord(0, "bwd", "convolution_backward", "conv", (shape_out, shape_in, weight),
                        (shape_in, weight), dtype, 0, 0, 0, 1)
    return OpRecord(0, "fwd", "convolution", "conv", (shape_in, weight), (shape_out,), dtype, 0, 0, 0, 1)


def test_a_convolution_workspace_grows_with_its_operands_and_under_half_precision():
    env = Environment.priors()
    small = _conv((32, 64, 32, 32), (64, 64, 3, 3), (32, 64, 32, 32))
    big = _conv((128, 64, 32, 32), (64, 64, 3, 3), (128, 64, 32, 32))
    assert em.conv_workspace_bytes(big, env) > em.conv_workspace_bytes(small, env) > 0
    half = dataclasses.replace(big, dtype="float16")
    assert em.conv_workspace_bytes(half, env) > em.conv_workspace_bytes(big, env)
    # the backward of the same convolution sees the same operands
    assert em.conv_operand_elements(_conv((32, 64, 32, 32), (64, 64, 3, 3), (32, 64, 32, 32), backward=True)) \
        == em.conv_operand_elements(small)
    # the autotuner's pick holds more than the heuristics' (the priors say so)
    assert em.conv_workspace_bytes(big, env, benchmark=False) < em.conv_workspace_bytes(big, env)


def test_the_allocator_grows_only_where_a_workspace_does_not_fit_what_it_holds():
    job = Job("resnet18-cifar", batch_size=16, **BENCH)
    gpu = get_gpu("a100-80gb")
    env = Environment.priors()

    def cudnn(ratio):
        return gpucast.explain(job, gpu, env=env.replace(cudnn_benchmark_workspace_ratio=ratio)
                               ).estimate.memory.breakdown["cudnn_workspaces"]

    assert cudnn(1e-6) == 0  # a few bytes fit in the blocks the allocator already holds
    extras = [cudnn(r) for r in (50.0, 100.0, 200.0)]
    assert 0 < extras[0] < extras[1] < extras[2]
    # and what it grows by is what the prediction adds over the same job with a negligible workspace
    big = env.replace(cudnn_benchmark_workspace_ratio=100.0)
    on = gpucast.explain(job, gpu, env=big).estimate.memory
    tiny = gpucast.explain(job, gpu, env=env.replace(cudnn_benchmark_workspace_ratio=1e-6)).estimate.memory
    assert on.total_bytes - tiny.total_bytes == extras[1]
    assert on.breakdown["cublas_workspaces"] == tiny.breakdown["cublas_workspaces"] > 0


def test_this_module_restates_the_allocators_rounding():
    assert em.K_ROUND_LARGE == gm.K_ROUND_LARGE and em.FRAGMENTATION == gm.FRAGMENTATION
    assert em.REPLAYED_STEPS == gm.REPLAYED_STEPS


# ------------------------------------------------------------------------------ the LSTM's double log_softmax

def test_an_lstm_that_returns_log_softmax_traces_it_twice():
    batch, seq, vocab = 4, 35, 33_278
    plain = trace(Job("lstm-lm-wikitext2", batch_size=batch, seq_len=seq, **BENCH))
    twice = trace(Job("lstm-lm-wikitext2-logsoftmax", batch_size=batch, seq_len=seq, **BENCH))

    def count(tr, name):
        return sum(o.op == name for o in tr.ops)

    assert count(plain, "_log_softmax") == 1 and count(twice, "_log_softmax") == 2
    assert count(twice, "_log_softmax_backward_data") == 2
    assert all(o.out_shapes[0] == (seq * batch, vocab) for o in twice.ops if o.op == "_log_softmax")
    # At the peak (the first backward log-softmax) four (tokens x vocabulary) fp32 tensors are live
    # either way: the loss's gradient, the log-softmax output saved for it, its new gradient, and
    # the model's output the caller holds: the raw logits for the plain model, the first
    # log-probabilities (saved for their own backward) for the other, whose raw logits are freed
    # after forward. So the peak is no lower; the extra log-softmax and its backward cost time.
    logits = gm.round_size(seq * batch * vocab * 4)
    decoder = next(o.index for o in twice.ops if o.op == "addmm" and o.out_shapes[0] == (seq * batch, vocab))
    before_logits = twice.memory.timeline[decoder - 1]
    # (less the few kilobytes of masks and hidden states freed in between)
    assert twice.memory.peak_allocated_bytes - before_logits >= 4 * logits - MIB
    assert twice.memory.peak_allocated_bytes >= plain.memory.peak_allocated_bytes
    p_plain = gpucast.predict(Job("lstm-lm-wikitext2", batch_size=batch, seq_len=seq, **BENCH), "rtx-3090")
    p_twice = gpucast.predict(Job("lstm-lm-wikitext2-logsoftmax", batch_size=batch, seq_len=seq, **BENCH),
                              "rtx-3090")
    assert p_twice.gpu_busy_s > p_plain.gpu_busy_s


def test_lucids_lstm_is_the_variant_that_returns_log_softmax():
    from gpucast.learn.lucid_jobs import JOBS

    assert JOBS[("LSTM", "Wikitext2")].model == "lstm-lm-wikitext2-logsoftmax"


# ------------------------------------------------------------------------------ the allocator's timeline

def test_an_ops_output_is_live_beside_the_inputs_it_frees():
    """y = x * 2 with x dropped right after: while the kernel runs both are allocated (eager
    PyTorch allocates the output before the kernel reads the input), so the peak holds both."""
    n = 1 << 20  # 4 MiB of fp32

    def model():
        class Chain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(1))

            def forward(self, x):
                h = x * self.w
                h = h * 2  # the previous h is freed once this one exists
                h = h + 1
                return h.sum()

        return Chain()

    job = Job.from_module(model, lambda b: (torch.randn(b, n),), batch_size=1, mode="infer", optimizer=None,
                          loss_fn=lambda out, inputs: out, **BENCH)
    tr = gpucast.graph.capture(job)
    block = gm.round_size(n * 4)
    # input + two intermediates side by side (the parameter and the scalar are a few blocks)
    assert tr.memory.peak_allocated_bytes >= 3 * block
