"""worker: real child processes on the CPU.

The children sample the worker's deterministic fake NVML (``GPUCAST_PROFILE_FAKE_NVML=1``) and
fail on purpose through ``GPUCAST_PROFILE_TEST_FAULT``: both are the documented no-GPU test
boundary of the worker.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import torch

from gpucast import Job
from gpucast.job import JobError
from gpucast.profile.runner import FAULT_ENV, RunSpec
from gpucast.profile.schema import COLUMNS, STATUSES
from gpucast.profile.worker import FAKE_NVML_ENV, ScriptedNvml, execute, run_isolated, write_row

# one thread per child: the test machine has few cores and runs children side by side
CHILD_ENV = {FAKE_NVML_ENV: "1", "OMP_NUM_THREADS": "1"}


def _spec(**kw):
    return RunSpec(Job("mlp-small", batch_size=8), device="cpu", warmup_steps=1, window_s=0.1,
                   min_window_steps=2, **kw)


def _one_line(row):
    assert row["error"] and "\n" not in row["error"]


def test_run_isolated_ok_in_a_real_child():
    row = run_isolated(_spec(), timeout_s=60, env=CHILD_ENV)
    assert row["status"] == "ok", row["error"]
    assert set(row) == set(COLUMNS)
    assert row["window_steps"] >= 2 and row["step_time_mean_s"] > 0
    # the child's NVML is the scripted fake: a device in no catalog, utilization from its script
    assert row["gpu_model"] == "gpucast fake GPU" and row["gpu_name"] is None
    assert min(ScriptedNvml.UTIL) <= row["util_mean_pct"] <= max(ScriptedNvml.UTIL)
    assert row["job_key"] == _spec().job.key


def test_oom_in_the_child_gives_status_oom():
    row = run_isolated(_spec(), timeout_s=60, env={**CHILD_ENV, FAULT_ENV: "oom"})
    assert row["status"] == "oom"
    _one_line(row)
    assert "OutOfMemoryError" in row["error"] and row["step_time_mean_s"] is None
    assert row["job_key"] == _spec().job.key and row["model"] == "mlp-small"


def test_child_killed_by_sigkill_gives_crash_with_last_stderr_line():
    row = run_isolated(_spec(), timeout_s=60, env={**CHILD_ENV, FAULT_ENV: "sigkill"})
    assert row["status"] == "crash"
    _one_line(row)
    assert "SIGKILL" in row["error"] and "kills itself" in row["error"]


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_hanging_child_times_out_and_leaves_no_process_behind():
    marker = f"GPUCAST_TEST_MARKER_{uuid.uuid4().hex}"
    row = run_isolated(_spec(), timeout_s=2, env={**CHILD_ENV, FAULT_ENV: "hang", marker: "1"})
    assert row["status"] == "timeout"
    _one_line(row)
    assert "2 s" in row["error"]
    # the hung child had started a grandchild: the whole process group is gone
    assert _processes_with(marker) == []


def test_in_child_failures_become_rows(monkeypatch):
    """``execute`` is the child's body: every failure is a row with a status and one line."""
    for fault, status in (("oom", "oom"), ("oom-message", "oom"), ("error", "error")):
        monkeypatch.setenv(FAULT_ENV, fault)
        row = execute(_spec())
        assert row["status"] == status and row["status"] in STATUSES
        _one_line(row)
    assert "second line" not in row["error"] and row["error"].startswith("ValueError: test fault")
    monkeypatch.delenv(FAULT_ENV)
    assert execute(RunSpec(Job("mlp-small", batch_size=2)))["status"] in ("ok", "error")  # cuda: error without a GPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_missing_cuda_in_the_child_is_an_error_row(monkeypatch):
    row = execute(RunSpec(Job("mlp-small", batch_size=2)))
    assert row["status"] == "error" and row["error"].startswith("GpuUnavailable:")
    _one_line(row)


def test_module_jobs_are_refused_for_isolation():
    job = Job.from_module(lambda: torch.nn.Linear(2, 2), lambda b: (torch.randn(b, 2),), batch_size=2)
    with pytest.raises(JobError, match="module job"):
        run_isolated(RunSpec(job, device="cpu"))


def test_write_row_is_atomic(tmp_path):
    target = tmp_path / "result.json"
    write_row(target, {"status": "ok", "x": 1.5})
    assert json.loads(target.read_text()) == {"status": "ok", "x": 1.5}
    assert os.listdir(tmp_path) == ["result.json"]
