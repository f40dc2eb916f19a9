"""The HTML report on hand-made SimResults (synthetic test fixtures, not simulator output)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from gpucast import fileio
from gpucast.cluster import report
from gpucast.cluster.result import JobRecord, SimResult


def _result(policy: str, n_jobs: int = 3, timeline=None, end_s: float = 7200.0, **params) -> SimResult:
    recs = [JobRecord(job_id=f"j{i}", workload="resnet50", batch_size=32, gpus=1, arrival_s=60.0 * i,
                      start_s=60.0 * i + 30.0, finish_s=60.0 * i + 3600.0, solo_duration_s=3600.0,
                      gpu_seconds=3600.0, oom_failures=0, restarts=0) for i in range(n_jobs)]
    return SimResult(policy=policy, n_gpus=4, gpu_types={"v100-16gb": 4}, records=recs,
                     util_timeline=timeline or [(0.0, 25.0), (3600.0, 75.0)], end_s=end_s,
                     params=dict(seed=0, error_sigma=0.2, checkpoint_s=1800.0, trace="synthetic-fixture",
                                 **params))


def test_report_is_self_contained_and_complete(tmp_path):
    path = report.write_report(tmp_path / "r.html", [_result("slot"), _result("gpucast")])
    text = path.read_text(encoding="utf-8")
    # Opens offline: no script is loaded from the network, plotly.js is inlined once.
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", text, re.I)
    assert text.count("plotly.js v") == 1  # the bundle's banner: inlined, once for three figures
    for what in ("Cluster GPU utilization over time", "Job completion time", "Queueing delay", "Assumptions"):
        assert what in text
    # summary table: both policies; busy while a job is there, from the first arrival (0) to the
    # last finish (3720): 25 % for 3600 s, 75 % for 120 s -> 99000 / 3720 = 26.6 %; over the whole
    # run, 25 % for 1 h then 75 % for 1 h -> 50.0 %; JCT 1.00 h
    assert "<th>GPU util % (busy)</th><th>GPU util % (all time)</th>" in text
    assert "<td>slot</td><td>26.6</td><td>50.0</td>" in text and "<td>gpucast</td><td>26.6</td><td>50.0</td>" in text
    assert "<td>1.00</td>" in text
    # assumptions name the parameters
    for what in ("seed: 0", "prediction error sigma: 0.2", "checkpoint interval (s): 1800.0",
                 "trace: synthetic-fixture", "4 GPUs (4 x v100-16gb)"):
        assert what in text
    assert "Change from slot" in text and "util +0.0%" in text
    assert not [p for p in os.listdir(tmp_path) if p != "r.html"]  # no temporary file left behind


def test_assumptions_keep_policy_parameters_apart():
    a = _result("slot", policy_params={"max_jobs_per_gpu": 1}, trace_notes=["3 jobs capped to 4 GPUs"])
    b = _result("horus", policy_params={"max_jobs_per_gpu": 3, "lookahead": 8},
                trace_notes=["3 jobs capped to 4 GPUs"])
    text = report.assumptions([a, b])
    assert "policy_params" not in text
    assert text.count("3 jobs capped to 4 GPUs") == 1
    assert report.policy_parameters([a, b]) == [("slot", "max_jobs_per_gpu=1"),
                                                ("horus", "lookahead=8, max_jobs_per_gpu=3")]
    page = report.render([a, b])
    assert "<li>horus: lookahead=8, max_jobs_per_gpu=3</li>" in page
    # a shared parameter that differs between runs shows both values
    c = _result("gpucast")
    c.params["error_sigma"] = 0.5
    assert "prediction error sigma: 0.2 / 0.5" in report.assumptions([a, c])


def test_long_timelines_are_binned(tmp_path):
    # 100,000 steps alternating 0 / 100 %: plotted as 5,000 bin means, each 50 %.
    n = 100_000
    timeline = [(float(i), 100.0 * (i % 2)) for i in range(n)]
    res = _result("slot", timeline=timeline, end_s=float(n))
    t, u = report.util_points(res.util_timeline, res.end_s)
    assert len(t) == len(u) == report.MAX_POINTS
    assert np.allclose(u, 50.0)
    path = report.write_report(tmp_path / "big.html", [res])
    # plotly.js itself is ~4.7 MB; the data must not add much more than that
    assert path.stat().st_size < 6_000_000


def test_short_timelines_are_drawn_exactly():
    t, u = report.util_points([(0.0, 10.0), (5.0, 40.0), (20.0, 0.0)], 10.0)
    # the point past the end is dropped; the last value holds until the end
    assert t == [0.0, 5.0, 10.0] and u == [10.0, 40.0, 40.0]


def test_cdf_points():
    x, y = report.cdf_points(np.array([3.0, 1.0, 2.0, 4.0]))
    assert x == [1.0, 2.0, 3.0, 4.0] and y == [0.25, 0.5, 0.75, 1.0]
    x, y = report.cdf_points(np.arange(1, 10_001, dtype=float), max_points=11)
    assert len(x) == 11 and x[-1] == 10_000.0 and y[-1] == 1.0
    # each point is on the empirical CDF: P(X <= x) = y
    for xi, yi in zip(x, y):
        assert np.mean(np.arange(1, 10_001) <= xi) >= yi - 1e-12
    assert report.cdf_points(np.array([])) == ([], [])


def test_write_is_atomic_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "r.html"
    target.write_text("old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(fileio.os, "replace", boom)  # the report's writer (gpucast.fileio)
    with pytest.raises(OSError):
        report.write_report(target, [_result("slot")])
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.html"]


def test_no_results_is_an_error():
    with pytest.raises(ValueError):
        report.render([])
