"""CUDA mirroring: what a captured step dispatches is what a CUDA GPU would run.

Expectations come from PyTorch's CUDA code paths, cited per test: autocast's op lists, SDPA's
backend choice, foreach optimizers (the CUDA default) and ``multi_tensor_apply``'s launch loop
(``aten/src/ATen/native/cuda/MultiTensorApply.cuh``), GradScaler's ``found_inf`` read, the fused
dropout kernel, cuDNN RNNs.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from torch.utils._python_dispatch import TorchDispatchMode

from gpucast.graph import capture, rules
from gpucast.graph.mirror import _ORIGINAL_SDPA, CudaMirror
from gpucast.graph.tracer import resolve
from gpucast.job import Job

RESNET_32PX = dict(batch_size=4, input_shape=(3, 32, 32))


# --------------------------------------------------------------------------- autocast
def test_amp_bf16_runs_convs_in_bf16_and_records_the_casts(cap):
    fp32 = cap(Job("resnet18", **RESNET_32PX))
    bf16 = cap(Job("resnet18", **RESNET_32PX, precision="amp-bf16"))
    convs = [o for o in bf16.ops if o.op in ("convolution", "convolution_backward")]
    assert len(convs) == 2 * 20  # resnet18: 20 convs (17 3x3/7x7 + 3 downsample 1x1)
    assert {o.dtype for o in convs} == {"bfloat16"}
    assert {o.dtype for o in fp32.ops if o.op == "convolution"} == {"float32"}
    casts = Counter((o.phase, o.dtype) for o in bf16.ops if o.op == "_to_copy")
    # Forward: the input and every conv/linear weight (and the fc bias) cast to bf16 once
    # (autocast caches weight casts): 1 + 20 + 2.
    assert casts[("fwd", "bfloat16")] == 23
    # The loss runs in fp32 (classification_loss calls .float()); backward casts gradients back.
    assert casts[("loss", "float32")] == 1
    assert casts[("bwd", "float32")] == 22  # the 22 cast parameters' gradients, back to fp32
    assert not any(o.op == "_to_copy" for o in fp32.ops)
    # Softmax/log-softmax is on autocast's fp32 list, the fc (linear) on the lower-precision list.
    assert {o.dtype for o in bf16.ops if o.op == "_log_softmax"} == {"float32"}
    assert {o.dtype for o in bf16.ops if o.op == "addmm"} == {"bfloat16"}
    assert bf16.flops == fp32.flops


def test_inference_autocast_does_not_hold_the_weights_half_copies():
    """Autocast caches the casts of fp32 leaves that require grad while autograd records
    (``cached_cast``, ``autocast_mode.cpp``); under ``torch.inference_mode()`` it casts at every use
    and the copy dies after it (a CPU check: ``to`` per use there; our H200's Llama inference rows
    allocate the fp32 weights and activations, not a bf16 copy beside them). Four 2048x2048 layers:
    16 MiB of fp32 weight and 8 MiB of bf16 copy each."""
    mib, n = 2**20, 2048

    def model():
        return nn.Sequential(*[nn.Linear(n, n, bias=False) for _ in range(4)])

    def job(mode):
        return Job.from_module(model, lambda b: (torch.randn(b, n),), batch_size=8, mode=mode,
                               precision="amp-bf16", optimizer=None if mode == "infer" else "sgd",
                               loss_fn=lambda out, inputs: out.float().sum())

    infer, train = capture(job("infer")), capture(job("train"))
    weights = 4 * n * n * 4
    assert infer.memory.peak_allocated_bytes < weights + 2 * 8 * mib  # one layer's copy at a time
    # training keeps every layer's copy for the autocast region: all four live at the end of the forward
    fwd = [o.index for o in train.ops if o.phase == "fwd"]
    assert max(train.memory.timeline[i] for i in fwd) >= weights + 4 * 8 * mib


# --------------------------------------------------------------------------- SDPA
_BERT = dict(batch_size=2, seq_len=32)


@pytest.mark.parametrize("precision, fused", [
    ("fp32", "_scaled_dot_product_efficient_attention"),
    ("amp-bf16", "_scaled_dot_product_flash_attention"),
])
def test_bert_attention_is_a_fused_kernel(precision, fused, cap):
    # CUDA SDPA: flash for fp16/bf16 without a mask (head dim <= 256), memory-efficient for fp32.
    trace = cap(Job("bert-base", **_BERT, precision=precision))
    ops = Counter((o.phase, o.op) for o in trace.ops)
    assert ops[("fwd", fused)] == 12
    assert ops[("bwd", fused + "_backward")] == 12
    assert {o.category for o in trace.ops if o.op.startswith(fused)} == {"attention"}
    # No materialised attention: no bmm, and no (b, h, s, s) tensor anywhere.
    assert not any(o.op in ("bmm", "baddbmm") for o in trace.ops)
    s = _BERT["seq_len"]
    assert not any(shape[-2:] == (s, s) for o in trace.ops for shape in o.out_shapes if len(shape) == 4)
    dtype = "float32" if precision == "fp32" else "bfloat16"
    assert {o.dtype for o in trace.ops if o.op == fused} == {dtype}


@pytest.mark.parametrize("name", ["llama-1b", "bert-base"])
def test_amp_attention_is_flash_in_bf16_and_flops_do_not_change(name, cap):
    """Under CUDA autocast SDPA is on the lower-precision list: its inputs are cast to bf16
    whatever their dtype. Llama's RoPE multiplies bf16 q/k by fp32 cos/sin, which promotes them
    to fp32; autocast still casts them back at SDPA, and flash attention runs (no mask, causal)."""
    fp32 = cap(Job(name, **_BERT))
    amp = cap(Job(name, **_BERT, precision="amp-bf16"))
    attention = [o for o in amp.ops if o.category == "attention"]
    assert {o.op for o in attention} == {"_scaled_dot_product_flash_attention",
                                         "_scaled_dot_product_flash_attention_backward"}
    assert {o.dtype for o in attention} == {"bfloat16"}
    # Casts change dtypes, not the work: same FLOPs as fp32.
    assert amp.flops == fp32.flops


def test_amp_fp16_gpt2_uses_flash_attention_and_causal(cap):
    trace = cap(Job("gpt2", batch_size=1, seq_len=32, precision="amp-fp16"))
    flash = [o for o in trace.ops if o.op == "_scaled_dot_product_flash_attention"]
    assert len(flash) == 12 and {o.dtype for o in flash} == {"float16"}


# --------------------------------------------------------------------------- foreach optimizers
def mta_launches(numels, depth, scalar_list=False) -> int:
    """Kernel launches of multi_tensor_apply<depth> over tensors of these sizes: a line-by-line
    transcription of the loop in MultiTensorApply.cuh (4 KB kernel-argument limits)."""
    max_tensors = ([96, 64, 48, 36, 30] if scalar_list else [110, 64, 48, 36, 30])[depth - 1]
    max_blocks, chunk_size = 320, 65536
    launches = loc_block = loc_tensor = 0
    for numel in numels:
        if numel == 0:
            continue
        loc_tensor += 1
        chunks = numel // chunk_size + (numel % chunk_size != 0)
        for chunk in range(chunks):
            loc_block += 1
            tensors_full = loc_tensor == max_tensors and chunk == chunks - 1
            blocks_full = loc_block == max_blocks
            if tensors_full or blocks_full:
                launches += 1
                loc_block = 0
                loc_tensor = 0 if chunk == chunks - 1 else 1
    return launches + (loc_block != 0)


def _meta(numels):
    return [torch.empty(n, device="meta") for n in numels]


@pytest.mark.parametrize("numels, depth, scalar_list, launches", [
    ([1000] * 200, 1, False, 2),              # 110 tensors per launch at depth 1
    ([1000] * 200, 2, False, 4),              # 64 at depth 2
    ([1000] * 200, 1, True, 3),               # 96 with a scalar list
    ([1000] * 110, 1, False, 1),
    ([320 * 65536], 1, False, 1),             # exactly 320 chunks: one full launch
    ([320 * 65536 + 1], 1, False, 2),         # one more chunk spills
    ([321 * 65536] + [1] * 110, 1, False, 3),  # the carried tensor takes a slot in launch 2
    ([0, 0, 5], 1, False, 1),                 # empty tensors are skipped
    ([0, 0], 1, False, 0),
])
def test_foreach_kernels_follow_multi_tensor_apply(numels, depth, scalar_list, launches):
    lists = [_meta(numels)] * depth
    assert mta_launches(numels, depth, scalar_list) == launches
    assert rules.foreach_kernels(lists, scalar_list=scalar_list) == launches


@settings(max_examples=150, deadline=None)
@given(numels=st.lists(st.one_of(st.integers(0, 3000), st.integers(60_000, 70_000),
                                 st.integers(1, 700 * 65536)), max_size=250),
       depth=st.integers(1, 5), scalar_list=st.booleans())
def test_foreach_kernels_match_the_transcribed_loop(numels, depth, scalar_list):
    lists = [_meta(numels)] * depth
    assert rules.foreach_kernels(lists, scalar_list=scalar_list) == mta_launches(numels, depth, scalar_list)


# Non-capturable foreach Adam (torch/optim/adam.py, _multi_tensor_adam, no weight decay) issues
# these GPU foreach calls, with the depth multi_tensor_apply sees (tensor lists, outputs included)
# and whether a list of Python scalars is passed.
_ADAM_GPU_FOREACH = [
    ("_foreach_lerp_", 2, False),     # exp_avg.lerp_(grad, 1 - beta1)
    ("_foreach_mul_", 1, False),      # exp_avg_sq *= beta2
    ("_foreach_addcmul_", 3, False),  # exp_avg_sq += (1 - beta2) * grad * grad
    ("_foreach_sqrt", 2, False),      # out-of-place: input list + new output list
    ("_foreach_div_", 1, True),       # / bias_correction2_sqrt (a list of floats)
    ("_foreach_add_", 1, False),      # + eps
    ("_foreach_addcdiv_", 3, True),   # param += step_size * exp_avg / denom (list of floats)
]
_SGD_GPU_FOREACH = [  # torch/optim/sgd.py, _multi_tensor_sgd with momentum, no dampening
    ("_foreach_mul_", 1, False), ("_foreach_add_", 2, False), ("_foreach_add_", 2, False),
]


def _many_small_layers():
    """75 Linear(4, 4): 150 small parameter tensors, where the tensor-slot limits (not the
    chunk limit) decide the launches, and depth and scalar lists matter."""
    return nn.Sequential(*[nn.Linear(4, 4) for _ in range(75)])


_MANY_SMALL = Job.from_module(_many_small_layers, lambda b: (torch.randn(b, 4),), batch_size=2,
                              optimizer="adam", name="tests.many_small_layers")


@pytest.mark.parametrize("job, expected", [
    (Job("resnet18", **RESNET_32PX, optimizer="adam"), _ADAM_GPU_FOREACH),
    (Job("bert-base", batch_size=2, seq_len=32, optimizer="adam"), _ADAM_GPU_FOREACH),
    (_MANY_SMALL, _ADAM_GPU_FOREACH),
    (Job("resnet18", **RESNET_32PX), _SGD_GPU_FOREACH),
], ids=["resnet18-adam", "bert-base-adam", "150-small-params-adam", "resnet18-sgd"])
def test_optimizer_step_is_foreach_with_multi_tensor_apply_launches(job, expected, cap):
    trace = cap(job)
    with torch.device("meta"):
        model = resolve(job).model_fn()
    numels = [p.numel() for p in model.parameters() if p.requires_grad]
    gpu = [o for o in trace.ops if o.phase == "optim" and o.category == "optimizer"]
    assert [o.op for o in gpu] == [name for name, _, _ in expected]
    assert [o.kernels for o in gpu] == [mta_launches(numels, d, sl) for _, d, sl in expected]
    if job is _MANY_SMALL:  # 150 tensors of one chunk: ceil(150 / max tensors at that depth)
        assert [o.kernels for o in gpu] == [3, 2, 4, 3, 2, 2, 4]
    assert all(o.dispatch == "python" and o.kernels >= 1 for o in gpu)
    # Nothing in the optimizer step launches a per-parameter kernel.
    assert all(o.op.startswith("_foreach_") for o in trace.ops if o.phase == "optim" and o.kernels)
    if job.optimizer == "adam":
        # The step counters are CPU scalars (non-capturable Adam): their update and the
        # .item() reads of them launch nothing and do not synchronise.
        host = [o for o in trace.ops if o.phase == "optim" and o.category == "host"]
        assert any(o.op == "_foreach_add_" for o in host)
        assert sum(o.op == "_local_scalar_dense" for o in host) == 2 * len(numels)
        assert all(o.kernels == 0 and not o.sync and o.dispatch == "none" and o.bytes == 0 for o in host)


# --------------------------------------------------------------------------- kernels of views
class _Views(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(24, 24)

    def forward(self, x):  # x: (b, 4, 6)
        y = self.lin(x.reshape(x.shape[0], 24))
        y = y.view(-1, 4, 6).transpose(1, 2).permute(0, 2, 1).unsqueeze(0).squeeze(0)
        y = y.narrow(1, 0, 3).expand(2, -1, -1, -1).select(0, 1)
        a, b = y.chunk(2, dim=2)
        return (a.flatten(1)[:, 1:] * b.unflatten(2, (1, 3)).flatten(1)[:, :-1]).t().diagonal()


def test_view_ops_launch_no_kernels():
    trace = capture(Job.from_module(_Views, lambda b: (torch.randn(b, 4, 6),), batch_size=3))
    views = [o for o in trace.ops if o.category == "view"]
    names = {o.op for o in views}
    # (reshape/flatten/unflatten/narrow/chunk are composite: they reach dispatch as these.)
    assert {"view", "transpose", "permute", "unsqueeze", "squeeze", "expand", "select", "split",
            "slice", "t", "diagonal", "detach"} <= names
    for o in views:
        assert o.kernels == 0 and o.bytes == 0 and o.flops == 0 and o.dispatch == "none", o
    # ...and the arithmetic around them does launch.
    assert all(o.kernels >= 1 for o in trace.ops if o.category in ("matmul", "elementwise"))


class _InplaceViews(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        y = self.lin(x) * 2.0  # (nothing saved for backward is modified below)
        y.unsqueeze_(0)
        y.squeeze_(0)
        y.t_()
        y.transpose_(0, 1)
        y.swapaxes_(0, 1)
        return y


def test_inplace_view_ops_launch_no_kernels():
    # t_, transpose_, unsqueeze_... change a tensor's sizes/strides, never its data.
    trace = capture(Job.from_module(_InplaceViews, lambda b: (torch.randn(b, 6),), batch_size=3))
    inplace = [o for o in trace.ops if o.op in ("unsqueeze_", "squeeze_", "t_", "transpose_")]
    assert len(inplace) == 5
    for o in inplace:
        assert o.kernels == 0 and o.bytes == 0 and o.costed, o


# --------------------------------------------------------------------------- RNNs
class _LSTMNet(nn.Module):
    def __init__(self, proj_size=0):
        super().__init__()
        self.rnn = nn.LSTM(16, 32, num_layers=2, batch_first=True, proj_size=proj_size)

    def forward(self, x):
        return self.rnn(x)[0]


def test_lstm_is_one_cudnn_call():
    trace = capture(Job.from_module(_LSTMNet, lambda b: (torch.randn(b, 10, 16),), batch_size=4))
    fwd = Counter(o.op for o in trace.ops if o.phase == "fwd" and o.category != "view")
    assert fwd["_cudnn_rnn"] == 1
    assert not any(o.phase in ("fwd", "bwd") and o.category == "matmul" for o in trace.ops)
    assert sum(o.op == "_cudnn_rnn_backward" for o in trace.ops) == 1


def test_decomposed_lstm_ops_are_dispatched_from_cpp():
    # cuDNN does not take LSTM projections: the recurrence stays decomposed, issued from C++.
    trace = capture(Job.from_module(lambda: _LSTMNet(proj_size=8), lambda b: (torch.randn(b, 10, 16),),
                                    batch_size=4))
    fwd = [o for o in trace.ops if o.phase == "fwd" and o.kernels]
    mms = [o for o in fwd if o.category == "matmul"]
    assert len(mms) >= 2 * 10 * 2  # per layer and step: gates GEMMs and the projection
    assert all(o.dispatch == "cpp" for o in mms)
    assert all(o.dispatch == "cpp" for o in fwd if o.category == "elementwise")
    # Backward ops are issued by the autograd engine.
    assert {o.dispatch for o in trace.ops if o.phase == "bwd" and o.kernels} == {"engine"}


# --------------------------------------------------------------------------- dropout
class _Drop(nn.Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.drop = nn.Dropout(0.5, inplace=inplace)

    def forward(self, x):
        return self.drop(self.lin(x))


def test_dropout_is_one_fused_kernel_with_a_bool_mask():
    # aten/src/ATen/native/Dropout.cpp: on CUDA, training dropout with 0 < p < 1 is
    # native_dropout (one kernel, the mask kept for backward is bool).
    trace = capture(Job.from_module(_Drop, lambda b: (torch.randn(b, 64),), batch_size=4))
    fwd = [o for o in trace.ops if o.phase == "fwd"]
    drop = [o for o in fwd if o.op == "native_dropout"]
    assert len(drop) == 1 and drop[0].kernels == 1 and drop[0].out_shapes == ((4, 64), (4, 64))
    assert not any(o.op in ("bernoulli_", "div_") for o in fwd)
    assert sum(o.op == "native_dropout_backward" for o in trace.ops) == 1
    # Live when backward starts: the output (4x64 fp32: 1 KiB), the bool mask native_dropout
    # saves (256 B -> one 512 B block) and the loss (one block). The unfused path would keep
    # a float mask (1 KiB) and a separate product: 2.5 KiB.
    assert trace.memory.at_backward_start["activations"] == 1024 + 512 + 512
    infer = capture(Job.from_module(_Drop, lambda b: (torch.randn(b, 64),), batch_size=4, mode="infer"))
    assert not any("dropout" in o.op or "bernoulli" in o.op for o in infer.ops)


class _GqaAttention(nn.Module):
    """Grouped-query attention as Hugging Face's SDPA path calls it (32 query heads, 8 K/V heads)."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(256, 256, bias=False)
        self.kv = nn.Linear(256, 128, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 32, 8).transpose(1, 2)
        k, v = (t.view(b, s, 8, 8).transpose(1, 2) for t in self.kv(x).chunk(2, -1))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum()


