"""`gpucast profile` and `gpucast data`.

The dataset these tests read is a synthetic test fixture written with the Dataset API: every
row says so in its suite name (``synthetic-test-fixture``); its numbers are made up, not
measurements. No test here has a GPU: `gpucast profile` is checked for its one-line refusal.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucast.cli import app
from gpucast.cli.data import compare_rows, summarize
from gpucast.job import Job
from gpucast.profile.dataset import Dataset, config_id
from gpucast.profile.nvml import GpuUnavailable, open_backend

FIXTURE = "synthetic-test-fixture"
BIN = Path(sys.executable).parent / "gpucast"


def _has_gpu() -> bool:
    try:
        open_backend().close()
        return True
    except GpuUnavailable:
        return False


no_gpu = pytest.mark.skipif(_has_gpu(), reason="this machine has an NVIDIA GPU")


def _row(job: Job, gpu_name, status="ok", kind="solo", **values) -> dict:
    gpu_model = {"h200": "NVIDIA H200", None: "gpucast fake GPU"}[gpu_name]
    row = dict(run_id=f"{job.model}-{job.batch_size}-{status}-{kind}", suite=FIXTURE, kind=kind, slot=0,
               status=status, gpu_name=gpu_name, gpu_model=gpu_model, job_key=job.key, job_json=job.to_json(),
               model=job.model, batch_size=job.batch_size, precision=job.precision, mode=job.mode,
               optimizer=job.optimizer, config_id=config_id(job.key, gpu_model, "solo"))
    row.update(values)
    return row


MLP = Job(model="mlp-small", batch_size=32)
CIFAR = Job(model="resnet18-cifar", batch_size=8, precision="amp-bf16")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fixture") / "synthetic-dataset"
    ds = Dataset(root)
    ds.append([_row(MLP, "h200", step_time_mean_s=0.0012, util_mean_pct=20.0, proc_mem_max_bytes=900 << 20)])
    ds.append([_row(CIFAR, "h200", step_time_mean_s=0.0080, util_mean_pct=55.0)])  # memory not attributed
    ds.append([_row(MLP, None, step_time_mean_s=0.0100, util_mean_pct=60.0)])  # GPU not in the catalog
    ds.append([_row(Job(model="llama-1b", batch_size=64), "h200", status="oom", error="OutOfMemoryError: x")])
    ds.append([_row(MLP, "h200", kind="colocated", step_time_mean_s=0.002, util_mean_pct=40.0,
                    partners=json.dumps([CIFAR.key]))])
    return root


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _one_error_line(result, start="error: "):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), result.stderr
    return lines[0]


# ------------------------------------------------------------------------------------- data show
def test_show_table(dataset):
    r = invoke("data", "show", dataset)
    assert r.exit_code == 0, r.stderr
    assert "5 measured runs" in r.stdout
    for text in ("mlp-small", "resnet18-cifar", "llama-1b", "oom", "coloc[0]", "h200", "gpucast fake GPU", FIXTURE,
                 "1.20", "0.88"):  # 1.2 ms; 900 MiB = 0.88 GiB
        assert text in r.stdout, text


def test_show_json_and_status_filter(dataset):
    r = invoke("data", "show", dataset, "--json", "--status", "ok")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 4 and {x["status"] for x in rows} == {"ok"}
    r = invoke("data", "show", dataset, "--json", "--status", "oom")
    assert [x["model"] for x in json.loads(r.stdout)] == ["llama-1b"]
    _one_error_line(invoke("data", "show", dataset, "--status", "fine"))


def test_show_reads_files_and_several_paths(dataset, tmp_path):
    part = Dataset(dataset).parts()[0]
    r = invoke("data", "show", part, dataset, "--json")
    assert len(json.loads(r.stdout)) == 6


def test_show_missing_and_empty(tmp_path):
    r = invoke("data", "show", tmp_path / "nope")
    assert r.exit_code == 2
    assert "nope" in _one_error_line(r)
    r = invoke("data", "show", tmp_path)
    assert r.exit_code == 0 and r.stdout.strip() == "no rows"
    r = invoke("data", "compare", tmp_path)
    assert r.exit_code == 0 and r.stdout.strip() == "no rows"


def test_default_path_is_data_measurements(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke("data", "show")
    assert r.exit_code == 2 and "data/measurements" in _one_error_line(r)
    (tmp_path / "data" / "measurements").mkdir(parents=True)
    (tmp_path / "data" / "measurements" / "README.md").write_text("no measurements yet\n")
    r = invoke("data", "show")
    assert r.exit_code == 0 and r.stdout.strip() == "no rows"


# ------------------------------------------------------------------------------------- data compare
def test_compare(dataset):
    r = invoke("data", "compare", dataset, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    recs = out["records"]
    # only ok solo rows on a catalog GPU: the fake-GPU row, the OOM and the co-located row are not compared
    assert [(x["model"], x["gpu"]) for x in recs] == [("mlp-small", "h200"), ("resnet18-cifar", "h200")]
    assert any("gpucast fake GPU" in n and "not in the GPU catalog" in n for n in out["notes"])
    assert any("without NVML process memory" in n for n in out["notes"])
    mlp = recs[0]
    assert mlp["step_time_error_pct"] == pytest.approx(
        100 * (mlp["step_time_predicted_s"] - 0.0012) / 0.0012)
    assert mlp["util_error_pts"] == pytest.approx(mlp["util_predicted_pct"] - 20.0)
    assert recs[1]["memory_measured_bytes"] is None and recs[1]["memory_error_pct"] is None
    s = out["summary"]
    rmsle = math.sqrt(sum((math.log(1 + x["util_predicted_pct"] / 100) - math.log(1 + x["util_measured_pct"] / 100))
                          ** 2 for x in recs) / 2)
    assert s["util_rmsle"] == pytest.approx(rmsle)
    assert (s["n_step"], s["n_memory"], s["n_util"]) == (2, 1, 2)
    assert s["step_time_mdape_pct"] == pytest.approx(
        (abs(recs[0]["step_time_error_pct"]) + abs(recs[1]["step_time_error_pct"])) / 2)

    table = invoke("data", "compare", dataset)
    assert table.exit_code == 0
    assert "measured vs predicted (2 ok solo runs)" in table.stdout and "RMSLE" in table.stdout


def test_summary_of_nothing():
    s = summarize([])
    assert s["rows"] == 0 and s["util_rmsle"] is None and s["step_time_mdape_pct"] is None


def test_compare_rows_reports_unpredictable_rows():
    def predict(job, gpu):
        raise ValueError("cannot trace\nsecond line")

    recs, notes = compare_rows([_row(MLP, "h200", step_time_mean_s=0.001)], predict=predict)
    assert recs == [] and len(notes) == 1 and "cannot trace second line" in notes[0]


def test_compare_predicts_the_job_as_the_harness_ran_it():
    """The harness feeds synthetic tensors already on the GPU and reads the loss once a step
    (gpucast.profile.step); a ResNet-50 left to its workload's typical loader would be predicted at
    the pace of ImageNet JPEG decoding instead, which the run never had."""
    from gpucast.profile.spec import as_run
    from gpucast.surroundings import Data, Stack

    seen = []

    def predict(job, gpu):
        seen.append(job)
        raise ValueError("stop here")

    job = Job(model="resnet50", batch_size=256)
    compare_rows([_row(job, "h200", step_time_mean_s=0.05)], predict=predict, cpu_speed=0.4)
    ran = seen[0]
    assert ran.data.source == "device" and ran.loop.item_calls == 1 and ran.loop.progress_bar is False
    assert ran.loop.cudnn_benchmark is False and ran.stack.cpu_speed == 0.4
    # a job's own fields win: its loader settings keep their source unset -> device; its host speed stays
    own = as_run(Job(model="resnet50", batch_size=256, data=Data(num_workers=2), stack=Stack(cpu_speed=2.0)), 0.4)
    assert own.data.num_workers == 2 and own.data.source == "device" and own.stack.cpu_speed == 2.0
    from gpucast.api import predict as real
    typical = real(Job(model="resnet50", batch_size=256), "h200")
    resident = real(as_run(Job(model="resnet50", batch_size=256)), "h200")
    assert resident.loader_time_s < typical.loader_time_s and resident.step_time_s < typical.step_time_s


# ------------------------------------------------------------------------------------- profile
@no_gpu
def test_profile_without_gpu_is_one_error_line():
    r = invoke("profile", "mlp-small", "-b", "8")
    assert r.exit_code == 2
    _one_error_line(r, "error: no NVIDIA GPU")
    r = invoke("profile", "suite", "--out", "somewhere", "--budget", "5")
    assert r.exit_code == 2
    _one_error_line(r, "error: no NVIDIA GPU")


@no_gpu
def test_profile_command_line_process():
    """The installed command: one stderr line, exit 2, nothing on stdout (and no torch import needed)."""
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "gpucast.cli"]
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    p = subprocess.run(cmd + ["profile", "--json", "resnet18-cifar", "-b", "8"], capture_output=True, text=True,
                       env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: no NVIDIA GPU")


def test_profile_bad_job_is_refused_before_the_gpu_check():
    r = invoke("profile", "resnet5")
    assert r.exit_code == 2 and "unknown zoo workload" in _one_error_line(r)
    r = invoke("profile", "mlp-small", "--precision", "fp8")
    assert r.exit_code == 2 and "precision" in _one_error_line(r)


def test_profile_suite_list_and_help():
    r = invoke("profile", "suite", "--list")
    assert r.exit_code == 0 and "mlp-small b64 fp32 train" in r.stdout and "launch-bound" in r.stdout
    r = invoke("profile", "--help")
    assert r.exit_code == 0 and "suite" in r.stdout and "run" in r.stdout
    r = invoke("profile", "suite")
    assert r.exit_code == 2 and "--out" in _one_error_line(r)


def test_profile_suite_refuses_a_colocated_share_outside_0_to_1(tmp_path):
    from gpucast.profile.suite import COLOCATED_SHARE

    r = invoke("profile", "suite", "--out", str(tmp_path / "x"), "--colocated-share", "1.5")
    assert r.exit_code == 2 and not (tmp_path / "x").exists()
    r = invoke("profile", "suite", "--help")
    assert r.exit_code == 0 and "--colocated-share" in r.stdout and f"{COLOCATED_SHARE:g}" in r.stdout
