"""runner: real small zoo jobs on the CPU (device="cpu"), NVML from the FakeNvml test double.

The step times here are CPU times of real runs; the NVML columns are the fake's scripted values
(synthetic), which is what these tests check they are summarized from.
"""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch
from fakes import FakeNvml

from gpucast import Job
from gpucast.job import JobError
from gpucast.profile.nvml import GpuUnavailable
from gpucast.profile.runner import FAULT_ENV, PIPELINE_QUEUE_DEPTH, RunSpec, run_job
from gpucast.profile.step import SETTLE_MAX_S, Step
from gpucast.profile.schema import COLUMNS

FAST = dict(device="cpu", warmup_steps=1, window_s=0.15, min_window_steps=3, max_window_steps=50)


def _ordered(row):
    assert row["step_time_p5_s"] <= row["step_time_p50_s"] <= row["step_time_p95_s"]
    assert 0 < row["step_time_p5_s"] and row["step_time_std_s"] >= 0


def test_run_job_mlp_fills_every_column_with_sane_values():
    pid = os.getpid()
    fake = FakeNvml(util=(40,), mem_used=(3 << 30,), processes={pid: 700 << 20}, sm_clock=1800, power=300.0)
    spec = RunSpec(Job("mlp-small", batch_size=16), **FAST)
    row = run_job(spec, backend=fake)
    assert set(row) == set(COLUMNS)
    json.dumps(row, allow_nan=False)  # JSON-serialisable, no NaN
    assert row["status"] == "ok" and row["error"] is None and row["kind"] == "solo"
    assert spec.min_window_steps <= row["window_steps"] <= spec.max_window_steps
    assert row["window_s"] > 0 and row["duration_s"] >= row["window_s"]
    _ordered(row)
    # NVML summary: the fake's scripted (synthetic) readings
    assert row["util_mean_pct"] == row["util_p5_pct"] == row["util_p95_pct"] == 40.0
    assert row["util_samples"] >= 1
    assert row["mem_used_max_bytes"] == 3 << 30 and row["proc_mem_max_bytes"] == 700 << 20
    assert row["sm_clock_mean_mhz"] == 1800.0 and row["power_mean_w"] == 300.0
    assert row["sampler_hz"] > 0
    # provenance
    assert row["gpu_model"] == "NVIDIA H200" and row["gpu_name"] == "h200"
    assert row["gpu_memory_total_bytes"] == fake.memory_total() and row["driver_version"] == "570.00"
    assert row["torch_version"] == torch.__version__ and row["gpucast_version"]
    assert row["host_cpu"] and row["started_at"].endswith("Z")
    assert row["job_key"] == spec.job.key and Job.from_dict(json.loads(row["job_json"])) == spec.job
    assert (row["model"], row["batch_size"], row["precision"], row["mode"], row["optimizer"]) == \
        ("mlp-small", 16, "fp32", "train", "sgd")
    assert row["warmup_steps"] == 1 and row["input_pipeline_s"] == 0.0
    # CPU: no torch.cuda memory statistics
    assert row["torch_max_allocated_bytes"] is None and row["torch_max_reserved_bytes"] is None
    assert fake.closed is False  # the caller's backend is the caller's


def test_util_is_summarized_over_the_window_only():
    # a cycling script: the window's samples come from it, so the mean lies within its range
    fake = FakeNvml(util=(10, 20, 30), cycle=True)
    row = run_job(RunSpec(Job("mlp-small", batch_size=8), **{**FAST, "window_s": 0.3}), backend=fake)
    assert 10 <= row["util_p5_pct"] <= row["util_p50_pct"] <= row["util_p95_pct"] <= 30
    assert row["util_samples"] < fake.calls["utilization_gpu"]  # the run's samples are more than the window's


def test_resnet18_cifar_tiny_batch_trains():
    job = Job("resnet18-cifar", batch_size=2, input_shape=(3, 16, 16))  # small images: a fast CPU test
    row = run_job(RunSpec(job, device="cpu", warmup_steps=1, window_s=0.01, min_window_steps=2,
                          max_window_steps=2), backend=FakeNvml())
    assert row["status"] == "ok" and row["window_steps"] == 2 and row["input_shape"] == "3,16,16"
    _ordered(row)


