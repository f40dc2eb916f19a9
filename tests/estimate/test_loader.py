"""The data loader, the loop's habits and the stack as cost terms (gpucast.estimate.loader/step).

Each test states a direction or an equality that the physics implies, not a number the code
printed: a serial expensive loader starves the GPU, workers feed it until it saturates, pinned
asynchronous copies cost the host nothing, AMP shrinks GPU work but not host work, and the
benchmark-style job reproduces the model before these terms existed (predictions recorded from
that commit in data/legacy_predictions.json; that model costed every GPU at its datasheet peaks,
so the recorded rows are reproduced on the card without its sustained clock), within what the
kernel model of issue 37 moved.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import gpucast
from gpucast import Job
from gpucast.estimate.environment import Environment
from gpucast.surroundings import Data, Loop, Stack

LEGACY = json.loads((Path(__file__).parent / "data" / "legacy_predictions.json").read_text())


def _predict(job, gpu="a100-80gb", env=None, **kw):
    return gpucast.predict(job, gpu, env=env, **kw)


@pytest.mark.parametrize("row", LEGACY["rows"], ids=lambda r: f"{r['job']['model']}-{r['gpu']}")
def test_device_data_with_a_benchmark_loop_reproduces_the_model_before_surroundings(row):
    job = Job(**row["job"], data=Data(source="device"), loop=Loop.benchmark())
    # that model had no idle-kernel term and read utilization as busy / step (NVML's tick 0),
    # and no sustained (power-capped) clock: the T4 rows were costed at its boost-clock peaks
    gpu = dataclasses.replace(gpucast.hardware.get_gpu(row["gpu"]), sustained_clock_mhz=None)
    ex = gpucast.explain(job, gpu, env=Environment.default().replace(idle_kernel_s=0.0, nvml_tick_s=0.0))
    p = ex.prediction
    # Reproduced to 1e-12 until issue 37's kernel model (grids on the SMs, per-architecture achieved
    # fractions; gpucast.estimate.tiles/achieved): that model only adds what a partly filled grid loses
    # and moves the steady-state fractions (convolutions 0.65 -> 0.72 of peak for a full grid,
    # attention split into forward 0.66 / backward 0.52), so the GPU time stays within -15 %..+35 %
    # of the recorded one and the loader and loop still add nothing: the step is the kernels'
    # and the host's, as then. cuDNN's layout transposes around half-precision NCHW convolutions
    # (gpucast.graph.layouts, measured on our H200) are kernels that model never had: an AMP CNN's
    # GPU time up to +60 % (resnet18-cifar amp-fp16: 1.38x on the T4, 1.52x on the A100).
    # A cuDNN RNN's time steps now run their GEMMs one after another, each with its ramp and its
    # pointwise kernel's floor (gpucast.estimate.kernels, tiles._rnn): at 20 sequences of 35 steps on the
    # T4, which has no TF32 to speed the GEMMs up, the LSTM's GPU time is 1.6x the recorded one.
    amp_cnn = row["job"]["precision"].startswith("amp") and row["job"]["model"].startswith("resnet")
    rnn = row["job"]["model"].startswith("lstm")
    high = 1.6 if amp_cnn else 1.75 if rnn else 1.35
    assert 0.85 <= p.gpu_busy_s / row["gpu_busy_s"] <= high
    assert 0.85 <= p.step_time_s / row["step_time_s"] <= high
    assert p.gpu_util_pct == pytest.approx(row["gpu_util_pct"], abs=15 if amp_cnn else 12)
    # The tracker now holds an op's output live during the op, beside inputs freed right after
    # (gpucast.graph.memory): that can only add to the recorded peak; most for the LM's
    # vocabulary-wide logits and their gradient (lstm-lm-small +21 %).
    # The allocated peak now also holds the cuBLAS/cuBLASLt workspaces, which PyTorch >= 1.13
    # allocates through its caching allocator (gpucast.estimate.memory), as torch's own figure does.
    recorded = row["memory_allocated_peak_bytes"]
    tensors = p.memory_allocated_peak_bytes - ex.estimate.memory.breakdown["cublas_workspaces"]
    assert recorded <= tensors <= 1.25 * recorded


def test_a_serial_expensive_loader_is_input_bound_with_low_utilization():
    job = Job("resnet18-cifar", batch_size=128, data=Data(source="custom", per_sample_s=1e-3, num_workers=0))
    p = _predict(job)
    bench = _predict(job.with_(data=Data(source="device"), loop=Loop.benchmark()))
    assert p.bottleneck == "input-bound"
    assert p.gpu_util_pct < 20 < bench.gpu_util_pct
    # the loop pays the whole loader serially: 128 samples x 1 ms
    assert p.step_time_s > 0.128 > bench.step_time_s


def test_workers_raise_utilization_until_the_gpu_saturates():
    utils = []
    for w in (0, 1, 2, 4, 8, 16):
        job = Job("resnet50", batch_size=64, data=Data(source="images", num_workers=w),
                  stack=Stack(cpu_cores=64))
        utils.append(_predict(job).gpu_util_pct)
    # non-decreasing, up to the per-epoch start-up of more workers once the GPU is saturated
    assert all(b >= a - 0.5 for a, b in zip(utils, utils[1:])), utils
    assert utils[0] < 30 and utils[0] < utils[1] < utils[2] < utils[3], utils
    assert utils[-1] > 90 and abs(utils[-1] - utils[-2]) < 1.0, utils  # saturated: more workers no longer help


def test_workers_beyond_the_hosts_cores_do_not_help():
    few = _predict(Job("resnet50", batch_size=64, data=Data(source="images", num_workers=3), stack=Stack(cpu_cores=4)))
    many = _predict(Job("resnet50", batch_size=64, data=Data(source="images", num_workers=32), stack=Stack(cpu_cores=4)))
    assert many.step_time_s == pytest.approx(few.step_time_s)


def test_pageable_copies_cost_host_time_that_pinned_non_blocking_copies_do_not():
    base = dict(model="deeprec-autoencoder", batch_size=512)
    pageable = _predict(Job(**base, data=Data(source="memory", num_workers=4, pin_memory=False, non_blocking=False)))
    pinned = _predict(Job(**base, data=Data(source="memory", num_workers=4, pin_memory=True, non_blocking=True)))
    tr = gpucast.api.trace(Job(**base))
    gpu = gpucast.hardware.get_gpu("a100-80gb")
    env = Environment.default()
    # the pageable copy: the batch at the staged rate, on the host clock
    staged = tr.input_bytes / (gpu.host_link_gbs * 1e9 * 0.8 * env.pageable_copy_efficiency)
    assert pageable.host_time_s - pinned.host_time_s == pytest.approx(staged, rel=0.05)
    assert pageable.step_time_s > pinned.step_time_s


def test_sparse_samples_move_fewer_bytes_than_the_dense_inputs():
    dense = Job("deeprec-autoencoder", batch_size=512, data=Data(source="memory", num_workers=0))
    sparse = dense.with_(data=Data(source="memory", num_workers=0, sample_bytes=1_000))
    assert _predict(sparse).loader_time_s < _predict(dense).loader_time_s / 5


def test_the_cuda_context_grows_without_lazy_loading():
    lazy = _predict(Job("mlp-small", stack=Stack(lazy_loading=True)))
    eager = _predict(Job("mlp-small", stack=Stack(lazy_loading=False)))
    env = Environment.default()
    assert eager.memory_peak_bytes - lazy.memory_peak_bytes == env.cuda_context_eager_extra_bytes
    # PyTorch 1.x does not turn lazy loading on, nor does CUDA before 11.7: the eager context,
    # whose size is that of the CUDA build's tier (gpucast.estimate.memory.EAGER_CONTEXT_TIERS)
    context = lambda stack: gpucast.explain(Job("mlp-small", stack=stack)).estimate.memory.breakdown["cuda_context"]  # noqa: E731
    assert context(Stack(torch="1.13", cuda="11.7")) == context(Stack(cuda="11.4")) == \
        context(Stack(cuda="11.8", lazy_loading=False)) == env.cuda_context_lazy_bytes + env.cuda_context_eager_extra_cu11_bytes
    assert context(Stack(torch="2.1", cuda="11.8")) == context(Stack(lazy_loading=True))
    # torch's own allocated peak does not change with the context
    assert eager.memory_allocated_peak_bytes == lazy.memory_allocated_peak_bytes


def test_amp_lowers_the_utilization_of_a_host_bound_job():
    job = Job("resnet18-cifar", batch_size=128, data=Data(source="small-images", num_workers=0))
    fp32, amp = _predict(job), _predict(job.with_(precision="amp-fp16"))
    assert fp32.bottleneck == "input-bound"
    assert amp.gpu_busy_s < fp32.gpu_busy_s
    assert amp.gpu_util_pct < fp32.gpu_util_pct


def test_loop_habits_add_host_time_and_syncs():
    quiet = _predict(Job("mlp-small", data=Data(source="device"), loop=Loop(item_calls=1, progress_bar=False, log_every=0)))
    chatty = _predict(Job("mlp-small", data=Data(source="device"), loop=Loop(item_calls=4, progress_bar=True, log_every=1)))
    env = Environment.default()
    extra = 3 * env.item_s + env.progress_bar_s + env.log_line_s
    assert chatty.step_time_s - quiet.step_time_s == pytest.approx(extra, rel=1e-6)
    assert chatty.gpu_util_pct < quiet.gpu_util_pct


def test_no_item_call_lets_the_host_run_ahead_of_a_gpu_bound_step():
    synced = _predict(Job("resnet50", batch_size=128, data=Data(source="device"), loop=Loop(item_calls=1, log_every=0)))
    free = _predict(Job("resnet50", batch_size=128, data=Data(source="device"), loop=Loop(item_calls=0, log_every=0)))
    assert free.step_time_s < synced.step_time_s
    assert free.gpu_util_pct > synced.gpu_util_pct


def test_a_slower_host_slows_a_host_bound_job_but_not_a_gpu_bound_one():
    small = dict(model="mlp-small", data=Data(source="device"))
    assert _predict(Job(**small, stack=Stack(cpu_speed=0.5))).step_time_s > \
        1.5 * _predict(Job(**small, stack=Stack(cpu_speed=1.0))).step_time_s
    big = dict(model="resnet50", batch_size=128, data=Data(source="device"))
    assert _predict(Job(**big, stack=Stack(cpu_speed=0.5))).step_time_s == pytest.approx(
        _predict(Job(**big, stack=Stack(cpu_speed=1.0))).step_time_s, rel=0.02)


def test_old_pytorch_runs_the_optimizer_as_a_per_parameter_loop():
    new = gpucast.explain(Job("resnet18", optimizer="adam", stack=Stack(torch="2.4")))
    old = gpucast.explain(Job("resnet18", optimizer="adam", stack=Stack(torch="1.12")))
    optim_kernels = lambda ex: sum(o.kernels for o in ex.trace.ops if o.phase == "optim")  # noqa: E731
    n_params = new.trace.param_tensors
    # Adam's single-tensor path: ~6 kernels per parameter; foreach: a few per chunk of tensors
    assert optim_kernels(old) > 5 * n_params > n_params > optim_kernels(new)
    assert old.prediction.host_time_s > new.prediction.host_time_s


def test_cudnn_benchmark_speeds_up_convolutions_and_holds_more_workspace():
    on = _predict(Job("resnet50", batch_size=64, data=Data(source="device"), loop=Loop(cudnn_benchmark=True)))
    off = _predict(Job("resnet50", batch_size=64, data=Data(source="device"), loop=Loop(cudnn_benchmark=False)))
    assert on.gpu_busy_s < off.gpu_busy_s
    assert on.memory_peak_bytes > off.memory_peak_bytes


def test_a_run_window_average_includes_the_start_up():
    job = Job("resnet50", batch_size=64)
    steady = _predict(job)
    window = _predict(job, window_s=60)
    startup = Environment.default().startup_s
    assert window.gpu_util_pct == pytest.approx(steady.gpu_util_pct * (60 - startup) / 60, abs=0.02)
    assert window.util_basis.startswith("average over the first 60 s")
    with pytest.raises(ValueError, match="window_s"):
        _predict(job, window_s=0)


def test_the_input_bound_label_names_the_workers():
    job = Job("resnet50", batch_size=256, precision="amp-bf16", data=Data(source="images", num_workers=2))
    p = _predict(job, "h100")
    assert p.bottleneck == "input-bound"
    assert "workers" in p.bottleneck_reason
    assert p.loader_time_s > p.step_time_s  # two workers share more than one step's worth of work


def test_ram_resident_models_keep_their_gpu_bound_figures():
    """A GPU-bound job's typical script changes its step by little: ResNet-50 at batch 128 with
    its ImageNet loader stays within 5 % of the benchmark-style step on a V100."""
    typical = _predict(Job("resnet50", batch_size=128), "v100-16gb")
    bench = _predict(Job("resnet50", batch_size=128, data=Data(source="device"), loop=Loop.benchmark()), "v100-16gb")
    assert typical.step_time_s == pytest.approx(bench.step_time_s, rel=0.05)


def test_a_constants_file_takes_fields_of_both_classes(tmp_path):
    from gpucast.estimate import load_constants

    f = tmp_path / "c.yaml"
    f.write_text("python_op_s: 1.2e-5\nitem_s: 5.0e-4\nkernel_time_range: [0.9, 1.1]\n")
    cfg, env = load_constants(f)
    assert cfg.python_op_s == 1.2e-5 and cfg.kernel_time_range == (0.9, 1.1) and env.item_s == 5.0e-4
    assert env.item_s > Environment.default().item_s       # a slower .item() than the fitted one
    assert env.memory_sample_s == Environment.default().memory_sample_s  # the rest: the defaults in force
    job = Job("mlp-small", data=Data(source="device"), loop=Loop(item_calls=3))
    assert _predict(job, env=env).step_time_s > _predict(job).step_time_s
    (tmp_path / "bad.yaml").write_text("no_such_constant: 1\n")
    with pytest.raises(ValueError, match="no_such_constant"):
        load_constants(tmp_path / "bad.yaml")


def test_fitted_constants_say_where_they_come_from():
    rows = {r["name"]: r for r in Environment.describe()}
    fitted = [r for r in rows.values() if r["source"].startswith("fitted:")]
    assert fitted, "the packaged fit is missing"
    for r in fitted:
        assert "gpumemnet" in r["source"] or "gavel" in r["source"]
        assert r["name"] in Environment.fittable()  # only constants with a prior spread are fitted
    assert all(rows[n]["source"] for n in rows)
