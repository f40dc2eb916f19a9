"""Sampler, windows and aggregates, against ``FakeNvml`` (synthetic readings standing in for a GPU).

Expected numbers are computed by hand in the comments; percentiles follow numpy's default
definition (``method="linear"``, Hyndman and Fan type 7: the value at rank ``q/100 * (n-1)``,
interpolated linearly between neighbours).
"""

from __future__ import annotations

import math
import time

import pytest

from fakes import FakeNvml
from gpucast.profile.sampler import Sample, Sampler, step_stats, summarize

GiB = 1 << 30

SUMMARY_KEYS = {
    "util_mean_pct", "util_p5_pct", "util_p50_pct", "util_p95_pct", "util_samples",
    "mem_used_max_bytes", "proc_mem_max_bytes", "sm_clock_mean_mhz", "power_mean_w",
}
STEP_KEYS = {"step_time_mean_s", "step_time_p5_s", "step_time_p50_s", "step_time_p95_s", "step_time_std_s"}


def scripted_clock(times):
    it = iter(times)
    return lambda: next(it)


def test_window_picks_exactly_the_samples_inside_inclusive():
    # ten samples at t = 0.0, 0.5, ..., 4.5 with utilization 0, 10, ..., 90
    times = [i * 0.5 for i in range(10)]
    s = Sampler(FakeNvml(util=[10 * i for i in range(10)]), clock=scripted_clock(times))
    for _ in times:
        s.sample_once()
    win = s.window(1.0, 2.5)
    assert [x.t for x in win] == [1.0, 1.5, 2.0, 2.5]  # both ends included
    assert [x.util_pct for x in win] == [20.0, 30.0, 40.0, 50.0]
    assert s.window(1.1, 1.4) == []
    assert s.window(-1.0, 0.0) == [s.samples[0]]
    assert len(s.window(0.0, 4.5)) == 10


def test_summarize_matches_hand_computed_stats():
    s = Sampler(
        FakeNvml(util=[10, 20, 30, 40, 100], mem_used=[3 * GiB, 7 * GiB, 5 * GiB, 2 * GiB, 6 * GiB],
                 processes={42: GiB}, sm_clock=1500, power=300.0),
        pids=[42],
        clock=scripted_clock([0.0, 0.1, 0.2, 0.3, 0.4]),
    )
    for _ in range(5):
        s.sample_once()
    out = summarize(s.samples)
    assert set(out) == SUMMARY_KEYS
    # mean (10+20+30+40+100)/5 = 40
    assert out["util_mean_pct"] == pytest.approx(40.0)
    # p5: rank 0.05*4 = 0.2 -> 10 + 0.2*(20-10) = 12
    assert out["util_p5_pct"] == pytest.approx(12.0)
    # p50: rank 2 -> 30
    assert out["util_p50_pct"] == pytest.approx(30.0)
    # p95: rank 3.8 -> 40 + 0.8*(100-40) = 88
    assert out["util_p95_pct"] == pytest.approx(88.0)
    assert out["util_samples"] == 5
    assert out["mem_used_max_bytes"] == 7 * GiB
    assert out["proc_mem_max_bytes"] == GiB
    assert out["sm_clock_mean_mhz"] == pytest.approx(1500.0)
    assert out["power_mean_w"] == pytest.approx(300.0)


def test_summarize_means_skip_missing_readings():
    samples = [
        Sample(t=0.0, util_pct=50, mem_used_bytes=1, proc_mem_bytes=0, sm_clock_mhz=1000.0, power_w=None),
        Sample(t=1.0, util_pct=50, mem_used_bytes=1, proc_mem_bytes=0, sm_clock_mhz=None, power_w=200.0),
        Sample(t=2.0, util_pct=50, mem_used_bytes=1, proc_mem_bytes=0, sm_clock_mhz=2000.0, power_w=None),
    ]
    out = summarize(samples)
    assert out["sm_clock_mean_mhz"] == pytest.approx(1500.0)  # (1000+2000)/2
    assert out["power_mean_w"] == pytest.approx(200.0)
    assert out["proc_mem_max_bytes"] is None  # NVML listed none of the watched pids: not a measurement


def test_summarize_empty_window():
    out = summarize([])
    assert set(out) == SUMMARY_KEYS
    assert out["util_samples"] == 0
    assert all(v is None for k, v in out.items() if k != "util_samples")


def test_step_stats_hand_computed():
    out = step_stats([0.4, 0.1, 0.3, 0.2])  # order must not matter
    assert set(out) == STEP_KEYS
    assert out["step_time_mean_s"] == pytest.approx(0.25)
    # sorted 0.1 0.2 0.3 0.4; p5 rank 0.15 -> 0.1 + 0.15*0.1 = 0.115; p95 rank 2.85 -> 0.3 + 0.85*0.1 = 0.385
    assert out["step_time_p5_s"] == pytest.approx(0.115)
    assert out["step_time_p50_s"] == pytest.approx(0.25)
    assert out["step_time_p95_s"] == pytest.approx(0.385)
    # sample std: squared deviations 0.0225+0.0025+0.0025+0.0225 = 0.05, over n-1 = 3
    assert out["step_time_std_s"] == pytest.approx(math.sqrt(0.05 / 3))