def test_window_respects_min_and_max_steps():
    job = Job("mlp-small", batch_size=4)
    capped = run_job(RunSpec(job, device="cpu", warmup_steps=0, window_s=60, min_window_steps=1, max_window_steps=4))
    assert capped["window_steps"] == 4
    floor = run_job(RunSpec(job, device="cpu", warmup_steps=0, window_s=1e-9, min_window_steps=6, max_window_steps=9))
    assert floor["window_steps"] == 6
    # no backend on the CPU: the NVML columns are null, not invented
    assert floor["util_mean_pct"] is None and floor["gpu_model"] is None and floor["sampler_hz"] is None


def test_input_pipeline_makes_steps_at_least_that_long():
    job = Job("mlp-small", batch_size=8, input_pipeline_s=0.04)
    row = run_job(RunSpec(job, device="cpu", warmup_steps=2, window_s=0.3, min_window_steps=8))
    assert row["status"] == "ok" and row["input_pipeline_s"] == 0.04
    # A floor the loader's sleeps set, whatever the load (nothing here can make it faster): the
    # window's n steps took n batches; at most the queue's depth, the batch the producer held and
    # the one it was making were not made inside the window, and the producer makes one batch at a
    # time, sleeping until 0.04 s after it began. So the window (first step's start to the last
    # one's end, gaps between steps included) lasts at least 0.04 s for each other batch. No single
    # step's time is asserted (a slow step lets the queue refill, the next ones drain it).
    n = row["window_steps"]
    assert n >= 8
    assert row["window_s"] >= 0.04 * (n - PIPELINE_QUEUE_DEPTH - 2)


def test_infer_and_amp_modes_run():
    for job in (Job("mlp-small", batch_size=8, mode="infer", optimizer="none"),
                Job("mlp-small", batch_size=8, precision="amp-bf16", optimizer="adamw"),
                Job("mlp-small", batch_size=8, precision="amp-fp16")):
        row = run_job(RunSpec(job, **FAST))
        assert row["status"] == "ok" and row["precision"] == job.precision and row["mode"] == job.mode


def test_step_matches_the_predictor_step():
    sgd = Step(Job("mlp-small", batch_size=4), torch.device("cpu"))
    assert isinstance(sgd.optimizer, torch.optim.SGD)
    assert sgd.optimizer.defaults["momentum"] == 0.9 and sgd.optimizer.defaults["foreach"] is True
    assert sgd.scaler is None and sgd.model.training
    assert all(t.device.type == "cpu" for t in sgd.inputs)
    w0 = next(sgd.model.parameters()).detach().clone()
    sgd()
    p = next(sgd.model.parameters())
    assert not torch.equal(p.detach(), w0), "the optimizer stepped"
    assert p.grad is None, "zero_grad(set_to_none=True)"
    amp = Step(Job("mlp-small", batch_size=4, precision="amp-fp16", optimizer="adam"), torch.device("cpu"))
    assert isinstance(amp.optimizer, torch.optim.Adam) and amp.scaler is not None
    infer = Step(Job("mlp-small", batch_size=4, mode="infer"), torch.device("cpu"))
    assert infer.optimizer is None and not infer.model.training


def test_tf32_is_set_for_the_run_and_restored():
    seen = []

    def loss_fn(out, inputs):
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        return out.float().pow(2).mean()

    job = Job.from_module(lambda: torch.nn.Linear(4, 2), lambda b: (torch.randn(b, 4),), batch_size=2,
                          precision="tf32", loss_fn=loss_fn)
    before = torch.backends.cuda.matmul.allow_tf32
    run_job(RunSpec(job, device="cpu", warmup_steps=0, window_s=1e-9, min_window_steps=1))
    assert seen and all(seen) and torch.backends.cuda.matmul.allow_tf32 == before


