"""The device suite: what it measures, in what order, and its time-boxed, resumable loop.

The loop is tested for real on this machine's CPU: tiny zoo jobs run in real worker processes
(``RunSpec.device="cpu"``), with the one fake of these tests standing in for the GPU behind NVML
(``FakeNvml`` in this process, the worker's ``GPUCAST_PROFILE_FAKE_NVML`` hook in the children).
The rows they leave are CPU runs of a test, not measurements.
"""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest

from gpucast import zoo
from gpucast.job import Job
from gpucast.profile import suite
from gpucast.profile.dataset import Dataset, config_id
from gpucast.profile.suite import Config, configs, run_suite
from gpucast.profile.worker import FAKE_NVML_ENV

FAKE_GPU = "gpucast fake GPU"  # the device name of the worker's scripted NVML (tests only)


@pytest.fixture(scope="module")
def plan():
    return configs()


def _family(job: Job) -> str:
    return zoo.get(job.model).family


# ------------------------------------------------------------------------------------- the list
def test_sizes(plan):
    solo = [c for c in plan if c.kind == "solo"]
    grouped = [c for c in plan if c.kind == "colocated"]
    assert len(solo) >= 150
    assert len(grouped) >= 20
    assert sum(len(c.jobs) == 3 for c in grouped) >= 3
    assert len({j.model for c in solo for j in c.jobs}) >= 25


def test_ids_unique(plan):
    assert len({c.key for c in plan}) == len(plan)
    ids = [tuple(sorted(c.config_ids("NVIDIA H200"))) for c in plan]
    assert len(set(ids)) == len(ids)
    solo_ids = [c.config_ids("NVIDIA H200")[0] for c in plan if c.kind == "solo"]
    assert solo_ids == [config_id(c.job.key, "NVIDIA H200", "solo") for c in plan if c.kind == "solo"]


def test_first_configs_span_the_regimes(plan):
    # the first three are one of each regime, the first twelve hold four of each
    assert {c.regime for c in plan[:3]} == set(suite.REGIMES)
    counts = Counter(c.regime for c in plan[:12])
    assert all(counts[r] >= 3 for r in suite.REGIMES), counts
    assert all(c.phase == "spread" for c in plan[:12])
    assert all(c.regime is None for c in plan[12:])


def test_every_family_early(plan):
    assert {_family(c.job) for c in plan[:60]} == set(zoo.FAMILIES)


def test_precisions_modes_and_order(plan):
    solo = [c for c in plan if c.kind == "solo"]
    assert {c.job.precision for c in solo} == {"fp32", "tf32", "amp-fp16", "amp-bf16"}
    assert Counter(c.job.mode for c in solo)["infer"] >= 10
    # precision and mode vary early, not only at the tail
    assert {c.job.precision for c in plan[:60]} >= {"fp32", "amp-bf16"}
    assert "infer" in {c.job.mode for c in plan[:60]}
    # every model with several batch sizes is swept over at least 2 of them
    batches: dict[str, set] = {}
    for c in solo:
        batches.setdefault(c.job.model, set()).add(c.job.batch_size)
    assert sum(len(b) >= 4 for b in batches.values()) >= 15
    # solo before co-located
    kinds = [c.kind for c in plan]
    assert kinds.index("colocated") == len(solo) and set(kinds[len(solo):]) == {"colocated"}


def test_jobs_left_out_and_kept(plan):
    jobs = [j for c in plan for j in c.jobs]
    assert not any(j.model == "llama-7b" and j.mode == "train" for j in jobs)
    assert any(j.model == "llama-7b" and j.mode == "infer" for j in jobs)
    assert all(j.optimizer == "none" for j in jobs if j.mode == "infer")
    small = configs(gpu_memory_bytes=24 * 2**30)
    assert not any(j.model in ("llama-7b", "gpt2-xl") for c in small for j in c.jobs)
    assert len(small) < len(plan)


