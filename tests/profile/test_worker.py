"""worker: real child processes on the CPU.

The children sample the worker's deterministic fake NVML (``GPUCAST_PROFILE_FAKE_NVML=1``) and
fail on purpose through ``GPUCAST_PROFILE_TEST_FAULT``: both are the documented no-GPU test
boundary of the worker.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
import torch

from gpucast import Job
from gpucast.job import JobError
from gpucast.profile.runner import FAULT_ENV, RunSpec
from gpucast.profile.schema import COLUMNS, STATUSES
from gpucast.profile.worker import FAKE_NVML_ENV, ScriptedNvml, WorkerPool, execute, run_isolated, write_row

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


def _left_behind(marker: str, wait_s: float = 10.0) -> list[int]:
    """The processes with ``marker`` still alive after at most ``wait_s``: SIGKILL is delivered
    asynchronously, so a killed group's members may still be on their way out when the call
    that killed them returns (on a loaded machine, for a few milliseconds more)."""
    deadline = time.monotonic() + wait_s
    while (left := _processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_hanging_child_times_out_and_leaves_no_process_behind():
    marker = f"GPUCAST_TEST_MARKER_{uuid.uuid4().hex}"
    row = run_isolated(_spec(), timeout_s=2, env={**CHILD_ENV, FAULT_ENV: "hang", marker: "1"})
    assert row["status"] == "timeout"
    _one_line(row)
    assert "2 s" in row["error"]
    # the hung child had started a grandchild: the whole process group is gone
    assert _left_behind(marker) == []


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


# ------------------------------------------------------------------------------- persistent worker
# Each worker start costs seconds here, so the pool tests preload only torch and run inference
# jobs (a process's first optimizer imports torch._dynamo, ~2 s more); the full PRELOAD list and
# training runs are what the suite tests' workers do.
LIGHT = ("torch",)


def _infer(model="mlp-small", batch_size=8, slot=0):
    return RunSpec(Job(model, batch_size=batch_size, mode="infer", optimizer="none"), device="cpu",
                   warmup_steps=1, window_s=0.1, min_window_steps=2, slot=slot)


def test_pool_reuses_its_process_and_replaces_it_after_each_failure():
    """One pool, five worker processes (each start costs seconds here, so one scenario):

    1. ok runs share a process; a run after which the worker reports memory above its baseline
       (the ``leak`` fault) is ok, and its worker is replaced before the next run;
    2. ``oom``, ``sigkill`` (crash) and ``hang`` (timeout) each give their status and end the
       worker and its whole process group at once; the next spec runs, ok, in a fresh process;
    3. a worker is replaced after ``max_runs`` runs.

    A fault is set by the worker's environment, read when it starts, and targets slot-1 specs:
    ``pool.env`` is changed before the run that starts the next worker. Rows never mix: each
    is its own spec's."""
    a, b, c = _infer(), _infer("a2c-mlp"), _infer(batch_size=4)
    faulty = _infer(slot=1)
    marker = f"GPUCAST_TEST_MARKER_{uuid.uuid4().hex}"
    base = {**CHILD_ENV, marker: "1"}
    ran, rows, pids = [], [], []
    pool = WorkerPool(env={**base, FAULT_ENV: "leak@1"}, preload=LIGHT, max_runs=4)

    def go(spec, timeout_s=60):
        rows.append(pool.run(spec, timeout_s=timeout_s))
        ran.append(spec)
        pids.append(pool.pid)
        return rows[-1]

    try:
        assert pool.pid is None  # started on the first run
        go(a), go(b), go(faulty)
        assert pids[0] == pids[1] == pids[2] is not None and pool.starts == 1
        seen = {pids[0]}
        for fault, status, timeout_s in (("oom", "oom", 60), ("sigkill", "crash", 60), ("hang", "timeout", 1)):
            pool.env = {**base, FAULT_ENV: f"{fault}@1"}
            assert go(c)["status"] == "ok" and pool.pid not in seen  # recovery: a fresh process
            seen.add(pool.pid)
            row = go(faulty, timeout_s)
            assert row["status"] == status, row
            _one_line(row)
            assert pool.pid is None  # ended at once
            assert _left_behind(marker) == []  # with its whole process group (hang: a grandchild too)
        assert "SIGKILL" in rows[-3]["error"] and "kills itself" in rows[-3]["error"]
        assert rows[-1]["error"] == "no result within 1 s; worker killed"
        pool.env = base
        go(a), go(b), go(c)
        assert pids[-3] == pids[-2] == pids[-1] and pids[-1] not in seen
        go(a)
        assert pids[-1] is None  # that was its fourth run: replaced
        assert pool.starts == 5
        assert [n.split(": ", 1)[1] for n in pool.notes] == [
            "memory not back to its baseline after its last run (device test: 1048576 bytes)",
            "a run ended oom", "killed by SIGKILL during a run (crash)", "no result within 1 s (timeout)",
            "every 4 runs"]
        assert len(pool.start_s) == 5 and all(t > 0 for t in pool.start_s)
    finally:
        pool.close()
    assert _left_behind(marker) == []
    assert [r["status"] for r in rows] == ["ok"] * 4 + ["oom", "ok", "crash", "ok", "timeout"] + ["ok"] * 4
    assert [r["job_key"] for r in rows] == [s.job.key for s in ran]
    assert [r["batch_size"] for r in rows] == [s.job.batch_size for s in ran]
    assert len({r["run_id"] for r in rows}) == len(rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(set(r) == set(COLUMNS) and r["gpu_model"] == "gpucast fake GPU" and r["window_steps"] >= 2
               for r in ok)


def test_pool_refuses_module_jobs_before_starting_anything():
    job = Job.from_module(lambda: torch.nn.Linear(2, 2), lambda b: (torch.randn(b, 2),), batch_size=2)
    with WorkerPool(env=CHILD_ENV) as pool:
        with pytest.raises(JobError, match="module job"):
            pool.run(RunSpec(job, device="cpu"))
        assert pool.starts == 0


def test_serve_by_hand_speaks_one_json_line_per_message(tmp_path):
    """``--serve`` without ``--result-fd``: messages on stdout, in order; a bad line is an error row."""
    import subprocess
    import sys

    from gpucast.profile.worker import _child_env

    proc = subprocess.run([sys.executable, "-m", "gpucast.profile.worker", "--serve", "--preload", ""],
                          input="not a spec\n\n{\"job\": 1}\n", capture_output=True, text=True, timeout=60,
                          env=_child_env(CHILD_ENV))
    assert proc.returncode == 0, proc.stderr
    messages = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [m["event"] for m in messages] == ["hello", "result", "idle", "result", "idle"]
    assert messages[0]["pid"] > 0 and messages[0]["preloaded"] == []
    assert [m["seq"] for m in messages[1:]] == [1, 1, 2, 2]
    for m in messages[1::2]:
        assert m["row"]["status"] == "error" and m["row"]["error"].startswith("bad run spec: ")
    assert all(m["clean"] for m in messages[2::2])