def test_grouped_query_attention_reads_the_kv_heads_without_copies():
    # PyTorch >= 2.5's flash kernel takes fewer K/V heads than query heads (enable_gqa): no
    # repeat_interleave copies of K and V, forward or backward; the gradients keep the K/V heads'
    # shapes. (Our H200 decode timings read the cache once: data/measurements/kernels/*-h200-2.csv.)
    job = Job.from_module(_GqaAttention, lambda b: (torch.randn(b, 16, 256),), batch_size=2, precision="amp-bf16")
    trace = capture(job)
    flash = [o for o in trace.ops if o.op == "_scaled_dot_product_flash_attention"]
    assert len(flash) == 1 and flash[0].shapes[1][1] == 8 and flash[0].shapes[0][1] == 32
    assert any(o.op == "_scaled_dot_product_flash_attention_backward" for o in trace.ops)
    assert not any(o.op in ("repeat_interleave", "expand", "clone") and o.phase == "fwd"
                   and any(len(s) == 5 for s in o.shapes) for o in trace.ops)
    fp32 = capture(Job.from_module(_GqaAttention, lambda b: (torch.randn(b, 16, 256),), batch_size=2))
    # fp32: the memory-efficient kernel, which takes no grouped heads: K and V are repeated first
    assert any(o.op == "_scaled_dot_product_efficient_attention" and o.shapes[1][1] == 32 for o in fp32.ops)


