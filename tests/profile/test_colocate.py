"""colocate: real worker processes on the CPU, released together, measured over one window.

The parent samples a FakeNvml (synthetic readings); the children the worker's scripted fake
(``GPUCAST_PROFILE_FAKE_NVML=1``). Solo step times passed in are made-up numbers: the test
checks the arithmetic, not the slowdown. One group of three keeps the test short: two members
run, the third fails on purpose (``GPUCAST_PROFILE_TEST_FAULT=oom@2``, OOM at its first step).
"""

from __future__ import annotations

import json

import pytest
from fakes import FakeNvml

from gpucast import Job
from gpucast.profile.colocate import run_group
from gpucast.profile.runner import FAULT_ENV, RunSpec
from gpucast.profile.schema import COLUMNS
from gpucast.profile.worker import FAKE_NVML_ENV

CHILD_ENV = {FAKE_NVML_ENV: "1", "OMP_NUM_THREADS": "1"}


def _spec(batch_size, window_s=0.6):
    return RunSpec(Job("mlp-small", batch_size=batch_size), device="cpu", warmup_steps=2, window_s=window_s,
                   min_window_steps=2, max_window_steps=10_000)


def test_group_overlaps_computes_slowdown_and_survives_a_failed_member(tmp_path):
    specs = [_spec(8), _spec(16, window_s=0.3), _spec(4)]
    a, b, c = (s.job.key for s in specs)
    fake = FakeNvml(util=(70,), mem_used=(5 << 30,))
    solo = {a: 1e-3, c: 1e-3}  # b's solo time unknown
    rows = run_group(specs, solo, timeout_s=60, backend=fake, workdir=tmp_path,
                     env={**CHILD_ENV, FAULT_ENV: "oom@2"})
    assert len(rows) == 3
    assert [r["status"] for r in rows] == ["ok", "ok", "oom"], [r["error"] for r in rows]
    for row in rows:
        assert set(row) == set(COLUMNS)
        assert row["kind"] == "colocated" and row["group_id"] == rows[0]["group_id"]
        assert row["combined_util_mean_pct"] == 70.0 and row["combined_mem_max_bytes"] == 5 << 30
    assert [r["slot"] for r in rows] == [0, 1, 2]
    assert [json.loads(r["partners"]) for r in rows] == [[b, c], [a, c], [a, b]]
    # slowdown from the given solo times; unknown solo or a failed member: none
    assert rows[0]["solo_step_time_s"] == 1e-3
    assert rows[0]["slowdown"] == pytest.approx(rows[0]["step_time_mean_s"] / 1e-3)
    assert rows[1]["solo_step_time_s"] is None and rows[1]["slowdown"] is None
    assert rows[2]["slowdown"] is None and "OutOfMemoryError" in rows[2]["error"]
    # one common window (the group's longest), and the measured windows overlap over most of it
    t0, t1 = json.loads((tmp_path / "sync" / "window.json").read_text())
    assert t1 - t0 == pytest.approx(0.6)
    w = [json.loads((tmp_path / "sync" / f"done.{i}").read_text()) for i in range(2)]
    assert all(x[0] >= t0 for x in w)
    assert min(x[1] for x in w) - max(x[0] for x in w) >= 0.5 * (t1 - t0)
    assert all(r["window_steps"] >= 2 for r in rows[:2])


def test_group_size_and_device_are_checked():
    with pytest.raises(ValueError):
        run_group([_spec(8)], None, timeout_s=5)
    with pytest.raises(ValueError):
        run_group([_spec(8)] * 4, None, timeout_s=5)
    with pytest.raises(ValueError):
        run_group([_spec(8), RunSpec(Job("mlp-small"), device="cuda")], None, timeout_s=5)
