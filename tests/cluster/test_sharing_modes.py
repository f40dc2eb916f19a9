"""Sharing modes of one GPU (gpucast.cluster.timeshare): time-slicing and MPS as the mode the
simulator and its policies run in, and HAMi core limits as a throttle on top of either."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import gpucast.cluster as cl
from gpucast.cluster import interference, timeshare
from gpucast.cluster.timeshare import JobTimeline

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)


@pytest.mark.parametrize("mode", timeshare.MODES)
def test_a_job_slows_more_the_more_its_neighbour_wants_the_sms(mode):
    job = JobTimeline.from_util(50, 0.1, gaps=4, mem_bound=0.3)
    seen = [timeshare.slowdowns([job, JobTimeline.from_util(u, 0.1, gaps=4, mem_bound=0.3)], mode=mode)[0]
            for u in (10, 30, 50, 70, 90, 100)]
    assert all(a < b for a, b in zip(seen, seen[1:])), seen
    assert seen[0] > 1.0


def test_mps_pays_no_context_switch():
    """Two jobs with long bursts: time-sliced they also pay the switches between contexts and
    wait for each other's slices, under MPS they only share the SMs."""
    for util in (60, 90, 100):
        job = JobTimeline.from_util(util, 0.1, gaps=1.0, mem_bound=0.0)
        ts_sd = timeshare.slowdowns([job, job], mode="timeslice")
        mps_sd = timeshare.slowdowns([job, job], mode="mps")
        assert 1.0 < mps_sd[0] < ts_sd[0], (util, mps_sd, ts_sd)


def test_the_mode_in_force_is_the_default_and_a_bad_one_is_refused():
    a, b = JobTimeline.from_util(60, 0.1, gaps=2), JobTimeline.from_util(40, 0.1, gaps=2)
    assert timeshare.mode() == "timeslice"
    try:
        timeshare.set_mode("mps")
        assert timeshare.slowdowns([a, b]) == timeshare.slowdowns([a, b], mode="mps")
    finally:
        timeshare.set_mode(None)
    assert timeshare.slowdowns([a, b]) == timeshare.slowdowns([a, b], mode="timeslice")
    with pytest.raises(ValueError, match="unknown sharing mode 'mig'"):
        timeshare.set_mode("mig")


def test_a_hami_core_limit_caps_a_lone_job_at_its_share():
    hot = JobTimeline.from_util(90, 0.1, gaps=2)
    (sd,) = timeshare.throttled([hot], [1.0], [0.5])
    assert sd == pytest.approx(1.8)
    assert hot.busy_s / (hot.step_s * sd) == pytest.approx(0.5)         # its kernels hold the GPU half the time
    cool = JobTimeline.from_util(30, 0.1, gaps=2)
    assert timeshare.throttled([cool], [1.0], [0.5]) == [1.0]            # within its limit: not slowed
    assert timeshare.throttled([hot, cool], [1.3, 1.2], [None, 1.0]) == [1.3, 1.2]
    with pytest.raises(ValueError, match="a core limit must be a share in"):
        timeshare.throttled([hot], [1.0], [0.0])


def test_measured_pairs_answer_only_when_time_sliced():
    pairs = interference.measured_pair_slowdowns("v100-16gb")
    (ja, jb), (sa, sb) = next(iter(sorted(pairs.items())))
    assert interference.measured_pair(2, [ja, jb], "v100-16gb") == [sa, sb]
    try:
        timeshare.set_mode("mps")
        assert interference.measured_pair(2, [ja, jb], "v100-16gb") is None
    finally:
        timeshare.set_mode(None)


def test_simulate_runs_in_the_mode_asked_and_restores_the_one_in_force():
    tr = cl.load_trace("philly-mix", limit=60)
    res = cl.simulate(tr, cl.ClusterSpec.homogeneous("v100-16gb", 8), "gpucast", seed=0, sharing="mps")
    assert res.params["sharing"] == "mps" and timeshare.mode() == "timeslice"
    again = cl.simulate(tr, cl.ClusterSpec.homogeneous("v100-16gb", 8), "gpucast", seed=0)
    assert again.params["sharing"] == "timeslice"
    assert [r.finish_s for r in res.records] != [r.finish_s for r in again.records]   # the mode matters


def test_the_cli_names_the_modes_and_points_mig_to_gpu_types():
    from gpucast.cli import app

    r = CliRunner().invoke(app, ["simulate", "--limit", "5", "--colocation-mode", "mig"])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown --colocation-mode 'mig'; choose from timeslice, mps")
    assert "--mig-layout" in lines[0]