def test_inplace_dropout_stays_unfused():
    trace = capture(Job.from_module(lambda: _Drop(inplace=True), lambda b: (torch.randn(b, 64),), batch_size=4))
    assert not any(o.op == "native_dropout" for o in trace.ops)


# --------------------------------------------------------------------------- GradScaler
def test_amp_fp16_training_has_one_sync(cap):
    fp16 = cap(Job("resnet18", **RESNET_32PX, precision="amp-fp16"))
    syncs = [o for o in fp16.ops if o.sync]
    assert len(syncs) == 1 and syncs[0].phase == "optim" and syncs[0].op == "_local_scalar_dense"
    # The loss is scaled before backward and the gradients unscaled before the step.
    assert any(o.phase == "loss" and o.op == "mul" for o in fp16.ops)
    first_optim = [o for o in fp16.ops if o.phase == "optim" and o.category == "optimizer"][0]
    assert first_optim.op == "_foreach_mul_"
    assert {o.dtype for o in fp16.ops if o.op == "convolution"} == {"float16"}
    for precision in ("fp32", "amp-bf16"):
        assert not any(o.sync for o in cap(Job("resnet18", **RESNET_32PX, precision=precision)).ops)
    assert not any(o.sync for o in cap(Job("resnet18", **RESNET_32PX, precision="amp-fp16", mode="infer")).ops)