def test_groups_mix_regimes_and_use_spread_jobs(plan):
    spread = {c.job: c.regime for c in plan if c.phase == "spread"}
    groups = [c for c in plan if c.kind == "colocated"]
    assert all(j in spread for c in groups for j in c.jobs)
    mixes = [frozenset(spread[j] for j in c.jobs) for c in groups]
    assert sum(m >= {"launch-bound", "saturated"} for m in mixes) >= 3
    assert sum(len(set(c.jobs)) == 1 for c in groups) >= 5  # identical pairs/triples


def test_config_ids_of_a_group_match_the_rows_partners():
    a, b = Job(model="mlp-small", batch_size=8), Job(model="a2c-mlp", batch_size=8)
    ids = Config((a, b, a), "colocated").config_ids("X")
    assert ids[0] == config_id(a.key, "X", "colocated", (b.key, a.key))
    assert ids[1] == config_id(b.key, "X", "colocated", (a.key, a.key))
    assert ids[0] == ids[2]


# ------------------------------------------------------------------------------------- the loop
TINY = Job(model="mlp-small", batch_size=8)
TINY2 = Job(model="a2c-mlp", batch_size=8)
FAST = dict(device="cpu", warmup_steps=1, window_s=0.05, progress=False)


@pytest.fixture
def cpu_workers(monkeypatch, fake_nvml):
    """Children sample the worker's scripted NVML; this process gets the FakeNvml of the same name."""
    monkeypatch.setenv(FAKE_NVML_ENV, "1")
    return fake_nvml(name=FAKE_GPU)


def test_run_suite_appends_resumes_and_compacts(tmp_path, cpu_workers, capsys):
    solo = Config((TINY,), "sweep")
    pair = Config((TINY, TINY), "colocated")
    res = run_suite(tmp_path, budget_s=200, suite="cpu-test", plan=[solo, pair], backend=cpu_workers,
                    **{**FAST, "progress": True})
    assert (res.measured, res.rows, res.skipped, res.stopped) == (2, 3, 0, "done"), res
    assert res.statuses == {"ok": 3}
    log = capsys.readouterr().err
    assert "[1/2] mlp-small b8 fp32 train: ok" in log and "[2/2] mlp-small b8 fp32 train + mlp-small" in log
    assert "measured 2 configurations (3 rows: ok 3)" in log

    ds = Dataset(tmp_path / "dataset")
    assert len(ds.parts()) == 2  # one part per finished configuration, written as it finished
    rows = pq.read_table(tmp_path / "measurements.parquet").to_pylist()
    assert rows == ds.rows()
    assert [r["kind"] for r in rows] == ["solo", "colocated", "colocated"]
    assert all(r["suite"] == "cpu-test" and r["status"] == "ok" for r in rows)
    assert rows[0]["config_id"] == solo.config_ids(FAKE_GPU)[0]
    assert [r["config_id"] for r in rows[1:]] == pair.config_ids(FAKE_GPU)
    assert rows[0]["util_samples"] and rows[0]["gpu_model"] == FAKE_GPU  # sampled (scripted NVML)
    # the group used the solo step time measured moments before
    assert rows[1]["solo_step_time_s"] == pytest.approx(rows[0]["step_time_mean_s"])
    assert rows[1]["slowdown"] > 0

    # resume: nothing left to do, nothing started, nothing appended
    again = run_suite(tmp_path, budget_s=200, suite="cpu-test", plan=[solo, pair], backend=cpu_workers, **FAST)
    assert (again.measured, again.skipped, again.stopped) == (0, 2, "done")
    assert len(ds.parts()) == 2

    # earlier collections given as `prior` count as done in a fresh directory
    fresh = tmp_path / "second"
    res2 = run_suite(fresh, budget_s=200, plan=[solo, pair], backend=cpu_workers,
                     prior=[tmp_path / "measurements.parquet"], **FAST)
    assert (res2.measured, res2.skipped) == (0, 2)
    assert not (fresh / "measurements.parquet").exists()

    # without resume the configuration runs again; a group whose member has no solo time is skipped
    lonely = Config((TINY2, TINY2), "colocated")
    res3 = run_suite(fresh, budget_s=200, plan=[lonely], backend=cpu_workers, resume=False, **FAST)
    assert (res3.measured, res3.unrunnable) == (0, 1)