def test_first_step_fault_hook_raises_oom(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "oom")
    with pytest.raises(torch.cuda.OutOfMemoryError):
        run_job(RunSpec(Job("mlp-small", batch_size=2), **FAST))
    monkeypatch.setenv(FAULT_ENV, "oom@1")  # another slot's fault: this run is unaffected
    assert run_job(RunSpec(Job("mlp-small", batch_size=2), **FAST))["status"] == "ok"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_missing_cuda_raises_gpu_unavailable_in_one_line():
    with pytest.raises(GpuUnavailable) as info:
        run_job(RunSpec(Job("mlp-small", batch_size=2)))  # device="cuda" is the default
    msg = str(info.value)
    assert msg and "\n" not in msg and "cuda" in msg.lower()


def test_runspec_json_round_trip_and_validation():
    spec = RunSpec(Job("resnet18-cifar", batch_size=3, input_shape=(3, 16, 16), precision="amp-bf16"),
                   warmup_steps=2, window_s=1.5, device="cpu", start_at=123.0)
    assert RunSpec.from_dict(json.loads(spec.to_json())) == spec
    with pytest.raises(ValueError):
        RunSpec.from_dict({**spec.to_dict(), "bogus": 1})
    with pytest.raises(ValueError):
        RunSpec(Job("mlp-small"), min_window_steps=5, max_window_steps=4)
    with pytest.raises(ValueError):
        RunSpec(Job("mlp-small"), device="tpu")
    module_job = Job.from_module(lambda: torch.nn.Linear(2, 2), lambda b: (torch.randn(b, 2),), batch_size=2)
    with pytest.raises(JobError, match="module job"):
        RunSpec(module_job).to_dict()


def _gated_step(hold_from: int, clock):
    """A step whose emulated loader is paced by a gate, not wall time: it prefetches batches
    ``0 .. hold_from - 1`` at once, then makes the next only after a step found its queue empty
    (``Pipeline.starved``), or never if ``hold_from`` is None. ``full`` is set once the queue
    holds its depth (the producer then holds one more batch)."""
    full = threading.Event()
    step = None

    def pace(i, rest_s):
        if i == PIPELINE_QUEUE_DEPTH:  # batches 0 .. depth-1 are in the queue
            full.set()
        if hold_from is not None and i >= hold_from:
            p = step.pipeline  # set: batch hold_from is only built after a step took one
            while not (p.starved.wait(0.05) or p.stopped.is_set()):
                pass
        elif hold_from is None and i > PIPELINE_QUEUE_DEPTH:
            step.pipeline.stopped.wait()

    step = Step(Job("mlp-small", batch_size=8, input_pipeline_s=0.1), torch.device("cpu"),
                pace=pace, clock=clock)
    assert full.wait(60)  # a bounded wait for the producer thread (any load), nothing timed
    assert step.pipeline.queue.qsize() == PIPELINE_QUEUE_DEPTH
    return step


def test_settle_drains_the_loaders_prefetched_backlog():
    # The emulated loader fills its queue while the model is built and warmed up; those batches
    # are not steady state. settle() steps until a step had to wait for its batch. The loader is
    # held at a gate after its backlog (depth + the batch it holds), and settle's time bound reads
    # a clock that does not move, so the outcome does not depend on the machine's speed or load.
    backlog = PIPELINE_QUEUE_DEPTH + 1
    step = _gated_step(backlog, clock=lambda: 0.0)
    try:
        n = step.settle()
        assert step.pipeline.waited
        # it stepped through the queued batches; the step that waited was the one after the
        # backlog, or the one taking the held batch if the producer had not queued it yet
        assert backlog <= n <= backlog + 1
        assert step.pipeline.error is None
    finally:
        step.close()


def test_settle_stops_at_its_time_bound():
    # a loader that never runs dry within the bound: settle() stops at SETTLE_MAX_S of its clock
    reads = iter(range(100))
    step = _gated_step(None, clock=lambda: 0.4 * SETTLE_MAX_S * next(reads))
    try:
        n = step.settle()   # the clock reads 0, 0.4, 0.8 of the bound (a step each), then 1.2: stop
        assert n == 2 and not step.pipeline.waited
    finally:
        step.close()
