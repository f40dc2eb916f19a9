"""End-to-end tests of the installed `gpucast` command line.

The CLI is a thin shell over the API, so a few real runs are enough. Each run is a fresh
process that imports torch and traces a model (10-20 s on a busy 2-core box), so every run this
file needs is started at once, in parallel, by one module fixture; each test then checks its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpucast.cli import DEMO_GPUS, DEMO_JOBS
from gpucast.job import Job

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

BIN = Path(sys.executable).parent / "gpucast"
CMD = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "gpucast.cli"]
REQUIRED_GPUS = {"k80", "p100", "v100-16gb", "v100-32gb", "t4", "a10", "l4", "rtx-3090", "rtx-4090",
                 "a100-40gb", "a100-80gb", "h100", "h200"}
BOTTLENECKS = {"compute-bound", "memory-bound", "launch-bound", "input-bound"}
TIMEOUT_S = 300

# A made-up GPU (no figure is a published fact): only the fields hardware.py requires, with
# the memory and L2 size given in the alternative units a spec file accepts.
SYNTHETIC_GPU_YAML = """\
name: synthetic-test-gpu
architecture: ampere
compute_capability: "8.6"
sm_count: 40
boost_clock_mhz: 1700
fp32_tflops: 20.0
fp16_tflops: 80.0
memory_gib: 24
memory_bandwidth_gbs: 500
l2_mib: 4
tdp_w: 200
"""
JOB_YAML = """\
model: resnet18-cifar
batch_size: 64
precision: amp-fp16
optimizer: adam
mode: train
input_pipeline_s: 0.002
"""


@dataclass
class Result:
    args: list
    rc: int
    stdout: str
    stderr: str
    seconds: float

    def __str__(self) -> str:  # shown when an assert on a Result fails
        return (f"gpucast {' '.join(map(str, self.args))} -> rc {self.rc} in {self.seconds:.1f} s\n"
                f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}")

    def json(self):
        assert self.rc == 0, str(self)
        return json.loads(self.stdout)


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "COLUMNS", "LINES")}
    env.update(NO_COLOR="1", TERM="dumb", PYTHONUNBUFFERED="1")
    return env


def _gpucast(args: list, cwd: Path) -> Result:
    t0 = time.perf_counter()
    p = subprocess.run(CMD + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=_env(),
                       timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    return Result(args, p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    out = {"dir": d, "gpu": d / "synthetic-gpu.yaml", "job": d / "job.yaml", "bad_yaml": d / "bad.yaml",
           "bad_json": d / "bad.json", "missing": d / "no-such-job.yaml"}
    out["gpu"].write_text(SYNTHETIC_GPU_YAML)
    out["job"].write_text(JOB_YAML)
    out["bad_yaml"].write_text("model: [resnet18-cifar\nbatch_size: 8\n")
    out["bad_json"].write_text('{"model": "resnet18-cifar", ')
    out["fed_job"] = d / "fed.yaml"
    out["fed_job"].write_text("model: resnet18-cifar\nbatch_size: 64\ndata:\n  source: small-images\n  num_workers: 0\n"
                              "loop:\n  item_calls: 3\nstack:\n  torch: 2.1\n  cpu_speed: 0.8\n")
    return out


def _runs(f: dict[str, Path]) -> dict[str, list]:
    """Every CLI run of this file, slowest first (they are started in this order)."""
    return {
        # slow: each imports torch and traces a model
        "demo": ["demo"],
        "predict": ["predict", "resnet18-cifar", "-b", "32", "--gpu", "t4", "--json"],
        # --job with a flag overriding it, two --gpu, one of them a user spec file
        "predict_job": ["predict", "mlp-small", "--job", f["job"], "-b", "16", "--gpu", "t4", "--gpu", f["gpu"],
                        "--json"],
        "explain_json": ["explain", "resnet18-cifar", "-b", "32", "--gpu", "t4", "--json"],
        "explain_table": ["explain", "mlp-small", "--gpu", "a100-80gb", "--mode", "infer", "--optimizer", "none"],
        # the surroundings: a job file with nested data/loop/stack, a flag over it, and --set
        "predict_fed": ["predict", "--job", f["fed_job"], "--set", "data.num_workers=4", "--json"],
        "predict_window": ["predict", "resnet18-cifar", "-b", "64", "--data", "device", "--set", "loop.item_calls=0",
                           "--window", "60", "--json"],
        # fast: listing, and bad input (refused before any capture)
        "zoo": ["zoo", "--json"],
        "zoo_table": ["zoo"],
        "gpus": ["gpus", "--json"],
        "gpus_spec": ["gpus", "--spec", f["gpu"], "--json"],
        "help": ["--help"],
        "err_model": ["predict", "resnet5", "--gpu", "t4", "--json"],
        "err_gpu": ["predict", "resnet18-cifar", "--gpu", "t4", "--gpu", "t5", "--json"],
        "err_precision": ["predict", "resnet18-cifar", "--precision", "fp4", "--json"],
        "err_batch0": ["predict", "resnet18-cifar", "-b", "0", "--json"],
        "err_gpus0": ["predict", "resnet18-cifar", "--gpus", "0"],
        "err_shape": ["predict", "resnet18-cifar", "--input-shape", "3,x"],
        "err_job_missing": ["predict", "--job", f["missing"], "--json"],
        "err_job_yaml": ["predict", "--job", f["bad_yaml"], "--json"],
        "err_job_json": ["explain", "--job", f["bad_json"], "--json"],
        "err_not_int": ["predict", "resnet18-cifar", "-b", "abc"],
        "err_markup": ["predict", "[/bold]", "--json"],
        "err_explain_gpu": ["explain", "resnet18-cifar", "--gpu", "nope-gpu"],
        "err_no_model": ["predict", "--gpu", "t4"],
        "err_set_value": ["predict", "resnet18-cifar", "--set", "data.num_workers=-1"],
        "err_set_field": ["predict", "resnet18-cifar", "--set", "loop.bogus=1"],
        "err_set_form": ["predict", "resnet18-cifar", "--set", "workers=2"],
        "err_stack": ["predict", "resnet18-cifar", "--set", "stack.torch=two"],
        "err_source": ["explain", "resnet18-cifar", "--data", "floppy"],
        "err_custom": ["predict", "resnet18-cifar", "--data", "custom"],
    }


@pytest.fixture(scope="module")
def cli(files):
    """name -> Future[Result]: all runs started together (the first test waits for what it needs)."""
    runs = _runs(files)
    workers = min(len(runs), 12)  # slow runs first, fast ones alongside; ~1 GiB per slow run
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(_gpucast, args, files["dir"]) for name, args in runs.items()}
        yield {name: fut.result for name, fut in futures.items()}


# ----------------------------------------------------------------------------- listings

def test_zoo_json(cli):
    entries = cli["zoo"]().json()
    assert len(entries) >= 40
    assert len({e["name"] for e in entries}) == len(entries)
    for e in entries:
        for key in ("name", "family", "source", "default_input"):
            assert isinstance(e[key], str) and e[key], (key, e)
    # every listed name is one a Job accepts
    for e in entries:
        Job(e["name"])
    # each workload shows the typical script's loader and loop (gpucast.zoo.recipes)
    by_name = {e["name"]: e for e in entries}
    assert by_name["resnet50"]["data"]["source"] == "images" and by_name["resnet50"]["data"]["num_workers"] == 4
    assert by_name["resnet18-cifar"]["data"]["source"] == "small-images"
    assert by_name["bert-base"]["data"]["source"] == "tokens"
    assert by_name["a3c-atari"]["data"]["source"] == "environment"
    assert all(e["data"] and e["loop"] and e["script"] for e in entries)


def test_zoo_table(cli):
    r = cli["zoo"]()
    t = cli["zoo_table"]()
    assert t.rc == 0, str(t)
    names = [e["name"] for e in r.json()]
    assert all(name in t.stdout for name in names)


def test_gpus_json(cli):
    specs = cli["gpus"]().json()
    names = {s["name"] for s in specs}
    assert len(specs) >= 13 and REQUIRED_GPUS <= names
    for s in specs:
        assert s["memory_bytes"] > 0 and s["fp32_tflops"] > 0 and s["memory_bandwidth_gbs"] > 0


def test_gpus_with_user_spec(cli):
    specs = {s["name"]: s for s in cli["gpus_spec"]().json()}
    assert REQUIRED_GPUS <= set(specs)
    mine = specs["synthetic-test-gpu"]
    assert mine["memory_bytes"] == 24 * 2**30 and mine["l2_bytes"] == 4 * 2**20
    assert mine["compute_capability"] == [8, 6] and mine["display_name"] == "synthetic-test-gpu"


def test_help(cli):
    r = cli["help"]()
    assert r.rc == 0, str(r)
    for command in ("predict", "explain", "zoo", "gpus", "demo"):
        assert command in r.stdout


# ----------------------------------------------------------------------------- predict

def _check_prediction(p: dict, gpu: str, job: Job) -> None:
    assert p["gpu"] == gpu
    assert p["job"] == job.to_dict() and p["job_key"] == job.key
    assert 0 <= p["gpu_util_pct"] <= 100
    assert p["memory_peak_bytes"] > 0 and p["step_time_s"] > 0
    for point, interval in (("gpu_util_pct", "gpu_util_interval"), ("memory_peak_bytes", "memory_interval"),
                            ("step_time_s", "step_time_interval")):
        lo, hi = p[interval]
        assert lo <= p[point] <= hi, (point, p[point], p[interval])
    lo, hi = p["gpu_util_interval"]
    assert 0 <= lo and hi <= 100
    assert p["bottleneck"] in BOTTLENECKS
    assert isinstance(p["model_version"], str) and p["model_version"]
    assert 0 < p["gpu_busy_s"] <= p["step_time_s"] * (1 + 1e-9)
    assert p["flops"] > 0 and p["bytes"] > 0 and p["kernels"] > 0


def test_predict_json(cli):
    p = cli["predict"]().json()
    assert isinstance(p, dict)  # one GPU: one object, not a list
    _check_prediction(p, "t4", Job("resnet18-cifar", batch_size=32))
    assert p["fits_in_memory"] is True


def test_predict_job_file_two_gpus_and_user_spec(cli):
    preds = cli["predict_job"]().json()
    assert isinstance(preds, list) and [p["gpu"] for p in preds] == ["t4", "synthetic-test-gpu"]
    # the file's fields, with the model and -b given on the command line overriding the file's
    job = Job("mlp-small", batch_size=16, precision="amp-fp16", optimizer="adam", mode="train",
              input_pipeline_s=0.002)
    for p in preds:
        _check_prediction(p, p["gpu"], job)
    # same job, different hardware: same graph, different GPU time
    t4, mine = preds
    assert t4["flops"] == mine["flops"] and t4["kernels"] == mine["kernels"]
    assert t4["gpu_busy_s"] != mine["gpu_busy_s"]
    # a 2 ms input pipeline feeding a tiny MLP: no step is shorter than it, and it is the bottleneck
    for p in preds:
        assert p["step_time_s"] >= 0.002 and p["bottleneck"] == "input-bound", p


# ----------------------------------------------------------------------------- explain

def test_explain_json(cli):
    ex = cli["explain_json"]().json()
    p = ex["prediction"]
    _check_prediction(p, "t4", Job("resnet18-cifar", batch_size=32))
    rows = ex["time_breakdown"]
    assert rows and {"fwd", "bwd", "optim"} <= {r["phase"] for r in rows}
    for r in rows:
        assert {"phase", "category", "ops", "kernels", "flops", "bytes", "gpu_time_s"} <= set(r)
        assert r["ops"] > 0 and r["gpu_time_s"] >= 0
    # the breakdown accounts for the whole prediction, nothing more or less
    assert sum(r["ops"] for r in rows) == p["ops"]
    assert sum(r["kernels"] for r in rows) == p["kernels"]
    assert sum(r["flops"] for r in rows) == p["flops"]
    assert sum(r["gpu_time_s"] for r in rows) == pytest.approx(p["gpu_busy_s"], rel=1e-6)
    assert sum(ex["memory_breakdown"].values()) == p["memory_peak_bytes"]
    assert ex["peak_phase"] in {r["phase"] for r in rows}
    assert ex["uncosted_ops"] == p["uncosted_ops"]


def test_explain_table(cli):
    r = cli["explain_table"]()
    assert r.rc == 0, str(r)
    out = r.stdout
    assert "mlp-small" in out and "a100-80gb" in out
    assert "GPU time by phase and op category" in out and "Memory at the peak" in out
    assert "uncosted" in out or "every op had a cost rule" in out
    assert "optim" not in out and "bwd" not in out  # inference without an optimizer


def test_predict_with_surroundings_from_a_file_and_flags(cli):
    p = cli["predict_fed"]().json()
    sur = p["surroundings"]
    assert sur["data"] == {**sur["data"], "source": "small-images", "num_workers": 4}  # --set over the file's 0
    assert sur["loop"]["item_calls"] == 3 and sur["stack"]["torch"] == "2.1" and sur["stack"]["cpu_speed"] == 0.8
    assert p["job"]["data"] == {"source": "small-images", "num_workers": 4}
    assert p["loader_time_s"] > 0


def test_predict_a_run_window(cli):
    p = cli["predict_window"]().json()
    assert p["util_basis"].startswith("average over the first 60 s")
    assert p["surroundings"]["data"]["source"] == "device" and p["loader_time_s"] == 0


# ----------------------------------------------------------------------------- bad input

def _assert_error(r: Result, *needles: str) -> str:
    assert r.rc == 2, str(r)
    assert r.stdout == "", str(r)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), str(r)
    for needle in needles:
        assert needle in lines[0], (needle, str(r))
    return lines[0]


@pytest.mark.parametrize("name,needles", [
    ("err_model", ("'model'", "resnet5", "did you mean")),
    ("err_gpu", ("'t5'", "did you mean t4")),  # a valid first --gpu does not leave half an answer
    ("err_explain_gpu", ("'nope-gpu'",)),
    ("err_precision", ("'precision'", "fp4")),
    ("err_batch0", ("'batch_size'",)),  # 0 used to fall back silently to the default of 32
    ("err_gpus0", ("'gpus'",)),
    ("err_shape", ("'input_shape'", "3,x")),
    ("err_job_missing", ("no-such-job.yaml",)),
    ("err_job_yaml", ("bad.yaml",)),
    ("err_job_json", ("bad.json",)),
    ("err_not_int", ("--batch-size",)),  # a usage error typer catches: one line too, not a box
    ("err_markup", ("[/bold]",)),  # user text is printed literally, never as rich markup
    ("err_no_model", ("gpucast zoo", "--job")),
    ("err_set_value", ("'data.num_workers'", "-1")),
    ("err_set_field", ("'loop.bogus'", "item_calls")),
    ("err_set_form", ("--set", "workers=2")),
    ("err_stack", ("'stack.torch'", "two")),
    ("err_source", ("'data.source'", "floppy", "small-images")),
    ("err_custom", ("'data.per_sample_s'", "custom")),
])
def test_bad_input_is_one_error_line_and_exit_2(cli, name, needles):
    _assert_error(cli[name](), *needles)


# ----------------------------------------------------------------------------- demo

def test_demo(cli, record_property):
    r = cli["demo"]()
    record_property("demo_seconds", round(r.seconds, 1))
    assert r.rc == 0, str(r)
    assert len(DEMO_GPUS) == 2 and all(gpu in r.stdout for gpu in DEMO_GPUS)
    assert all(model in r.stdout for model, _, _ in DEMO_JOBS)
    assert "not measurements" in r.stdout  # analytic numbers are never labelled as measured