def test_solo_runs_share_one_worker_process(tmp_path, cpu_workers, capsys):
    """N solo configurations take one worker start, not N (counted, not timed: how much time
    that saves depends on the machine's load)."""
    jobs = [Job(model="mlp-small", batch_size=b) for b in (2, 4, 8)] + [Job(model="a2c-mlp", batch_size=b)
                                                                        for b in (4, 8)]
    plan = [Config((j,), "sweep") for j in jobs]
    res = run_suite(tmp_path, budget_s=200, plan=plan, backend=cpu_workers, **{**FAST, "progress": True})
    assert (res.measured, res.statuses, res.stopped) == (len(plan), {"ok": len(plan)}, "done")
    assert res.worker_starts == 1 and len(res.worker_start_s) == 1
    assert res.worker_start_s[0] > 0
    rows = Dataset(tmp_path / "dataset").rows()
    assert [r["job_key"] for r in rows] == [j.key for j in jobs]
    assert "solo worker: 1 process(es)" in capsys.readouterr().err


def test_budget_stops_before_a_run_that_would_not_fit(tmp_path, cpu_workers):
    res = run_suite(tmp_path, budget_s=1.0, plan=[Config((TINY,), "sweep")], backend=cpu_workers,
                    first_guess_s=(5.0, 5.0), **FAST)
    assert (res.measured, res.stopped) == (0, "budget")
    assert Dataset(tmp_path / "dataset").parts() == []


def test_run_cut_by_the_budget_is_not_recorded(tmp_path, cpu_workers):
    # the run needs > 5 s (its window alone); the budget caps its timeout at 2 s: it is killed,
    # and a timeout caused by the time box says nothing about the job, so no row is written
    res = run_suite(tmp_path, budget_s=2.0, plan=[Config((TINY,), "sweep")], backend=cpu_workers,
                    first_guess_s=(0.1, 0.1), device="cpu", warmup_steps=1, window_s=5.0, progress=False)
    # no row: the run was cut (its window alone is longer than the budget), whatever the load
    assert (res.measured, res.rows, res.stopped) == (0, 0, "budget")
    assert Dataset(tmp_path / "dataset").parts() == []


def test_main_without_gpu_is_one_error_line(tmp_path, capsys):
    from gpucast.profile.nvml import GpuUnavailable, open_backend

    try:
        open_backend().close()
        pytest.skip("this machine has an NVIDIA GPU")
    except GpuUnavailable:
        pass
    assert suite.main(["--out", str(tmp_path), "--budget", "5", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no NVIDIA GPU")


def test_main_list_needs_no_gpu(capsys):
    assert suite.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(configs())
    assert "mlp-small" in lines[0]


def test_main_refuses_a_colocated_share_outside_0_to_1(tmp_path, capsys):
    assert suite.main(["--out", str(tmp_path), "--colocated-share", "1.5", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --colocated-share")
    assert not any(tmp_path.iterdir())      # nothing written


def test_a_colocated_share_of_one_runs_the_groups_first():
    # _order with the whole budget kept for the groups: every group before any solo run
    plan = configs()
    clock = suite._Clock(100.0, {"solo": 1.0, "colocated": 1.0})
    clock.clock = lambda: clock.t0      # time stands still: the order cannot depend on this machine's speed
    order = [c.kind for c in suite._order(plan, clock, 1.0)]
    first_solo = order.index("solo")
    assert first_solo == sum(k == "colocated" for k in order) > 0
    # the default keeps the solo runs first while the budget is young
    assert next(suite._order(plan, clock, suite.COLOCATED_SHARE)).kind == "solo"
