"""advise's sharing modes (gpucast.advisor.sharing): a small job is offered time-sliced (HAMi core
limit), under MPS (SM limit) and on the smallest MIG slice that holds it, with a line saying
which is cheapest and why."""

from __future__ import annotations

import pytest

import gpucast
from gpucast import Job
from gpucast.advisor import advise, sharing
from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import mps
from gpucast.hardware import get_gpu
from gpucast.integrations.resources import gpu_share


@pytest.fixture(scope="module")
def small():
    return advise("ppo-mlp", ["a100-80gb", "t4"], samples_per_epoch=1000, batches=[256], precisions=["fp32"],
                  counts=[1])


def test_each_mode_the_gpu_supports_is_an_option(small):
    modes = {(o.gpu.split(":")[0], o.mode) for o in small.options if o.mode}
    assert modes == {("a100-80gb", "timeslice"), ("a100-80gb", "mps"), ("a100-80gb", "mig"),
                     ("t4", "timeslice"), ("t4", "mps")}          # a T4 has no MIG
    ids = [o.id for o in small.options]
    assert len(ids) == len(set(ids))


def test_the_modes_slowdowns_are_the_models(small):
    pred = gpucast.predict(Job("ppo-mlp", batch_size=256), "a100-80gb")
    s = gpu_share(pred)
    ts = next(o for o in small.options if o.gpu == "a100-80gb" and o.mode == "timeslice")
    mp = next(o for o in small.options if o.gpu == "a100-80gb" and o.mode == "mps")
    tl = sharing.timeline(pred)
    want_ts = timeshare.throttled([tl], [timeshare.slowdowns([tl, tl], timeshare.CURRENT, "timeslice")[0]], [s.share])[0]
    want_mps = mps.slowdowns([tl, tl], [s.share, s.share], timeshare.CURRENT)[0]
    assert ts.share == mp.share == s.share
    assert ts.slowdown == pytest.approx(max(1.0, want_ts)) and mp.slowdown == pytest.approx(max(1.0, want_mps))
    assert "HAMi gpucores" in ts.notes[0] and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in mp.notes[0]


def test_the_slice_is_the_smallest_that_holds_the_job_and_is_priced_at_its_share(small):
    mg = next(o for o in small.options if o.mode == "mig")
    whole = next(o for o in small.options if o.gpu == "a100-80gb" and not o.mode)
    need = gpu_share(gpucast.predict(Job("ppo-mlp", batch_size=256), "a100-80gb")).memory_bytes
    assert get_gpu(mg.gpu).memory_bytes >= need
    assert mg.gpu == sharing.smallest_slice("a100-80gb", need).full_name
    assert mg.usd_per_gpu_hour == pytest.approx(whole.usd_per_gpu_hour / 7)     # 1g of 7 compute slices
    assert sharing.smallest_slice("a100-80gb", 200 * 2**30) is None            # nothing below 7g holds it
    assert sharing.smallest_slice("t4", 1) is None


def test_a_line_says_which_mode_is_cheapest_and_why(small):
    lines = [n for n in small.notes if n.startswith("sharing one a100-80gb:")]
    assert len(lines) == 1
    best = min((o for o in small.options if o.mode and o.gpu.startswith("a100-80gb")),
               key=lambda o: (o.cost_per_run, o.run_s))
    assert f": {best.mode} is cheapest per run" in lines[0]
    assert "MPS" in lines[0] and "slice" in lines[0]


def test_no_share_no_modes():
    a = advise("ppo-mlp", ["a100-80gb"], samples_per_epoch=1000, batches=[256], precisions=["fp32"], counts=[1],
               share=False)
    assert not any(o.mode for o in a.options)
