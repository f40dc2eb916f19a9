"""gpucast.probe.dataset: a user's Dataset, collate function and RL environment timed on this CPU.

The datasets are real torch Datasets (``user_data.py``, loaded by path as a job names it). Times
are compared with each other, measured side by side, or bounded from below by a ``time.sleep``
the code itself does; never an absolute time that depends on this machine's load.
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import gpucast
from gpucast import Job
from gpucast.graph.usercode import load_callable
from gpucast.probe.dataset import (ProbeError, clear_cache, measure_dataset, measure_environment, measure_job,
                                   resolve_job)
from gpucast.surroundings import Data, Stack

USER = Path(__file__).with_name("user_data.py")
HANG_S = runpy.run_path(str(USER))["HANG_S"]  # how long its hanging factories sleep
QUICK = dict(max_samples=40, max_s=0.5, warmup=2, collate_batches=2)
# Tests that check a factory fails must not wait out the real limits (60 s, 10 s).
SHORT = dict(QUICK, build_limit_s=0.3, call_limit_s=0.3)


def ref(name: str) -> str:
    return f"{USER}:{name}"


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    assert isinstance(exc.value, ValueError)
    return msg


# ------------------------------------------------------------------------------ failures, one line each
@pytest.mark.parametrize("name, words", [
    ("raises", "raises: raises() raised RuntimeError: no data here"),
    ("not_a_dataset", "returned int, not a map-style Dataset"),
    ("empty", "the dataset is empty (len 0)"),
    ("slow_to_build", "slow_to_build() took longer than 0.3 s"),
    ("getitem_raises", "raised KeyError: 'x'"),
    ("getitem_hangs", "took longer than 0.3 s"),
    ("iterable", "returned an IterableDataset"),
    ("no_such_function", "defines no 'no_such_function'"),
])
def test_a_failing_dataset_is_one_error_line_naming_the_factory(name, words):
    t0 = time.perf_counter()
    with pytest.raises(ProbeError) as exc:
        measure_dataset(ref(name), 8, **SHORT)
    msg = _one_line(exc)
    assert msg.startswith(f"data.dataset {ref(name)}: ")
    assert words in msg
    # the limits cut the hanging ones short: they returned before the factory's own sleep ended
    # (HANG_S, a hundred times the 0.3 s limit), which they would not have without them
    assert time.perf_counter() - t0 < HANG_S


def test_getitem_error_names_the_index():
    with pytest.raises(ProbeError) as exc:
        measure_dataset(ref("getitem_raises"), 8, **SHORT)
    assert _one_line(exc).split(": ", 1)[1].startswith("__getitem__(")


def test_a_missing_file_is_one_error_line(tmp_path):
    missing = f"{tmp_path / 'nope.py'}:make"
    with pytest.raises(ProbeError) as exc:
        measure_dataset(missing, 8, **SHORT)
    msg = _one_line(exc)
    assert msg.startswith(f"data.dataset {missing}: cannot read") and "nope.py" in msg


def test_a_failing_collate_names_the_collate_function():
    with pytest.raises(ProbeError) as exc:
        measure_dataset(ref("fast"), 8, ref("bad_collate"), **SHORT)
    assert _one_line(exc).startswith(f"data.collate {ref('bad_collate')}: bad_collate of 8 samples raised TypeError")


def test_limits_hold_off_the_main_thread_too():
    """Off the main thread (no SIGALRM) the call runs in a helper thread that is waited for."""
    out = {}

    def run():
        try:
            measure_dataset(ref("getitem_hangs"), 8, **dict(SHORT, call_limit_s=0.2))
        except ProbeError as exc:
            out["msg"] = str(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert "took longer than 0.2 s" in out["msg"] and "background thread" in out["msg"]


def test_an_alarm_set_before_is_given_back():
    import signal

    t0 = time.monotonic()  # before the alarm is set and after it is read: the span bounds its use
    signal.setitimer(signal.ITIMER_REAL, 100)
    try:
        measure_dataset(ref("fast"), 8, **QUICK)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        elapsed = time.monotonic() - t0
        # what was left, less at most the time that passed around it (1 ms: the timer's rounding)
        assert 100 - elapsed - 0.001 <= left <= 100
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# ------------------------------------------------------------------------------ what is measured
def test_a_slow_dataset_is_measured_above_its_sleep_and_predicts_a_longer_step():
    clear_cache()
    fast = measure_dataset(ref("fast"), 32, **QUICK)
    slow = measure_dataset(ref("slow"), 32, **QUICK)
    # the sleep is a floor; a loose ceiling: the 2 ms sleep plus the fast dataset's own cost, times 10
    assert 0.002 <= slow.getitem_s < 10 * (0.002 + fast.getitem_s)
    assert slow.getitem_s > fast.getitem_s
    assert slow.samples >= 1 and fast.samples == QUICK["max_samples"]
    # collated: (32, 1, 28, 28) float32 images and 32 int64 labels
    assert fast.sample_bytes == slow.sample_bytes == 28 * 28 * 4 + 8
    assert fast.length == 400
    jobs = [Job("mlp-small", batch_size=32, data=Data(dataset=ref(n))) for n in ("fast", "slow")]
    p_fast, p_slow = (gpucast.predict(j, "t4") for j in jobs)
    assert p_slow.step_time_s > p_fast.step_time_s
    assert p_slow.bottleneck == "input-bound"
    assert any("data.dataset" in n and "measured on this CPU" in n for n in p_slow.notes)


def test_resolve_job_fills_the_measured_data_and_leaves_the_job_alone():
    clear_cache()
    job = Job("mlp-small", batch_size=16, data=Data(dataset=ref("fast")))
    key = job.key
    fed, m = resolve_job(job, **QUICK)
    assert job.key == key and job.data.per_sample_s is None  # immutable
    d = fed.data
    assert d.source == "custom" and d.dataset == ref("fast")
    assert d.per_sample_s == pytest.approx(m.per_sample_ref) and m.per_sample_ref == pytest.approx(
        m.per_sample_here * m.speed_here)
    assert d.sample_bytes == m.sample_bytes and d.dataset_samples == 400
    assert resolve_job(fed, **QUICK) == (fed, None)  # measured once: per_sample_s set, nothing to do


def test_a_collate_function_of_its_own_is_used():
    m = measure_dataset(ref("fast"), 16, ref("tuple_collate"), **QUICK)
    assert m.sample_bytes == 28 * 28 * 4  # the labels were dropped by the user's collate


def test_measurements_are_cached_by_file_and_change_with_it(tmp_path):
    clear_cache()
    src = tmp_path / "mine.py"
    shutil.copy(USER, src)
    job = Job("mlp-small", batch_size=8, data=Data(dataset=f"{src}:fast"))
    a = measure_job(job, **QUICK)
    assert measure_job(job, **QUICK) is a  # cached
    assert measure_job(job.with_(batch_size=16), **QUICK) is not a  # another batch size
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the file changed
    assert measure_job(job, **QUICK) is not a


def test_a_given_per_sample_s_is_not_overridden():
    job = Job("mlp-small", batch_size=8, data=Data(dataset=ref("raises"), per_sample_s=0.001))
    assert measure_job(job) is None  # nothing runs: the factory would raise


def test_workers_reduce_the_predicted_loader_bound_step():
    # A long epoch: with the dataset's own 400 samples (13 steps) the start-up of 4 workers,
    # amortised over the epoch, is a fixed part of the step that does not shrink with workers,
    # while the loader part scales with this CPU's measured speed (low on a loaded machine).
    clear_cache()
    base = dict(dataset=ref("slow"), dataset_samples=1_000_000)
    stack = Stack(cpu_cores=8)
    steps = [gpucast.predict(Job("mlp-small", batch_size=32, data=Data(**base, num_workers=w), stack=stack),
                             "t4").step_time_s for w in (0, 4)]
    assert steps[1] < steps[0] / 2


# ------------------------------------------------------------------------------ environments
def test_an_environment_is_stepped_with_its_action_space_and_reset():
    m = measure_environment(ref("corridor"), max_steps=60, max_s=2.0, warmup=2)
    env = load_callable(ref("corridor")).__globals__["LAST"][-1]
    assert m.kind == "environment" and m.samples == 60
    assert m.getitem_s >= 0.0005  # each step sleeps that long
    assert env.resets >= 3  # 62 steps of 20-step episodes, plus the first reset
    assert env.actions and all(isinstance(a, int) for a in env.actions)
    assert m.sample_bytes == 8 * 4  # one float32 observation of 8
    job = Job("mlp-small", batch_size=4, data=Data(environment=ref("corridor")))
    p = gpucast.predict(job, "t4")
    assert p.job["data"]["source"] == "environment" and p.job["data"]["per_sample_s"] > 0
    assert any("data.environment" in n for n in p.notes)


def test_an_environment_without_action_space_steps_with_none():
    measure_environment(ref("corridor_no_space"), max_steps=10, max_s=1.0, warmup=1)
    env = load_callable(ref("corridor_no_space")).__globals__["LAST"][-1]
    assert env.actions and all(a is None for a in env.actions)


def test_a_non_environment_is_one_error_line():
    with pytest.raises(ProbeError) as exc:
        measure_environment(ref("not_an_env"), max_steps=5)
    msg = _one_line(exc)
    assert msg.startswith(f"data.environment {ref('not_an_env')}: returned ") and "reset() and step(action)" in msg


# ------------------------------------------------------------------------------ the command line
def test_cli_predict_with_a_dataset_and_its_errors(tmp_path):
    """Two real `gpucast predict` runs side by side: a failing factory (exit 2, one stderr line)
    and a dataset that is measured (its note and data in the JSON)."""
    bin_ = Path(sys.executable).parent / "gpucast"
    cmd = [str(bin_)] if bin_.exists() else [sys.executable, "-m", "gpucast.cli"]
    env = dict(os.environ, COLUMNS="200")
    bad = subprocess.Popen([*cmd, "predict", "mlp-small", "--dataset", ref("raises")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env)
    good = subprocess.Popen([*cmd, "predict", "mlp-small", "-b", "16", "--set", f"data.dataset={ref('fast')}",
                             "--gpu", "t4", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    out, err = bad.communicate(timeout=240)
    assert bad.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: data.dataset ") and "raised RuntimeError" in lines[0]
    assert out == ""
    out, err = good.communicate(timeout=240)
    assert good.returncode == 0, err
    import json

    p = json.loads(out)
    assert p["job"]["data"]["dataset"] == ref("fast") and p["job"]["data"]["per_sample_s"] > 0
    assert any("measured on this CPU" in n for n in p["notes"])
