"""Inference services with latency targets in the simulator: a mix's ``services`` entries, the
engine's lifetime and late-time accounting, the gpucast policy's latency rule, their metrics."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from typer.testing import CliRunner

import gpucast.cluster as cl
from gpucast.cluster import metrics, mixes
from gpucast.cluster.behaviour import Observation
from gpucast.cluster.policies.base import GpuOccupancy
from gpucast.cluster.policies.gpucast import GpucastPolicy
from gpucast.cluster.result import JobRecord
from gpucast.cluster.trace_formats import Trace, TraceJob

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

GiB = 1 << 30
GPU = "a100-80gb"


def _mix(tmp_path, services, name="serve"):
    d = {"name": name, "trace": "gavel:ee9e8c", "gpu": "v100-16gb", "target": {"median": 0.1},
         "workloads": [{"model": "mlp-small", "batch_size": [32, 256]}], "services": services}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_a_mix_adds_its_services_as_named(tmp_path):
    p = _mix(tmp_path, [{"id": "rn", "arrival_s": [0, 600], "duration_s": 7200, "latency_ms": 12,
                         "model": "resnet50", "batch_size": 16}])
    tr = cl.load_trace(str(p), limit=None)
    svc = [tj for tj in tr.jobs if tj.latency_s is not None]
    assert [(tj.job_id, tj.arrival_s, tj.duration_s, tj.gpus) for tj in svc] == [("rn-1", 0.0, 7200.0, 1),
                                                                                  ("rn-2", 600.0, 7200.0, 1)]
    assert all(tj.latency_s == pytest.approx(0.012) and dict(tj.fields)["mode"] == "infer" for tj in svc)
    assert any("2 service jobs (1 entries) named with their latency targets" in n for n in tr.notes)


@pytest.mark.parametrize("entry, words", [
    ({"model": "resnet50", "duration_s": 60}, "services[1].latency_ms: must be a positive number, got None"),
    ({"model": "resnet50", "latency_ms": 10}, "services[1].duration_s: must be a positive number"),
    ({"model": "resnet50", "duration_s": 60, "latency_ms": 10, "gpus": 2},
     "a service is a one-GPU inference job"),
    ({"model": "resnet50", "duration_s": 60, "latency_ms": 10, "mode": "train"},
     "a service is a one-GPU inference job"),
    ({"model": "resnet50", "duration_s": 60, "latency_ms": 10, "tpot_ms": 10},
     "services[1].tpot_ms: a mode infer service's target is latency_ms"),
    ({"model": "hf:llama", "duration_s": 60, "latency_ms": 10, "serve": {"engine": "vllm"}},
     "services[1].latency_ms: a mode serve service's target is tpot_ms"),
])
def test_bad_services_are_one_line(tmp_path, entry, words):
    p = _mix(tmp_path, [entry])
    with pytest.raises(mixes.MixError) as e:
        mixes.load(str(p))
    assert words in str(e.value) and "\n" not in str(e.value)


# A 1.1B Llama (TinyLlama's shape) served by vLLM at 4 requests a second, told a third of the GPU.
LLAMA_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
            "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}
SERVE = {"engine": "vllm", "input_len": 512, "output_len": 128, "request_rate": 4, "gpu_memory_utilization": 0.3}


def test_an_llm_deployment_is_a_service_whose_step_is_its_decode_iteration(tmp_path):
    """A ``serve`` group makes a service an LLM deployment: mode serve, its target tpot_ms, its step
    in the simulator the serving model's decode iteration under its load, its memory what its engine
    is told to take; alone on its GPU with no error it meets a target above its predicted TPOT."""
    import json

    import gpucast
    from gpucast.cluster.behaviour import Profile
    from gpucast.cluster.truth import Truth
    from gpucast.job import Job

    entry = {"id": "chat", "arrival_s": [0], "duration_s": 3600, "tpot_ms": 20, "model": "hf:llama",
             "hf_config": json.dumps(LLAMA_1B), "batch_size": 8, "precision": "bf16", "serve": SERVE}
    tr = cl.load_trace(str(_mix(tmp_path, [entry])), limit=None)
    (svc,) = [tj for tj in tr.jobs if tj.latency_s is not None]
    f = dict(svc.fields)
    assert f["mode"] == "serve" and svc.latency_s == pytest.approx(0.020)
    pred = gpucast.predict(Job.from_dict(f), GPU)
    beh = Truth(error_sigma=0, seed=0).behaviour(Profile.from_trace_job(svc), GPU)
    assert beh.step_time_s == pytest.approx(pred.step_time_s)
    assert beh.step_time_s == pytest.approx(pred.serving["tpot_s"], rel=0.2)  # a decode iteration ~ TPOT
    assert 0.25 * 80 * GiB < beh.memory_bytes < 0.4 * 80 * GiB  # the third of the GPU it was told
    run = cl.simulate(Trace("chat", [svc]), cl.ClusterSpec.homogeneous(GPU, 1), "gpucast", error_sigma=0)
    assert run.records[0].late_s == 0.0


def _trace(latency_s, lifetime=1000.0, train_at=100.0):
    svc = TraceJob("svc", 0.0, "resnet50", 16, 1, "fp32", None, lifetime, None,
                   tuple(sorted({"model": "resnet50", "batch_size": 16, "precision": "fp32", "mode": "infer"}.items())),
                   latency_s)
    train = TraceJob("train", train_at, "resnet50", 64, 1, "fp32", None, 500.0, None,
                     tuple(sorted({"model": "resnet50", "batch_size": 64, "precision": "fp32"}.items())))
    return Trace("svc", [svc, train])


def _solo_step():
    from gpucast.cluster.engine import Simulator
    from gpucast.cluster.truth import Truth

    tr = _trace(1.0)
    sim = Simulator(tr, cl.ClusterSpec.homogeneous(GPU, 1), cl.make_policy("gpucast"), Truth(error_sigma=0, seed=0))
    sim._prepare(sim.jobs[0])
    return sim.jobs[0].beh[GPU].step_time_s


def test_a_service_lives_its_lifetime_and_counts_its_late_time():
    """One GPU, a service with a target 1 % over its solo batch time, and a training job that
    arrives later: told to ignore targets, gpucast shares the GPU, and the service is late exactly
    while the two share it, yet ends when its lifetime does; told to respect them, it keeps the
    training job waiting until the service ends, and the service is never late."""
    target = _solo_step() * 1.01
    spec = cl.ClusterSpec.homogeneous(GPU, 1)
    loose = cl.simulate(_trace(target), spec, "gpucast", error_sigma=0, respect_latency=False)
    svc, train = loose.records
    assert svc.latency_target_s == target and svc.finish_s - svc.start_s == pytest.approx(1000.0)
    assert train.start_s == 100.0 and train.finish_s < 1000.0       # it shared the service's GPU
    assert svc.late_s == pytest.approx(train.finish_s - train.start_s)
    s = metrics.summarize(loose)
    assert s["services"] == 1 and s["service_wait_mean_s"] == 0.0
    assert s["service_slo_met_pct"] == pytest.approx(100.0 * (1.0 - (train.finish_s - train.start_s) / 1000.0))
    assert s["jobs_finished"] == 2 and s["jct_mean_s"] == pytest.approx(train.finish_s - train.arrival_s)
    kept = cl.simulate(_trace(target), spec, "gpucast", error_sigma=0)
    svc, train = kept.records
    assert svc.late_s == 0.0 and train.start_s == svc.finish_s == pytest.approx(1000.0)


def _obs(name, util, latency=None, step=0.01):
    return Observation(name, 16, 1, GPU, "prediction", util_pct=util, memory_bytes=2 * GiB, step_time_s=step,
                       gaps=2.0, mem_bound=0.3, latency_s=latency)


def test_the_policy_keeps_services_within_their_targets():
    svc = _obs("svc", 40.0, latency=0.0105)
    hot = _obs("hot", 95.0)
    gpu = GpuOccupancy(0, GPU, 80 * GiB, 0, (svc,))
    pol = GpucastPolicy()
    (s_svc, s_hot) = pol.predicted_slowdowns(gpu, hot)
    assert s_svc * 0.01 > 0.0105                                 # the hot job would make it late ...
    assert pol.score(gpu, hot) is None                           # ... so it may not join
    assert GpucastPolicy(respect_latency=False).score(gpu, hot) is not None
    assert pol.score(GpuOccupancy(0, GPU, 80 * GiB, 0, (hot,)), svc) is None      # nor the service it
    assert pol.score(GpuOccupancy(0, GPU, 80 * GiB), svc) == 0.0                  # alone: always
    roomy = _obs("svc", 40.0, latency=0.05)
    assert pol.score(GpuOccupancy(0, GPU, 80 * GiB, 0, (roomy,)), hot) is not None
    assert pol.score_key(svc) != pol.score_key(_obs("svc", 40.0))


def test_a_cautious_policy_reads_a_services_step_at_its_upper_end():
    """A service whose point step leaves room for a neighbour but whose told interval does not:
    the cautious policy (the default) keeps the neighbour away, an uncautious one lets it in."""
    hot = _obs("hot", 95.0)
    roomy = _obs("svc", 40.0, latency=0.05)
    sd = GpucastPolicy().predicted_slowdowns(GpuOccupancy(0, GPU, 80 * GiB, 0, (roomy,)), hot)[0]
    wide = replace(roomy, step_interval=(0.005, 0.05 / sd * 1.01))     # its upper end x slowdown: late
    gpu = GpuOccupancy(0, GPU, 80 * GiB, 0, (wide,))
    assert GpucastPolicy().score(gpu, hot) is None
    assert GpucastPolicy(cautious=False).score(gpu, hot) is not None
    assert GpucastPolicy().score_key(wide) != GpucastPolicy().score_key(roomy)


def test_service_metrics_from_records():
    def rec(i, late, served, target=0.01, start=0.0):
        return JobRecord(f"s{i}", "resnet50", 16, 1, 0.0, start, start + served, served, served, 0, 0, target, late)

    got = metrics.services([rec(0, 10.0, 100.0), rec(1, 0.0, 300.0, start=60.0),
                            JobRecord("t", "mlp-small", 32, 1, 0.0, 5.0, 50.0, 40.0, 45.0, 0, 0)])
    assert got == {"services": 2, "service_slo_met_pct": pytest.approx(100.0 * (1 - 10.0 / 400.0)),
                   "service_wait_mean_s": pytest.approx(30.0)}
    assert metrics.services([JobRecord("t", "mlp-small", 32, 1, 0.0, 5.0, 50.0, 40.0, 45.0, 0, 0)]) == {}


def test_the_cli_says_how_the_services_fared(tmp_path):
    from gpucast.cli import app

    p = _mix(tmp_path, [{"id": "rn", "arrival_s": [0, 0], "duration_s": 36000, "latency_ms": 12,
                         "model": "resnet50", "batch_size": 16}])
    r = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--limit", "40", "--gpus", "8", "--gpu-type", GPU,
                                 "--policies", "slot,gpucast"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "gpucast: 2 inference services met their latency targets" in out
