"""gpucast.advisor: the front, the recommendation, the ranges, the search's bounds (real captures
of small zoo models; the pure front/recommend checks also run on hand-made options, said so)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucast
from gpucast import Job
from gpucast.advisor import NO, RISKY, AdviseError, advise
from gpucast.advisor.front import pareto, recommend
from gpucast.advisor.options import FITS, Option, memory_fit
from gpucast.advisor.prices import parse

GPUS = ["t4", "a10", "a100-80gb"]


@pytest.fixture(scope="module")
def cifar():
    return advise("resnet18-cifar", GPUS, epochs=30, counts=[1, 2, 4])


def dominated(o: Option, by: Option) -> bool:
    return (by.epoch_s <= o.epoch_s and by.cost_per_epoch <= o.cost_per_epoch
            and (by.epoch_s < o.epoch_s or by.cost_per_epoch < o.cost_per_epoch))


def test_the_front_is_non_dominated_and_covers_every_fitting_option(cifar):
    fitting = [o for o in cifar.options if o.memory_fit != NO]
    front = cifar.front_options
    assert len(front) >= 2 and len(fitting) > len(front)
    for o in front:
        assert o.memory_fit != NO
        assert not any(dominated(o, other) for other in fitting)
    for o in fitting:
        if o not in front:
            assert any(dominated(o, f) or (f.epoch_s, f.cost_per_epoch) == (o.epoch_s, o.cost_per_epoch) for f in front)


def test_the_ranges_are_the_step_interval_carried_through(cifar):
    o = next(o for o in cifar.options if o.gpus == 2 and o.share == 1 and o.gpu == "a10")
    p = gpucast.predict(Job("resnet18-cifar", batch_size=o.batch_size, precision=o.precision, gpus=2), "a10")
    steps = cifar.samples_per_epoch / (o.batch_size * 2)
    assert o.epoch_s == pytest.approx(steps * p.step_time_s)
    assert o.epoch_interval_s == pytest.approx(tuple(steps * v for v in p.step_time_interval))
    rate = o.usd_per_gpu_hour * 2 / 3600
    assert o.cost_per_epoch_interval == pytest.approx(tuple(v * rate for v in o.epoch_interval_s))
    assert o.cost_per_run == pytest.approx(30 * o.cost_per_epoch)
    assert o.epoch_interval_s[0] <= o.epoch_s <= o.epoch_interval_s[1]


def test_a_share_is_billed_at_its_fraction_and_slowed_by_a_neighbour():
    small = advise("ppo-mlp", ["t4", "a10"], samples_per_epoch=1000, batches=[256], precisions=["fp32"])
    shared = [o for o in small.options if o.shared]
    assert shared  # an RL job's GPU is idle most of the time: a small share
    assert not any(o.shared for o in advise("resnet50", ["t4"], counts=[1], batches=[64], precisions=["amp-fp16"]).options)
    for s in shared:
        whole = next(o for o in small.options if not o.shared and (o.gpu, o.gpus, o.batch_size, o.precision) ==
                     (s.gpu, 1, s.batch_size, s.precision))
        assert 0 < s.share <= 0.5 and s.slowdown >= 1.0
        assert s.epoch_s == pytest.approx(whole.epoch_s * s.slowdown)
        assert s.cost_per_epoch == pytest.approx(whole.cost_per_epoch * s.share * s.slowdown)


def test_a_deadline_no_option_meets_says_so_and_names_the_fastest(cifar):
    a = advise("resnet18-cifar", GPUS, epochs=30, counts=[1, 2, 4], deadline_s=1.0)
    assert a.recommended is None
    fitting = [o for o in a.options if o.memory_fit != NO]
    fastest = min(fitting, key=lambda o: (o.run_s, o.cost_per_run))
    assert a.message.startswith("no option meets the deadline of 1 s")
    assert f"the fastest is {fastest.id}" in a.message


def test_a_deadline_picks_the_cheapest_that_meets_it_and_a_budget_the_fastest_within_it(cifar):
    runs = sorted(o.run_s for o in cifar.options if o.memory_fit != NO)
    deadline = runs[len(runs) // 2]
    a = advise("resnet18-cifar", GPUS, epochs=30, counts=[1, 2, 4], deadline_s=deadline)
    ok = [o for o in a.options if o.memory_fit == FITS and o.run_s <= deadline]
    assert a.best.run_s <= deadline and a.best.cost_per_run == min(o.cost_per_run for o in ok)
    budget = sorted(o.cost_per_run for o in cifar.options if o.memory_fit != NO)[len(runs) // 2]
    b = advise("resnet18-cifar", GPUS, epochs=30, counts=[1, 2, 4], budget_usd=budget)
    ok = [o for o in b.options if o.memory_fit == FITS and o.cost_per_run <= budget]
    assert b.best.cost_per_run <= budget and b.best.run_s == min(o.run_s for o in ok)


def test_an_option_that_does_not_fit_is_never_recommended_even_when_it_is_cheapest():
    # A price file that makes the small GPU almost free: its options that do not fit must lose anyway.
    prices = parse([{"gpu": "t4", "usd_per_gpu_hour": 0.0001}, {"gpu": "a100-80gb", "usd_per_gpu_hour": 5.0}], "test")
    a = advise(Job("resnet50", batch_size=64), ["t4", "a100-80gb"], prices=prices, batches=[64, 512],
               precisions=["fp32"], counts=[1], share=False)
    too_big = [o for o in a.options if o.memory_fit == NO]
    assert too_big and all(o.gpu == "t4" for o in too_big)  # b512 fp32 does not fit 16 GB
    assert a.best is not None and a.best.memory_fit != NO
    assert all(a.options[i].memory_fit != NO for i in a.front)
    cheapest_no = min(too_big, key=lambda o: o.cost_per_run)
    assert cheapest_no.cost_per_run < a.best.cost_per_run or a.best.gpu == "t4"


def test_counts_respect_the_job_and_the_node():
    rl = advise("ppo-mlp", ["t4"], samples_per_epoch=1000, precisions=["fp32"], batches=[256])
    assert {o.gpus for o in rl.options} == {1}
    assert any("not data parallel" in n for n in rl.notes)
    two = advise("mlp-small", ["t4"], max_gpus=2, precisions=["fp32"], batches=[64], samples_per_epoch=6400)
    assert {o.gpus for o in two.options} == {1, 2}
    with pytest.raises(AdviseError, match="above max_gpus"):
        advise("mlp-small", ["t4"], counts=[4], max_gpus=2, samples_per_epoch=6400)
    with pytest.raises(AdviseError, match="one node"):
        advise("mlp-small", ["t4"], counts=[16], samples_per_epoch=6400)


def test_keeping_the_global_batch_uses_accumulation():
    a = advise(Job("mlp-small", batch_size=64), ["t4"], keep_global_batch=True, precisions=["fp32"], samples_per_epoch=6400)
    assert a.options and all(o.global_batch == 64 for o in a.options)
    assert {o.accumulation for o in a.options} >= {1, 2}
    with pytest.raises(AdviseError, match="does not divide"):
        advise(Job("mlp-small", batch_size=64), ["t4"], keep_global_batch=True, batches=[48], samples_per_epoch=6400)


def test_precisions_are_only_those_the_gpu_runs():
    a = advise("mlp-small", ["k80", "t4", "a10"], counts=[1], batches=[64], share=False, samples_per_epoch=6400,
               prices=parse([{"gpu": g, "usd_per_gpu_hour": 1} for g in ("k80", "t4", "a10")], "test"))
    by = {g: {o.precision for o in a.options if o.gpu == g} for g in ("k80", "t4", "a10")}
    assert by == {"k80": {"fp32"}, "t4": {"fp32", "amp-fp16"}, "a10": {"fp32", "amp-fp16", "amp-bf16"}}


@pytest.mark.parametrize("kwargs, words", [
    (dict(deadline_s=-5), "deadline must be a positive number"),
    (dict(budget_usd=0), "budget must be a positive number"),
    (dict(epochs=float("nan")), "epochs must be a positive number"),
    (dict(samples_per_epoch=0), "samples per epoch must be a positive integer"),
    (dict(precisions=["fp4"]), "unknown precision 'fp4'"),
    (dict(provider="ovh"), "no provider 'ovh'"),
    (dict(batches=[0]), "batch sizes must be positive"),
])
def test_impossible_requests_are_one_error_line(kwargs, words):
    with pytest.raises(AdviseError) as exc:
        advise("mlp-small", ["t4"], **kwargs)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_a_job_without_a_dataset_size_asks_for_samples_per_epoch():
    with pytest.raises(AdviseError, match="--samples-per-epoch"):
        advise("ppo-mlp", ["t4"], batches=[256], precisions=["fp32"])  # an RL environment: no dataset


# ------------------------------------------------------------------ the pure rules, on hand-made options
def _opt(t: float, c: float, fit: str = FITS) -> Option:
    """A synthetic option (no prediction behind it): only time, cost and fit matter to the front."""
    return Option(gpu="t4", gpus=1, batch_size=32, precision="fp32", accumulation=1, share=1.0, step_time_s=t,
                  step_time_interval=(t, t), samples_per_s=1 / t, epoch_s=t, epoch_interval_s=(t, t * 1.5),
                  usd_per_gpu_hour=1, price_offer="", cost_per_epoch=c, cost_per_epoch_interval=(c, c * 1.5), epochs=1,
                  util_pct=50, memory_bytes=1, memory_interval=(1, 2), gpu_memory_bytes=2, memory_fit=fit,
                  bottleneck="gpu")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 100), st.floats(0.1, 100), st.sampled_from([FITS, RISKY, NO])),
                min_size=1, max_size=30))
def test_synthetic_front_is_exactly_the_non_dominated_fitting_options(points):
    opts = [_opt(*p) for p in points]
    front = set(pareto(opts))
    for i, o in enumerate(opts):
        if o.memory_fit == NO:
            assert i not in front
            continue
        beaten = any(dominated(o, q) for q in opts if q.memory_fit != NO)
        twin_first = any(j < i and (q.epoch_s, q.cost_per_epoch) == (o.epoch_s, o.cost_per_epoch)
                         and q.memory_fit != NO for j, q in enumerate(opts))
        assert (i in front) == (not beaten and not twin_first)
    best, _ = recommend(opts)
    if best is not None:
        assert opts[best].memory_fit != NO


def test_synthetic_risky_is_picked_only_when_nothing_safe_meets():
    opts = [_opt(10, 1, RISKY), _opt(5, 3, FITS), _opt(1, 0.5, NO)]
    best, msg = recommend(opts)
    assert best == 1 and "RISKY" not in msg
    best, msg = recommend(opts, deadline_s=20, budget_usd=2)
    assert best == 0 and "RISKY" in msg


def test_memory_fit_states():
    assert memory_fit(8, (6, 9), 10) == FITS
    assert memory_fit(8, (6, 12), 10) == RISKY
    assert memory_fit(11, (9, 12), 10) == NO
    assert math.isclose(_opt(2, 3).cost_per_run, 3)
