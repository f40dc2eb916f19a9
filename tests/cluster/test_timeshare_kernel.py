"""The compiled co-location solve (gpucast.cluster.timeshare.kernel) against the Python iteration
it stands for: the same slowdowns to the last bit (the simulator's digests in test_equivalence.py
rest on it), one set at a time and many in one call, and the same simulation either way."""

import hashlib
import random
import sys

import pytest

pytest.importorskip("numba")

from gpucast.cluster import timeshare  # noqa: E402
from gpucast.cluster.timeshare import kernel as timeshare_kernel  # noqa: E402
from gpucast.cluster.timeshare import JobTimeline  # noqa: E402

# CPython sums floats one after another up to 3.11, as the kernel does; from 3.12 its sum()
# compensates (Neumaier), so there the Python iteration and the kernel agree to rounding only.
BITWISE = sys.version_info < (3, 12)


def _same(a, b):
    if BITWISE:
        return a == b                       # == on tuples of floats: bit for bit
    return all(x == pytest.approx(y, rel=1e-12, abs=1e-15) for x, y in zip(a[0] + a[1], b[0] + b[1]))


def _random_sets(seed: int, count: int):
    rng = random.Random(seed)
    sets = []
    for _ in range(count):
        jobs = []
        for _ in range(rng.choice((2, 2, 3, 4, 5))):
            step = rng.choice((0.01, 0.05, 0.2, 1.0, 1e-14)) * rng.uniform(0.5, 2.0)
            busy = step * rng.choice((1.0, rng.uniform(0.0, 1.0), rng.uniform(0.9, 1.0), 0.02, 1.5, -0.1))
            jobs.append(JobTimeline(step, busy, rng.choice((0.0, 0.5, 1.0, 3.0, 40.0, rng.uniform(0, 200))),
                                    rng.choice((rng.uniform(0, 1), -0.2, 1.3, 0.0, 1.0)),
                                    rng.uniform(0, 0.1) * step,
                                    rng.choice((None, 1.0, 0.5, rng.uniform(0, 30)))))
        sets.append(tuple(jobs))
    return sets


def _world(world):
    # the worlds' constants with the "held" stretch; "exclusive": the measured-pairs constants as a
    # data-center GPU resolves them (Constants.exclusive, the cap applied after the relief)
    if world == "exclusive":
        return timeshare.CURRENT.on("v100-16gb")
    return timeshare.WORLDS[world].with_(stretch="held")


def _python(jobs, c, monkeypatch):
    with monkeypatch.context() as m:
        m.setitem(timeshare_kernel._STATE, "ok", False)
        return timeshare._plain(jobs, c, "timeslice")


@pytest.mark.parametrize("world", ["measured-pairs", "gavel", "exclusive"])
def test_the_kernel_is_the_python_iteration_to_the_last_bit(world, monkeypatch):
    # Two to five jobs of every kind (saturated, idle, many gaps, fewer than one gap, syncs below
    # one, memory-bound shares outside 0..1, busy beyond the step or below 0, a step below the
    # 1e-12 floor), the exclusive-slice bound binding or not.
    assert timeshare_kernel.available()
    c = _world(world)
    sets = _random_sets(11, 1500)
    batch = timeshare_kernel.solve(sets, c, timeshare._ITERATIONS, timeshare._TOLERANCE, timeshare._HELD_CAP)
    for jobs, together in zip(sets, batch):
        alone = timeshare._plain(jobs, c, "timeslice")       # the kernel, one set
        py = _python(jobs, c, monkeypatch)
        assert _same(alone, py), jobs
        assert _same(together, py), jobs
        assert all(x >= 1.0 for x in alone[0])


def test_rules_the_kernel_does_not_cover_stay_in_python(monkeypatch):
    # The "want" stretch (Gavel's fit before issue 17) and MPS are solved by the Python loop:
    # turning the kernel off changes nothing there.
    sets = _random_sets(3, 200)
    want = timeshare.FITTED.with_(stretch="want")
    held = timeshare.CURRENT
    for jobs in sets:
        for c, mode in ((want, "timeslice"), (held, "mps")):
            on = timeshare._plain(jobs, c, mode)
            with monkeypatch.context() as m:
                m.setitem(timeshare_kernel._STATE, "ok", False)
                off = timeshare._plain(jobs, c, mode)
            assert on == off


def test_a_simulation_is_the_same_with_and_without_the_kernel(monkeypatch):
    # The oracle (the policy that asks for the most distinct sets) and gpucast on a busy synthetic
    # trace: every record the same, so the kernel is only a speed-up.
    import gpucast.cluster as cl

    if not BITWISE:
        pytest.skip("from Python 3.12 the two paths agree to rounding, which may break a tie")

    def run(policy):
        timeshare._cached.cache_clear()
        trace = cl.synthetic(600, seed=3, mean_interarrival_s=20)
        res = cl.simulate(trace, cl.ClusterSpec.homogeneous("v100-16gb", 32, gpus_per_node=8), policy, seed=1)
        return hashlib.sha256(repr(res.records).encode()).hexdigest()

    for policy in ("oracle", "gpucast"):
        fast = run(policy)
        with monkeypatch.context() as m:
            m.setitem(timeshare_kernel._STATE, "ok", False)
            slow = run(policy)
        timeshare._cached.cache_clear()
        assert fast == slow, policy


@pytest.mark.parametrize("jit", [True, False])
def test_many_sets_at_once_are_each_set_alone(jit, monkeypatch):
    # slowdowns_many (what a placement's table fill calls) answers each set as slowdowns does,
    # in the caller's order of jobs, for empty and one-job sets, both worlds and both modes.
    if not jit:
        monkeypatch.setitem(timeshare_kernel._STATE, "ok", False)
    sets = [(), (JobTimeline(0.1, 0.05, 1.0),)] + [tuple(reversed(s)) for s in _random_sets(5, 300)]
    for c in (timeshare.CURRENT, timeshare.FITTED, timeshare.FITTED.with_(stretch="held"), _world("exclusive")):
        for mode in ("timeslice", "mps"):
            many = timeshare.slowdowns_many(sets, c, mode)
            assert [len(x) for x in many] == [len(s) for s in sets]
            for jobs, got in zip(sets, many):
                assert got == timeshare.slowdowns(jobs, c, mode), jobs


@pytest.mark.parametrize("world", ["measured-pairs", "gavel", "exclusive"])
def test_a_gpu_state_in_one_call_is_the_solve_and_nvmls_reading(world, monkeypatch):
    # timeshare.shared_state (the engine's new shared GPU states): the slowdowns of slowdowns()
    # and the reading of gpu_util_pct(), in the jobs' own order, from the compiled call and from
    # Python alike.
    c = _world(world)
    for jobs in _random_sets(17, 800):
        sd, util = timeshare.shared_state(jobs, c, "timeslice")
        with monkeypatch.context() as m:
            m.setitem(timeshare_kernel._STATE, "ok", False)
            timeshare._cached.cache_clear()
            py_sd = timeshare.slowdowns(jobs, c, "timeslice")
            py_util = timeshare.gpu_util_pct(jobs, c, "timeslice")
            assert timeshare.shared_state(jobs, c, "timeslice") == (py_sd, py_util)
        timeshare._cached.cache_clear()
        if BITWISE:
            assert (sd, util) == (py_sd, py_util), jobs
        else:
            assert sd == pytest.approx(py_sd, rel=1e-12) and util == pytest.approx(py_util, rel=1e-12)