# --------------------------------------------------------------------------- threads
class _OpNames(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _attention(q):
    with _OpNames() as log:
        out = F.scaled_dot_product_attention(q, q, q)
    return out.dtype, [n for n in log.names if "attention" in n]


def test_mirrors_in_two_threads_do_not_see_each_other():
    """A capture's SDPA follows its own thread's mirror (the service captures in several threads):
    an AMP-bf16 mirror in thread A, an fp32 one in thread B entered after it and left before A's
    second call, a thread C with none. Backends as in test_bert_attention_is_a_fused_kernel."""
    q = torch.empty(2, 4, 16, 8, device="meta")
    seen, step = {}, [threading.Event() for _ in range(4)]

    def a():
        with CudaMirror(amp_dtype=torch.bfloat16):
            step[0].set()
            step[1].wait(30)
            seen["a, b inside"] = _attention(q)
            step[2].set()
            step[3].wait(30)
            seen["a, b gone"] = _attention(q)

    def b():
        step[0].wait(30)
        with CudaMirror():
            step[1].set()
            step[2].wait(30)
            seen["b"] = _attention(q)
            seen["c"] = _in_thread(lambda: _attention(q))
        step[3].set()

    threads = [threading.Thread(target=f) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    flash, efficient = "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention"
    assert seen["a, b inside"] == (torch.bfloat16, [flash]) == seen["a, b gone"]
    assert seen["b"] == (torch.float32, [efficient])
    assert seen["c"][0] == torch.float32 and flash not in seen["c"][1] and efficient not in seen["c"][1]
    assert F.scaled_dot_product_attention is _ORIGINAL_SDPA  # put back after the last capture


def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(30)
    return out[0]


def test_concurrent_predictions_equal_serial_ones():
    """Five captures at once in five threads (AMP and fp32 attention among them) answer exactly
    what they answer one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from gpucast import api

    tiny_bert = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 128}
    jobs = [Job.from_hf_config(tiny_bert, batch_size=8, seq_len=64, precision="amp-bf16"),
            Job.from_hf_config(tiny_bert, batch_size=8, seq_len=64, precision="fp32"),
            Job("mlp-small", batch_size=32), Job("resnet18-cifar", batch_size=8, precision="amp-fp16"),
            Job("gpt2", batch_size=2, seq_len=64, precision="amp-bf16")]
    serial = [api.predict(j, "a100-80gb").to_dict() for j in jobs]
    api._traces.clear()
    with ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(lambda j: api.predict(j, "a100-80gb").to_dict(), jobs))
    assert together == serial
