"""The event engine on hand-checkable traces: ordering, gang scheduling (strict FIFO and EASY
backfilling), completion arithmetic under sharing, the out-of-memory path, the utilization
timeline, the busy periods and determinism."""

from __future__ import annotations

import pytest

from gpucast import cluster
from gpucast.cluster import timeshare
from gpucast.cluster.engine import Simulator
from gpucast.cluster.policies import make_policy
from gpucast.cluster.truth import Estimate

from simhelpers import GB, HandTruth, job, trace


def run(tr, policy, table, n_gpus=1, gpus_per_node=8, **kw):
    spec = cluster.ClusterSpec.homogeneous("v100-16gb", n_gpus, gpus_per_node)
    return Simulator(tr, spec, make_policy(policy, **kw.pop("policy_params", {})), HandTruth(table), **kw).run()


def pair_slowdown(util_pct, step_s=1.0):
    """The co-location model's slowdown of each of two identical jobs (one idle gap per step, the
    hand truth's timeline)."""
    tl = timeshare.JobTimeline(step_s, util_pct / 100.0 * step_s, 1.0, 0.5)
    return timeshare.slowdowns([tl, tl])[0]


def recs(res):
    return {r.job_id: r for r in res.records}


ONE = {"w": (60.0, 2 * GB, 1.0, 2 * GB)}   # util 60 %, 2 GB, 1 s per step


def test_fifo_exclusive_two_jobs_one_gpu():
    res = run(trace(job("a", 0, steps=100), job("b", 10, steps=50)), "slot", ONE)
    r = recs(res)
    assert (r["a"].start_s, r["a"].finish_s) == (0.0, 100.0)
    assert (r["b"].start_s, r["b"].finish_s) == (100.0, 150.0)   # waits for the GPU
    assert r["b"].solo_duration_s == 50.0 and r["b"].gpu_seconds == 50.0
    assert res.end_s == 150.0


def test_finish_before_arrival_at_the_same_instant():
    res = run(trace(job("a", 0, steps=100), job("b", 100, steps=10)), "slot", ONE)
    assert recs(res)["b"].start_s == 100.0 and recs(res)["b"].finish_s == 110.0
    assert res.busy_intervals == [(0.0, 110.0)]      # a leaves as b arrives: no idle gap


def test_busy_intervals_leave_out_stretches_with_no_job():
    # a runs 0..100, nothing is queued or running 100..300, b runs 300..350
    res = run(trace(job("a", 0, steps=100), job("b", 300, steps=50)), "slot", ONE)
    assert res.busy_intervals == [(0.0, 100.0), (300.0, 350.0)]
    from gpucast.cluster.metrics import summarize

    s = summarize(res)
    assert s["gpu_util_busy_pct"] == pytest.approx(60.0)              # 60 % whenever a job is there
    assert s["gpu_util_pct"] == pytest.approx(60.0 * 150 / 350)       # diluted by the idle gap
    # a waiting job counts as busy even while the GPU it waits for is held: one interval
    res = run(trace(job("a", 0, steps=100), job("b", 10, steps=50)), "slot", ONE)
    assert res.busy_intervals == [(0.0, 150.0)]


def test_utilization_timeline_is_a_step_function():
    res = run(trace(job("a", 0, steps=100), job("b", 50, steps=100)), "slot", ONE, n_gpus=2)
    # one GPU of two at 60 %, then both, then one, then none
    assert res.util_timeline == [(0.0, 30.0), (50.0, 60.0), (100.0, 30.0), (150.0, 0.0)]


def test_gang_job_waits_for_all_its_gpus_and_fifo_holds_the_rest():
    res = run(trace(job("a", 0, steps=100), job("big", 1, steps=10, gpus=4), job("c", 2, steps=5)),
              "slot-fifo", ONE, n_gpus=4)
    r = recs(res)
    assert r["big"].start_s == 100.0 and r["big"].finish_s == 110.0
    assert r["c"].start_s == 110.0          # strict FIFO: no overtaking the waiting gang job
    assert r["big"].gpu_seconds == 40.0
    # three GPUs of four idle from 1 to 100 behind the gang head: 15 % (a's 60 % on one GPU)
    assert res.util_timeline[:2] == [(0.0, 15.0), (100.0, 60.0)]