def test_step_stats_degenerate():
    assert all(v is None for v in step_stats([]).values())
    one = step_stats([0.2])
    assert one["step_time_mean_s"] == pytest.approx(0.2) and one["step_time_std_s"] is None
    with pytest.raises(ValueError):
        step_stats([0.1, float("nan")])


def _wait_for_samples(s, n, timeout=60.0):
    """A bounded wait for the thread's first ``n`` samples (any load); nothing timed."""
    deadline = time.monotonic() + timeout
    while len(s.samples) < n:
        assert time.monotonic() < deadline, f"fewer than {n} samples within {timeout} s"
        time.sleep(0.01)


def test_the_loop_paces_itself_and_does_not_burst_after_falling_behind():
    # The loop driven on a fake clock (no thread, no wall time): each wait is what the schedule
    # asks for. The third wait oversleeps by 0.05 s (2.5 periods): the next sample is taken at
    # once and the schedule restarts from there, with no catch-up burst of the missed ones.
    # (The real thread's sustained rate, >= 20 Hz, is a speed: benchmarks/sampler_rate.py.)
    now, waits = [0.0], []

    def wait(dt):
        waits.append(dt)
        now[0] += dt + (0.05 if len(waits) == 3 else 0.0)
        if len(waits) == 10:
            s._stop.set()
        return s._stop.is_set()

    s = Sampler(FakeNvml(util=[30, 60], cycle=True), rate_hz=50.0, clock=lambda: now[0],
                pace_clock=lambda: now[0], pace_wait=wait)
    s._run()
    assert waits == pytest.approx([0.02, 0.02, 0.02, 0.0] + [0.02] * 6)
    assert [x.t for x in s.samples] == pytest.approx([0.0, 0.02, 0.04, 0.11, 0.11, 0.13, 0.15, 0.17, 0.19, 0.21])
    assert [x.util_pct for x in s.samples] == [30.0, 60.0] * 5
    assert s.errors == 0


def test_the_thread_samples_until_stopped():
    fake = FakeNvml(util=[30, 60], cycle=True)
    s = Sampler(fake, rate_hz=50.0)
    s.start()
    _wait_for_samples(s, 4)
    s.stop()
    assert s.errors == 0 and s.achieved_hz > 0
    assert {x.util_pct for x in s.samples} == {30.0, 60.0}


def test_stop_joins_the_thread_and_sampling_ends():
    s = Sampler(FakeNvml(delay_s=0.02), rate_hz=100.0)
    with s:
        assert s.running
        time.sleep(0.1)
    assert not s.running
    assert not s._thread.is_alive()
    n = len(s.samples)
    time.sleep(0.1)
    assert len(s.samples) == n
    s.stop()  # idempotent
    with pytest.raises(RuntimeError):
        s.start()


def test_power_and_clock_errors_give_none_not_a_crash():
    fake = FakeNvml(power=RuntimeError("NVML_ERROR_NOT_SUPPORTED"), sm_clock=OSError("gone"))
    s = Sampler(fake, rate_hz=100.0)
    one = s.sample_once()
    assert one.power_w is None and one.sm_clock_mhz is None
    assert one.util_pct == 50.0
    with s:
        _wait_for_samples(s, 4)  # sample_once's one and three of the thread's
    assert s.errors == 0
    assert len(s.samples) >= 4
    assert all(x.power_w is None for x in s.samples)
    assert summarize(s.samples)["power_mean_w"] is None


def test_required_reading_error_is_counted_and_sampling_continues():
    fake = FakeNvml(util=[RuntimeError("transient"), 40])
    s = Sampler(fake)
    with pytest.raises(RuntimeError):
        s.sample_once()  # the synchronous read propagates
    s2 = Sampler(FakeNvml(util=[RuntimeError("transient"), 40]), rate_hz=100.0)
    with s2:
        _wait_for_samples(s2, 3)  # the first reading failed: these are the ones after it
    assert s2.errors == 1
    assert "transient" in s2.last_error
    assert len(s2.samples) >= 3 and {x.util_pct for x in s2.samples} == {40.0}


def test_process_memory_sums_only_watched_pids():
    fake = FakeNvml(processes={100: 1 * GiB, 200: 2 * GiB, 300: 4 * GiB})
    assert Sampler(fake, pids=(100, 300)).sample_once().proc_mem_bytes == 5 * GiB
    assert Sampler(fake, pids=(200, 999)).sample_once().proc_mem_bytes == 2 * GiB
    before = fake.calls.get("process_memory", 0)
    assert Sampler(fake).sample_once().proc_mem_bytes == 0  # no pids: the process list is not read
    assert fake.calls.get("process_memory", 0) == before


def test_achieved_hz_uses_sample_clock():
    s = Sampler(FakeNvml(), clock=scripted_clock([10.0, 10.1, 10.2, 10.3, 10.4]))
    assert s.achieved_hz == 0.0
    for _ in range(5):
        s.sample_once()
    assert s.achieved_hz == pytest.approx(10.0)  # 4 intervals over 0.4 s


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        Sampler(FakeNvml(), rate_hz=0)
