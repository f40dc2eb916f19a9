"""A kernel's grid on the SMs (gpucast.estimate.tiles) through the kernel model.

Each test states what the wave picture implies, not a number the code printed: a MIG slice runs a
kernel smaller than its SMs as fast as the whole GPU and a large one at its SMs' share; a GEMM
never gets faster with more work; a tensor-parallel rank's one-wave GEMM does not speed up by the
degree; implicit-GEMM problems carry the FLOPs torch.utils.flop_counter counts for the op.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import flop_registry

from gpucast.estimate import tiles
from gpucast.estimate.constants import DEFAULT
from gpucast.estimate.kernels import kernel_times
from gpucast.graph.trace import MemoryReport, OpRecord, Trace
from gpucast.hardware import get_gpu

aten = torch.ops.aten


def _meta(*shapes):
    return [torch.empty(s, device="meta") for s in shapes]


def _mm(m, n, k, dtype="bfloat16"):
    flops = flop_registry[aten.mm](*_meta((m, k), (k, n)))
    return OpRecord(0, "fwd", "mm", "matmul", ((m, k), (k, n)), ((m, n),), dtype, int(flops),
                    2 * (m * k + k * n), 2 * m * n, 1)


def _add(numel):
    return OpRecord(0, "fwd", "add", "elementwise", ((numel,), (numel,)), ((numel,),), "float32", 0,
                    8 * numel, 4 * numel, 1)


def _time(op, gpu, split=None):
    trace = Trace("t", "t", "train", "bf16", 1, [op], MemoryReport(0, 0, 0, "fwd", {}, {}), 0, 0, 0)
    kt = kernel_times(trace, get_gpu(gpu), "bf16", DEFAULT, split=None if split is None else np.array([split]))
    return float(kt.time[0])


# ------------------------------------------------------------------ MIG slices


@pytest.mark.parametrize("slice_", ["a100-40gb:3g.20gb", "a100-40gb:2g.10gb", "h100:3g.40gb"])
def test_a_gemm_smaller_than_the_slice_runs_as_fast_as_on_the_whole_gpu(slice_):
    whole, part = get_gpu(slice_.split(":")[0]), get_gpu(slice_)
    op = _mm(128, 128, 256)  # a few tiles of any size the library has, fewer than the slice's SMs
    assert math.ceil(128 / 32) ** 2 < part.sm_count
    assert _time(op, slice_) == pytest.approx(_time(op, whole.name), rel=1e-9)


@pytest.mark.parametrize("slice_", ["a100-40gb:3g.20gb", "a100-40gb:1g.5gb", "h100:3g.40gb"])
def test_a_large_gemm_on_a_slice_follows_its_share_of_the_sms(slice_):
    whole, part = get_gpu(slice_.split(":")[0]), get_gpu(slice_)
    op = _mm(16384, 16384, 8192)  # thousands of tiles: many waves on either
    ratio = _time(op, slice_) / _time(op, whole.name)
    assert ratio == pytest.approx(whole.sm_count / part.sm_count, rel=0.05)


@pytest.mark.parametrize("slice_", ["a100-40gb:3g.20gb", "a100-40gb:1g.5gb"])
def test_a_small_elementwise_kernel_is_as_fast_on_a_slice(slice_):
    part = get_gpu(slice_)
    small = _add(tiles.ELEMENTS_PER_BLOCK * (part.sm_count // 2))  # half as many blocks as the slice has SMs
    assert _time(small, slice_) == pytest.approx(_time(small, slice_.split(":")[0]), rel=1e-9)


def test_a_large_elementwise_kernel_on_a_slice_follows_its_bandwidth():
    whole, part = get_gpu("a100-40gb"), get_gpu("a100-40gb:3g.20gb")
    big = _add(1 << 28)
    ratio = _time(big, part.name) / _time(big, whole.name)
    assert ratio == pytest.approx(whole.memory_bandwidth_gbs / part.memory_bandwidth_gbs, rel=0.05)


# ------------------------------------------------------------------ waves and tiles


@pytest.mark.parametrize("gpu", ["a100-40gb", "h100", "v100-16gb", "t4"])
def test_more_work_never_runs_faster(gpu):
    times = [_time(_mm(m, 1024, 1024), gpu) for m in range(128, 8192 + 1, 128)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:]))


def test_one_more_tile_than_the_sms_costs_more_than_its_work():
    # 108 SMs: 108 tiles of 128x128 fill one wave; 109 need a second wave or smaller, slower tiles:
    # the time grows by several times the 0.9 % more work
    full = _time(_mm(128 * 108, 128, 16384), "a100-40gb")
    over = _time(_mm(128 * 109, 128, 16384), "a100-40gb")
    assert over / full > 1 + 3 * (1 / 108)


def test_phi_is_a_share():
    for m, n, k in [(1, 1, 1), (64, 64, 64), (4096, 4096, 4096), (17, 300, 5000), (100000, 24, 144)]:
        f = tiles.gemm_fill([(1, m, n, k)], "ampere", 108, DEFAULT.tile_reuse_half, 2.3e12, 1e-12)
        assert 0 < f <= 1


def test_a_matrix_vector_product_is_not_a_tiled_gemm():
    assert tiles.gemm_problems("mm", ((4096, 4096), (4096, 1)), ((4096, 1),)) is None
    assert tiles.gemm_problems("convolution", ((8, 96, 56, 56), (96, 1, 3, 3)), ((8, 96, 56, 56),)) is None


# ------------------------------------------------------------------ tensor parallelism


def test_a_tensor_parallel_rank_does_not_speed_up_a_one_wave_gemm_by_the_degree():
    op = _mm(1024, 3072, 1024)  # micro-batch 1 x 1,024 tokens, hidden 1,024 (QKV): under one wave
    one, four = _time(op, "a100-40gb"), _time(op, "a100-40gb", split=4)
    assert four > one / 4 * 1.2
    short = _mm(128, 3072, 1024)  # 128 tokens: the weights' bytes and one wave whatever the split
    assert _time(short, "a100-40gb", split=4) > _time(short, "a100-40gb") / 2


def test_a_large_gemm_splits_about_linearly():
    op = _mm(16384, 16384, 16384)
    assert _time(op, "a100-40gb", split=4) == pytest.approx(_time(op, "a100-40gb") / 4, rel=0.05)


# ------------------------------------------------------------------ implicit GEMMs and attention


@pytest.mark.parametrize("x,w,stride", [((8, 64, 56, 56), (128, 64, 3, 3), 1), ((8, 256, 14, 14), (512, 256, 1, 1), 2),
                                        ((4, 3, 224, 224), (64, 3, 7, 7), 2), ((2, 64, 32, 32), (64, 16, 3, 3), 1)])
def test_implicit_gemms_carry_the_flop_counters_flops(x, w, stride):
    inp, weight = torch.empty(x, device="meta"), torch.empty(w, device="meta")
    groups = x[1] // w[1]
    out = torch.nn.functional.conv2d(inp, weight, stride=stride, padding=w[2] // 2, groups=groups)
    fwd = flop_registry[aten.convolution](inp, weight, None, [stride] * 2, [w[2] // 2] * 2, [1, 1], False, [0, 0],
                                          groups, out_val=out)
    probs = tiles._problems("convolution", (x, w), (tuple(out.shape),))
    assert 2 * sum(b * m * n * k for b, m, n, k in probs) == fwd
    if groups > 1:
        # flop_counter's weight-gradient formula transposes the whole weight and so counts a grouped
        # convolution's weight gradient groups times over; the implicit GEMMs do not
        return
    grad = torch.empty(out.shape, device="meta")
    bwd = flop_registry[aten.convolution_backward](grad, inp, weight, None, [stride] * 2, [w[2] // 2] * 2, [1, 1],
                                                   False, [0, 0], groups, [True, True, False],
                                                   out_val=(inp, weight, None))
    probs = tiles._problems("convolution_backward", (tuple(out.shape), x, w), (x, w))
    assert 2 * sum(b * m * n * k for b, m, n, k in probs) == bwd


def test_a_short_sequence_pays_a_whole_attention_block():
    blocks64, share64 = tiles.attention_grid("_scaled_dot_product_flash_attention", ((8, 16, 64, 64),) * 3)
    blocks128, _ = tiles.attention_grid("_scaled_dot_product_flash_attention", ((8, 16, 128, 64),) * 3)
    assert blocks64 == blocks128 == 8 * 16
    assert share64 == pytest.approx(2 / (8 * 16 * 1))  # each CTA does a 128-row block's work


def _lstm_ops(steps, batch, hidden=1024, layers=2, dtype=torch.float32):
    """A traced nn.LSTM's cuDNN calls (forward and backward) over ``steps`` x ``batch`` tokens."""
    from gpucast.graph.tracer import capture
    from gpucast.job import Job

    class Net(torch.nn.Module):   # a layer before the LSTM, so that its input needs a gradient
        def __init__(self):
            super().__init__()
            self.proj, self.lstm = torch.nn.Linear(hidden, hidden), torch.nn.LSTM(hidden, hidden, layers)

        def forward(self, x):
            return self.lstm(self.proj(x))

    job = Job.from_module(Net, lambda b: (torch.randn(steps, b, hidden),),
                          batch_size=batch, precision="fp32", loss_fn=lambda out, inputs: out[0].mean(),
                          name=f"tests.tiles.lstm{steps}")
    return [o for o in capture(job).ops if o.category == "rnn"]