# EASY backfilling (``slot``). ONE's step is 1 s, so a job's time limit (its solo run time on the
# reference GPU) is its step count in seconds.

def test_backfill_starts_a_short_job_that_does_not_delay_the_gang_head():
    # a holds 1 GPU of 4 until 100; big (4 GPUs) is the blocked head, reserved for 100 (a's end),
    # with no GPU to spare then. c needs 1 GPU for 5 s: it ends at 7 <= 100, so it starts now.
    res = run(trace(job("a", 0, steps=100), job("big", 1, steps=10, gpus=4), job("c", 2, steps=5)),
              "slot", ONE, n_gpus=4)
    r = recs(res)
    assert (r["c"].start_s, r["c"].finish_s) == (2.0, 7.0)      # strict FIFO: 110, 115
    assert (r["big"].start_s, r["big"].finish_s) == (100.0, 110.0)   # not delayed
    assert res.util_timeline[:3] == [(0.0, 15.0), (2.0, 30.0), (7.0, 15.0)]


def test_backfill_refuses_a_long_job_that_would_delay_the_head():
    # as above, but d needs 1 GPU for 200 s: it would hold a GPU big needs at 100 (0 to spare)
    res = run(trace(job("a", 0, steps=100), job("big", 1, steps=10, gpus=4), job("d", 2, steps=200)),
              "slot", ONE, n_gpus=4)
    r = recs(res)
    assert r["big"].start_s == 100.0
    assert r["d"].start_s == 110.0          # after big, as under strict FIFO


def test_backfill_uses_the_gpus_the_head_leaves_over_then_stops():
    # 6 GPUs; a holds 2 until 100; big needs 5: 4 free now, 6 at 100, so 1 GPU is left over then.
    # long1 (1 GPU, 500 s, arrives at 2) runs past 100 on that spare GPU; long2 (arrives at 3, no
    # start or stop since long1's: the remembered reservation) finds none to spare and waits.
    res = run(trace(job("a", 0, steps=100, gpus=2), job("big", 1, steps=10, gpus=5),
                    job("long1", 2, steps=500), job("long2", 3, steps=500)), "slot", ONE, n_gpus=6)
    r = recs(res)
    assert r["long1"].start_s == 2.0
    assert (r["big"].start_s, r["big"].finish_s) == (100.0, 110.0)   # not delayed
    assert r["long2"].start_s == 110.0      # 1 GPU of 6 free from 100: long1's; then big's


def test_shared_gpu_completion_arithmetic():
    table = {"w": (50.0, 2 * GB, 1.0, 2 * GB)}
    res = run(trace(job("a", 0, steps=100), job("b", 10, steps=50)), "packing", table)
    s = pair_slowdown(50.0)
    assert 1.0 < s < 2.0
    r = recs(res)
    assert r["b"].start_s == 10.0
    assert r["b"].finish_s == pytest.approx(10 + 50 * s)
    # a: 10 s alone, 50 steps at 1/s while shared, the last 40 alone
    assert r["a"].finish_s == pytest.approx(10 + 50 * s + 40)
    assert res.util_timeline[1] == (10.0, pytest.approx(100 / s))


