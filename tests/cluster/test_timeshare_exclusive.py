"""Exclusive time slices (``Constants.exclusive``): on a data-center GPU the jobs' kernels together
hold at most the whole GPU; on a GeForce card (where the measured-pairs constants were fitted) and
where the GPU is not known, the model is as fitted."""

import math

import pytest

from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import Constants, JobTimeline
from gpucast.cluster.timeshare.model import capped, data_center


@pytest.mark.parametrize("gpu", ["k80", "p100", "v100-16gb", "t4", "a10", "l4", "a100-40gb", "h100", "h200", "b200"])
def test_data_center_gpus_take_the_cap(gpu):
    assert data_center(gpu)
    assert timeshare.CURRENT.on(gpu).exclusive == "yes"


@pytest.mark.parametrize("gpu", ["rtx-3090", "rtx-4090", "rtx-5090", None, "no-such-gpu"])
def test_geforce_cards_and_unknown_gpus_keep_the_fit(gpu):
    assert not data_center(gpu)
    assert timeshare.CURRENT.on(gpu).exclusive == "no"


def test_explicit_settings_are_not_resolved_and_bad_ones_are_refused():
    c = Constants(exclusive="no")
    assert c.on("h200") is c
    assert Constants(exclusive="yes").on("rtx-3090").exclusive == "yes"
    with pytest.raises(ValueError, match="exclusive"):
        Constants(exclusive="sometimes")


def test_two_saturated_jobs_halve_under_exclusive_slices():
    # Two jobs whose kernels fill their steps: one context at a time gives each half the GPU
    # (the linear stretch the RTX 3090 pairs were fitted with gives them ~0.6 each).
    t = JobTimeline(0.1, 0.1, 0.0, 0.5)
    c = timeshare.CURRENT
    free = timeshare.slowdowns([t, t], c.on("rtx-3090"))
    assert 1.0 / free[0] > 0.55
    assert timeshare.slowdowns([t, t], c.on("h100")) == pytest.approx([2.0, 2.0], rel=1e-12)
    three = timeshare.slowdowns([t, t, t], c.on("h100"))
    assert three == pytest.approx([3.0] * 3, rel=1e-12)


def test_the_cap_binds_only_beyond_one_gpu_of_work():
    heavy = JobTimeline(0.1, 0.09, 2.0, 0.6)
    light = JobTimeline(0.05, 0.01, 4.0, 0.2)
    c = timeshare.CURRENT
    for jobs in ([heavy, heavy], [heavy, light], [light, light], [heavy, light, light]):
        plain = timeshare.slowdowns(jobs, c.on(None))
        cap = timeshare.slowdowns(jobs, c.on("a100-80gb"))
        work_plain = sum(j.util / s for j, s in zip(jobs, plain))
        work = sum(j.util / s for j, s in zip(jobs, cap))
        if work_plain > 1.0:
            assert work == pytest.approx(1.0, rel=1e-12)
            assert all(x > y for x, y in zip(cap, plain))
        else:
            assert cap == plain
    # a light pair does not reach one GPU of work: untouched
    assert sum(j.util for j in (light, light)) < 1.0


def test_capped_scales_every_slowdown_by_the_excess_work():
    sd = capped((1.25, 1.6), (0.9, 0.8), "yes")
    w = 0.9 / 1.25 + 0.8 / 1.6
    assert sd == pytest.approx((1.25 * w, 1.6 * w))
    assert capped((1.25, 1.6), (0.9, 0.8), "no") == (1.25, 1.6)
    assert capped((1.25, 1.6), (0.9, 0.8), "data-center") == (1.25, 1.6)    # unresolved: off


def test_mps_shares_one_gpus_sms_too():
    # MPS runs the kernels at once, but kernels that fill the SMs share them: two saturated jobs
    # keep half each, as under time slices; the limited-MPS model agrees with the mode at limits 1
    from gpucast.cluster.timeshare import mps

    t = JobTimeline(0.1, 0.1, 0.0, 0.5)
    c = timeshare.CURRENT
    assert timeshare.slowdowns([t, t], c.on("h100"), "mps") == pytest.approx([2.0, 2.0])
    assert timeshare.slowdowns([t, t], c.on(None), "mps")[0] < 1.8
    light = JobTimeline(0.1, 0.03, 3.0, 0.3)
    for jobs in ([t, t], [t, light], [light, light]):
        assert mps.slowdowns(jobs, [None] * len(jobs), c.on("h100")) == pytest.approx(
            timeshare.slowdowns(jobs, c.on("h100"), "mps"), rel=1e-9)
    assert timeshare.slowdowns([light, light], c.on("h100"), "mps") == timeshare.slowdowns([light, light],
                                                                                           c.on(None), "mps")


def test_the_array_solve_caps_as_the_set_solve():
    import numpy as np

    c = timeshare.CURRENT.on("h200")
    jobs = [(JobTimeline(0.1, 0.095, 1.0, 0.7), JobTimeline(0.2, 0.15, 3.0, 0.3)),
            (JobTimeline(0.1, 0.02, 5.0, 0.1), JobTimeline(0.03, 0.025, 2.0, 0.9))]
    arr = timeshare.solve(np.array([[a.step_s for a, _ in jobs], [b.step_s for _, b in jobs]]),
                          np.array([[a.busy_s for a, _ in jobs], [b.busy_s for _, b in jobs]]),
                          np.array([[a.gaps for a, _ in jobs], [b.gaps for _, b in jobs]]),
                          np.array([[a.mem_bound for a, _ in jobs], [b.mem_bound for _, b in jobs]]), c)
    for k, pair in enumerate(jobs):
        one = timeshare.slowdowns(list(pair), c)
        # the array iteration stops at its tolerance over all columns: agreement to its order
        assert [arr[0, k], arr[1, k]] == pytest.approx(one, rel=1e-5)
        assert pair[0].util / arr[0, k] + pair[1].util / arr[1, k] <= 1.0 + 1e-12
        assert math.isfinite(arr[0, k])


def test_the_policys_margin_follows_the_gpus_constants():
    from gpucast.cluster import make_policy
    from gpucast.cluster.policies.gpucast import EXCLUSIVE_MIN_GAIN

    p = make_policy("gpucast")
    assert p._gain("v100-16gb") == 0.0           # the simulator's default world: the fit as it is
    with timeshare.predicting_with(timeshare.CURRENT):
        assert p._gain("v100-16gb") == EXCLUSIVE_MIN_GAIN == 0.2
        assert p._gain("rtx-3090") == 0.0
    assert timeshare.predicting() == timeshare.MEASURED_PAIRS
    assert make_policy("gpucast", min_gain=0.05)._gain("h100") == 0.05
