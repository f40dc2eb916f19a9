"""Sanity the physics demands of the analytic estimator (no fitted numbers: directions and regimes).

Each expectation has a reason independent of the code:
* a tiny CNN at batch 8 on an H100 issues ~hundreds of microsecond-scale kernels; eager
  PyTorch needs several microseconds of host time per op, so the GPU mostly waits;
* ResNet-50 at batch 128 on a T4 is ~1.6 TFLOP per step against 8 TFLOPS of FP32: hundreds of
  milliseconds of GPU work against a few milliseconds of dispatch: saturated;
* more samples per step add GPU work but not host work, so utilization cannot fall with batch;
* bf16 activations are half the bytes of fp32 ones.

These test the graph's physics on the GPU, so every job is benchmark-style (inputs already on
the GPU, one ``loss.item()`` per step: ``BENCH``); the data loader's and the loop's terms have
their own tests (``test_loader.py``).
"""

import pytest
import torch

import gpucast
from gpucast import Job
from gpucast.estimate import EstimatorConfig
from gpucast.surroundings import Data, Loop

BENCH = dict(data=Data(source="device"), loop=Loop.benchmark())


def _job(*args, **kw):
    return Job(*args, **{**BENCH, **kw})


def _job_from_module(*args, **kw):
    return Job.from_module(*args, **{**BENCH, **kw})


def _tiny_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, 10))


def _tiny_inputs(b):
    return (torch.randn(b, 3, 32, 32),)


def test_tiny_cnn_is_launch_bound_on_h100():
    p = gpucast.predict(_job_from_module(_tiny_cnn, _tiny_inputs, batch_size=8), "h100")
    assert p.bottleneck == "launch-bound"
    assert p.gpu_held_pct < 50                        # the kernels hold the GPU less than half the time
    assert p.gpu_util_pct >= p.gpu_held_pct           # NVML reads the short launch gaps as busy
    assert p.host_time_s > p.gpu_busy_s


def test_resnet50_b128_saturates_t4():
    p = gpucast.predict(_job("resnet50", batch_size=128), "t4")
    assert p.gpu_util_pct > 90
    assert p.bottleneck in ("compute-bound", "memory-bound")


@pytest.mark.parametrize("model", ["resnet18-cifar", "resnet50", "mobilenet-v2", "vgg16-cifar", "densenet121"])
def test_utilization_does_not_fall_with_batch(model):
    preds = [gpucast.predict(_job(model, batch_size=b), "a100-80gb") for b in (2, 4, 16, 64, 128)]
    held = [p.gpu_held_pct for p in preds]
    assert all(b >= a - 1e-6 for a, b in zip(held, held[1:])), held
    # NVML's reading may dip by a hair where a gap grows past the counter's tick, not more
    utils = [p.gpu_util_pct for p in preds]
    assert all(b >= a - 0.5 for a, b in zip(utils, utils[1:])), utils


@pytest.mark.parametrize("model", ["resnet18", "densenet121", "mobilenet-v2"])
def test_bf16_needs_less_activation_memory(model):
    # CNNs: every conv output is bf16 under autocast. (Transformers save less: LayerNorm,
    # softmax and the loss stay fp32 under CUDA autocast, so their savings are smaller. Nor does
    # vgg16-cifar at batch 8: its 134M weights dwarf the activations, and the bf16 copies autocast
    # saves for backward count as activations, so its peaks hold no fewer of them.)
    from gpucast.api import trace

    fp32 = trace(_job(model, batch_size=8))
    bf16 = trace(_job(model, batch_size=8, precision="amp-bf16"))
    assert bf16.memory.at_peak["activations"] < 0.8 * fp32.memory.at_peak["activations"]
    if fp32.memory.at_peak["activations"] > fp32.parameter_bytes:
        # Where activations dominate, the whole process needs less. (Where weights dominate it
        # can need more: autocast keeps a bf16 copy of every weight for the step.)
        p32 = gpucast.predict(_job(model, batch_size=8), "a100-80gb")
        p16 = gpucast.predict(_job(model, batch_size=8, precision="amp-bf16"), "a100-80gb")
        assert p16.memory_peak_bytes < p32.memory_peak_bytes


def test_intervals_contain_the_point():
    for gpu in ("k80", "v100-16gb", "h200"):
        p = gpucast.predict(_job("resnet18-cifar", batch_size=32), gpu)
        assert p.gpu_util_interval[0] <= p.gpu_util_pct <= p.gpu_util_interval[1]
        assert p.step_time_interval[0] <= p.step_time_s <= p.step_time_interval[1]
        assert p.memory_interval[0] <= p.memory_peak_bytes <= p.memory_interval[1]
        assert 0 <= p.gpu_util_pct <= 100


def test_faster_gpu_is_faster_on_a_big_job():
    steps = [gpucast.predict(_job("resnet50", batch_size=64), g).step_time_s for g in ("k80", "v100-16gb", "a100-80gb", "h100")]
    assert steps == sorted(steps, reverse=True)


def test_input_pipeline_makes_it_input_bound():
    base = gpucast.predict(_job("resnet18-cifar", batch_size=64), "a100-80gb")
    slow = gpucast.predict(_job("resnet18-cifar", batch_size=64, input_pipeline_s=10 * base.step_time_s), "a100-80gb")
    assert slow.bottleneck == "input-bound"
    assert slow.step_time_s == pytest.approx(10 * base.step_time_s)
    assert slow.gpu_util_pct < base.gpu_util_pct / 5


def test_data_parallel_adds_communication_not_less_time():
    one = gpucast.predict(_job("resnet50", batch_size=32), "t4")
    eight = gpucast.predict(_job("resnet50", batch_size=32, gpus=8), "t4")  # PCIe only: comm is exposed
    assert eight.step_time_s > one.step_time_s
    assert eight.memory_peak_bytes > one.memory_peak_bytes  # DDP gradient buckets


def test_inference_is_cheaper_than_training():
    train = gpucast.predict(_job("resnet50", batch_size=32), "a100-80gb")
    infer = gpucast.predict(_job("resnet50", batch_size=32, mode="infer"), "a100-80gb")
    assert infer.step_time_s < train.step_time_s / 2
    assert infer.memory_peak_bytes < train.memory_peak_bytes
    assert infer.flops == pytest.approx(train.flops / 3, rel=0.02)  # backward = 2x forward for convs


def test_oversized_job_does_not_fit():
    p = gpucast.predict(_job("llama-7b", batch_size=1, seq_len=256, optimizer="adamw"), "t4")
    assert not p.fits_in_memory
    assert any("out-of-memory" in n for n in p.notes)


def test_constants_are_overridable_and_documented():
    rows = EstimatorConfig.describe()
    assert all(r["source"] and r["unit"] for r in rows)
    slow_host = EstimatorConfig().replace(python_op_s=50e-6, engine_op_s=30e-6)
    job = _job("resnet18-cifar", batch_size=8)
    assert gpucast.predict(job, "h100", slow_host).step_time_s > gpucast.predict(job, "h100").step_time_s
    with pytest.raises(ValueError, match="unknown estimator constant"):
        EstimatorConfig().replace(no_such_constant=1)