def test_oom_loses_work_since_checkpoint_requeues_and_counts():
    # told 4 GB each (fits twice on 16 GB), truly 10 GB each: the later one fails
    table = {"w": (50.0, 10 * GB, 1.0, 4 * GB)}
    res = run(trace(job("a", 0, steps=1000), job("b", 10, steps=100)), "packing", table,
              checkpoint_s=25.0, oom_after_s=60.0)
    s = pair_slowdown(50.0)
    r = recs(res)
    assert r["a"].oom_failures == 0 and r["b"].oom_failures == 1 and r["b"].restarts == 1
    # b ran 10..70 shared; checkpoints at 35 and 60 of its run: work at 60 is 50/s, the rest is lost
    a_fin = 70 + (1000 - 10 - 60 / s)
    assert r["a"].finish_s == pytest.approx(a_fin)
    assert r["b"].finish_s == pytest.approx(a_fin + 100 - 50 / s)   # restarted alone after a
    assert r["b"].gpu_seconds == pytest.approx(60 + 100 - 50 / s)


def test_oom_check_survives_a_re_rate_before_it_fires():
    """An overcommitted GPU fails even if a third job changes its co-location (and so re-rates
    the job that will fail) before the check: the check belongs to the placement."""
    table = {"w": (30.0, 10 * GB, 1.0, 4 * GB), "small": (10.0, 1 * GB, 1.0, 1 * GB)}
    res = run(trace(job("a", 0, steps=1000), job("b", 10, steps=1000), job("c", 20, workload="small", steps=5)),
              "packing", table, checkpoint_s=25.0, oom_after_s=60.0)
    r = recs(res)
    # a + b = 20 GB on a 16 GB GPU; c arrives at 20 and re-rates both; b still fails at 10 + 60.
    assert r["b"].oom_failures == 1 and r["a"].oom_failures == 0
    assert r["c"].oom_failures == 0 and r["c"].finish_s is not None


def test_a_job_too_big_for_any_gpu_is_abandoned_not_looping():
    table = {"w": (50.0, 2 * GB, 1.0, 2 * GB), "huge": (50.0, 40 * GB, 1.0, 40 * GB)}
    res = run(trace(job("h", 0, workload="huge", steps=100), job("ok", 1, steps=10)), "slot", table)
    r = recs(res)
    assert r["h"].finish_s is None and r["h"].oom_failures == 1
    assert r["ok"].finish_s == pytest.approx(60 + 10)   # waited for h's failure at 60 s


def test_profiling_pays_a_minute_on_the_reserved_pool():
    res = run(trace(job("a", 0, steps=100)), "profiling", ONE, n_gpus=2,
              policy_params={"profiling_gpus": 1, "profile_s": 60.0})
    r = recs(res)["a"]
    assert (r.start_s, r.finish_s, r.gpu_seconds) == (60.0, 160.0, 160.0)


def _fake(profile, gpu):  # synthetic predictor for determinism tests (no torch)
    return Estimate(70.0, (60.0, 80.0), 3e9, (2e9, 6e9), 0.05, (0.04, 0.06))


def test_same_seed_same_result_and_the_seed_matters():
    tr = cluster.synthetic(300, seed=3, mean_interarrival_s=20,
                           mix={("mlp-small", 64, "fp32"): 1, ("resnet18", 32, "fp32"): 1})
    spec = cluster.ClusterSpec.homogeneous("a100-80gb", 8)
    a = cluster.simulate(tr, spec, "gpucast", seed=1, predictor=_fake, measurements_dir=None)
    b = cluster.simulate(tr, spec, "gpucast", seed=1, predictor=_fake, measurements_dir=None)
    c = cluster.simulate(tr, spec, "gpucast", seed=2, predictor=_fake, measurements_dir=None)
    assert a == b
    assert [r.solo_duration_s for r in a.records] != [r.solo_duration_s for r in c.records]
    from gpucast.cluster import errors

    assert a.params["seed"] == 1 and a.params["error_sigma"] == errors.measured().as_dict()


def test_progress_reaches_total():
    seen = []
    tr = cluster.synthetic(50, seed=0, mix={("mlp-small", 64, "fp32"): 1})
    cluster.simulate(tr, cluster.ClusterSpec.homogeneous("a100-80gb", 4), "slot", predictor=_fake,
                     progress=lambda d, n: seen.append((d, n)), measurements_dir=None)
    assert seen[-1] == (50, 50) and all(n == 50 for _, n in seen)