def test_an_rnn_call_runs_its_time_steps_gemms_with_the_flops_flop_counter_counts():
    fwd, bwd = _lstm_ops(32, 64)
    for o in (fwd, bwd):
        probs = tiles.gemm_problems(o.op, o.shapes, o.out_shapes)
        assert sum(2 * b * m * n * k for b, m, n, k in probs) == o.flops
    # per layer: the input projection, then one recurrent GEMM of the batch's rows a time step
    probs = tiles.gemm_problems(fwd.op, fwd.shapes, fwd.out_shapes)
    assert len(probs) == 2 * (1 + 32) and probs.count((1, 64, 4 * 1024, 1024)) == 2 * 32


def test_the_same_tokens_over_more_time_steps_take_longer():
    # one recurrent GEMM a step over fewer rows, each with its own ramp and pointwise kernel: an LSTM over
    # 128 steps of 16 sequences is slower than over 16 steps of 128, for the same FLOPs
    from gpucast.graph.trace import MemoryReport as MR

    def seconds(ops):
        tr = Trace("t", "t", "train", "fp32", 1, ops, MR(0, 0, 0, "fwd", {}, {}), 0, 0, 0)
        return float(kernel_times(tr, get_gpu("h100"), "fp32", DEFAULT).time.sum())

    long, wide = _lstm_ops(128, 16), _lstm_ops(16, 128)
    assert sum(o.flops for o in long) == sum(o.flops for o in wide)
    assert seconds(long) > 1.5 * seconds(wide)


@pytest.mark.parametrize("gpu, tf32", [("h100", True), ("a100-80gb", True), ("v100-16gb", False)])
def test_a_float32_rnn_runs_on_tf32_where_cudnn_has_it(gpu, tf32):
    # cuDNN's RNN descriptor takes torch.backends.cudnn.allow_tf32 (aten/src/ATen/native/cudnn/RNN.cpp)
    from gpucast.estimate.kernels import math_peak

    spec = get_gpu(gpu)
    peak = math_peak(spec, "rnn", "float32", "fp32", DEFAULT, "rnn")
    want = spec.sustained_tflops("tf32" if tf32 else "fp32", tensor_cores=tf32) * 1e12
    assert peak == pytest.approx(want)
