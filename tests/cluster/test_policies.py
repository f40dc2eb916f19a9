"""Each policy's placement rule on small hand-made GPU states, through the pure choose_gpu."""

from __future__ import annotations

import random

import pytest

from gpucast.cluster import interference, timeshare
from gpucast.cluster.policies import POLICIES, GpuOccupancy, choose_gpu, gang, make_policy
from gpucast.cluster.truth import Observation

GB = 1e9
CAP = 16 * GB


def obs(util=50.0, mem=2 * GB, lo=None, hi=None, source="prediction", job_type=None):
    return Observation("w", 1, 1, "v100-16gb", source, util, (util, util), mem,
                       (lo if lo is not None else mem, hi if hi is not None else mem), 0.1, job_type)


def gpu(i, *jobs, node=0, cap=CAP):
    return GpuOccupancy(i, "v100-16gb", cap, node, tuple(jobs))


def test_registry_has_the_seven_policies():
    assert set(POLICIES) == {"slot", "slot-fifo", "profiling", "horus", "packing", "gpucast", "oracle"}
    with pytest.raises(TypeError):
        make_policy("slot", no_such_parameter=1)
    assert make_policy("slot").lookahead == 500 and make_policy("slot-fifo").lookahead == 1


@pytest.mark.parametrize("name", ["slot", "slot-fifo"])
def test_slot_takes_the_first_empty_gpu_only(name):
    p = make_policy(name)
    assert choose_gpu(p, [gpu(0, obs()), gpu(1), gpu(2)], obs())[0] == 1
    assert choose_gpu(p, [gpu(0, obs()), gpu(1, obs())], obs()) == (None, [])


def test_packing_is_first_fit_by_predicted_memory_and_ignores_utilization():
    p = make_policy("packing")
    state = [gpu(0, obs(mem=12 * GB)), gpu(1, obs(util=100, mem=2 * GB)), gpu(2)]
    assert choose_gpu(p, state, obs(mem=6 * GB))[0] == 1        # 12 + 6 > 16; 2 + 6 fits
    assert choose_gpu(p, state, obs(mem=4 * GB))[0] == 0        # exactly 16 fits
    full = [gpu(0, obs(mem=1), obs(mem=1), obs(mem=1), obs(mem=1)), gpu(1)]
    assert choose_gpu(p, full, obs(mem=1))[0] == 1              # at most 4 jobs per GPU


def test_horus_prefers_combined_utilization_near_100_and_penalises_overshoot():
    p = make_policy("horus")
    state = [gpu(0, obs(util=30)), gpu(1, obs(util=60)), gpu(2)]
    assert choose_gpu(p, state, obs(util=40))[0] == 1           # 60 + 40 = 100: cost 0
    # 90 + 40 = 130: cost 2 * 30 = 60, empty GPU: 100 - 40 = 60 -> tie, lower index wins
    assert choose_gpu(p, [gpu(0, obs(util=90)), gpu(1)], obs(util=40))[0] == 0
    assert choose_gpu(p, [gpu(0, obs(util=95)), gpu(1)], obs(util=40))[0] == 1   # 70 > 60
    assert choose_gpu(p, [gpu(0, obs(util=120))], obs(util=40))[0] is None     # > 150 %
    three = gpu(0, obs(util=10), obs(util=10), obs(util=10))
    assert choose_gpu(p, [three], obs(util=10))[0] is None                       # 3 jobs max


def test_horus_queue_is_utilization_ordered():
    class J:
        def __init__(self, u):
            self.obs = {"v100-16gb": obs(util=u)}
    js = [J(30), J(90), J(60)]
    assert [j.obs["v100-16gb"].util_pct for j in make_policy("horus").order(js)] == [90, 60, 30]


@pytest.fixture
def gpu_side(monkeypatch):
    """The co-location model without host contention (its fitted ``host`` depends on Gavel's
    servers): these tests are about the placement rule, not that constant."""
    c = timeshare.FITTED.with_(host=0.0)
    timeshare.set_constants(c)
    yield c
    timeshare.set_constants(None)


def test_gpucast_uses_the_memory_upper_bound_and_least_harm(gpu_side):
    p = make_policy("gpucast")
    # point 6 GB fits next to 8 GB, the upper bound 9 GB does not
    assert choose_gpu(p, [gpu(0, obs(util=20, mem=8 * GB))], obs(util=20, mem=6 * GB, hi=9 * GB))[0] is None
    # consolidating: a light neighbour where sharing pays beats an empty GPU ...
    assert choose_gpu(p, [gpu(0, obs(util=20)), gpu(1)], obs(util=20))[0] == 0
    # ... but not without consolidation: then an empty GPU costs nothing
    assert choose_gpu(make_policy("gpucast", consolidate=0.0), [gpu(0, obs(util=20)), gpu(1)], obs(util=20))[0] == 1
    # the light neighbour hurts less than the heavy one
    idx, sl = choose_gpu(p, [gpu(0, obs(util=90)), gpu(1, obs(util=20))], obs(util=30))
    assert idx == 1
    assert sl == pytest.approx(timeshare.slowdowns([obs(util=20).timeline(), obs(util=30).timeline()]))


def test_gpucast_is_cautious_at_the_upper_end_of_the_utilization_interval(gpu_side):
    def wide(u, hi):
        o = obs(util=u)
        return Observation(o.workload, 1, 1, o.gpu_type, "prediction", u, (u / 2, hi), o.memory_bytes,
                           o.memory_interval, 0.1)
    p = make_policy("gpucast", min_gain=0.5)
    assert choose_gpu(p, [gpu(0, obs(util=40))], obs(util=40))[0] == 0          # a narrow interval: share
    assert choose_gpu(p, [gpu(0, wide(40, 99))], wide(40, 99))[0] is None       # might be saturated: do not
    assert choose_gpu(make_policy("gpucast", min_gain=0.5, cautious=False),
                      [gpu(0, wide(40, 99))], wide(40, 99))[0] == 0


def test_gpucast_refuses_sharing_that_does_not_pay():
    p = make_policy("gpucast", min_gain=0.5)
    a = timeshare.slowdowns([obs(util=100).timeline()] * 2)
    assert sum(1 / s for s in a) - 1 < 0.5
    assert choose_gpu(p, [gpu(0, obs(util=100))], obs(util=100))[0] is None


def test_profiling_packs_by_measured_utilization_best_fit():
    p = make_policy("profiling")
    m = dict(source="profiled")
    state = [gpu(0, obs(util=20, **m)), gpu(1, obs(util=50, **m)), gpu(2, obs(util=80, **m))]
    assert choose_gpu(p, state, obs(util=40, **m))[0] == 1       # 90 %: the fullest that stays <= 100
    assert choose_gpu(p, state[2:], obs(util=40, **m))[0] is None


def test_oracle_uses_measured_pair_slowdowns():
    p = make_policy("oracle")
    a, b = "A3C", "ResNet-18 (batch size 16)"
    measured = interference.measured_pair_slowdowns("v100-16gb")[(a, b)]
    _, sl = choose_gpu(p, [gpu(0, obs(util=50, source="truth", job_type=a))],
                       obs(util=50, source="truth", job_type=b))
    assert sl == pytest.approx(list(measured))
    assert sl != pytest.approx(timeshare.slowdowns([obs(util=50).timeline()] * 2))


def test_gang_prefers_one_node_then_spreads():
    cands = [(0.0, 0, 0), (0.0, 2, 1), (0.0, 3, 1), (1.0, 4, 2)]
    assert gang(cands, 2) == [2, 3]
    assert gang([(0.0, 0, 0), (0.0, 2, 1), (0.0, 4, 2)], 2) == [0, 2]
    assert gang(cands, 5) is None


def test_the_node_table_gang_rule_is_the_sorted_rule():
    # _gang_np with per (nodes of equal size in GPU order: a node-by-GPU table) against the
    # sorted rule and against gang(): same GPUs, same order, on random scores with many ties,
    # random feasibility (from nearly nothing to everything) and gangs of 2 to 9.
    import numpy as np

    from gpucast.cluster.policies.base import _gang_np

    rng = np.random.default_rng(3)
    for _ in range(400):
        per, nodes = int(rng.choice([2, 4, 8])), int(rng.integers(1, 12))
        n = per * nodes
        scores = rng.choice([0.0, -1.0, 0.25, 0.5, 1.0], n) + rng.choice([0.0, 1e-3 * rng.random()], n)
        feasible = rng.random(n) < rng.choice([0.1, 0.5, 0.9, 1.0])
        gidx, gnode = np.arange(n, dtype=np.int64) * 3 + 5, np.repeat(np.arange(nodes, dtype=np.int64) * 2, per)
        k = int(rng.integers(2, 10))
        table = _gang_np(scores, feasible, gidx, gnode, k, per)
        assert table == _gang_np(scores, feasible, gidx, gnode, k)
        cands = [(float(scores[i]), int(gidx[i]), int(gnode[i])) for i in range(n) if feasible[i]]
        assert table == gang(cands, k)


class _Job:
    def __init__(self, o, gpus=1, ooms=0):
        self.obs, self.gpus, self.ooms = {"v100-16gb": o}, gpus, ooms


@pytest.mark.parametrize("name", ["slot", "slot-fifo", "packing"])
def test_fast_placement_agrees_with_choose_gpu(name):
    """The segment-tree path used at scale picks what the pure rule picks."""
    rng = random.Random(7)
    for _ in range(30):
        p = make_policy(name)
        n = 12
        p.attach([gpu(i, node=i // 4) for i in range(n)])
        state = [gpu(i, node=i // 4) for i in range(n)]
        for _step in range(25):
            o = obs(mem=rng.choice([1, 3, 5, 7]) * GB)
            expect, _ = choose_gpu(p, state, o)
            got = p.place(_Job(o))
            assert (got[0] if got else None) == expect
            if got:
                p.on_start(_Job(o), got)
                g = state[got[0]]
                state[got[0]] = GpuOccupancy(g.index, g.gpu_type, g.memory_bytes, g.node, g.jobs + (o,))


class _QJob:
    """A waiting job as the backfill sees it: GPUs and a time limit."""

    def __init__(self, gpus, limit_s):
        self.gpus, self.limit_s, self.ooms = gpus, limit_s, 0
        self.obs = {"v100-16gb": obs()}


def _backfill_state(n_gpus, running):
    """``slot`` on ``n_gpus`` GPUs (2 nodes) with ``running``: (start time, GPUs, limit) each."""
    p = make_policy("slot")
    p.attach([gpu(i, node=i * 2 // n_gpus) for i in range(n_gpus)])
    for t, k, limit in running:
        p.now = t
        j = _QJob(k, limit)
        p.on_start(j, p.place(j))
    return p


def test_backfill_reservation_and_choice_by_hand():
    # 8 GPUs: A (3 GPUs) ends at 0 + 50, B (2) at 10 + 100 = 110, C (2) at 20 + 20 = 40; 1 free.
    p = _backfill_state(8, [(0.0, 3, 50.0), (10.0, 2, 100.0), (20.0, 2, 20.0)])
    p.now = 30.0
    # a head of 6 GPUs: 1 free + C's 2 at 40 + A's 3 at 50 = 6 -> reserved for 50, 0 to spare
    assert p.reservation(6, 1, 30.0) == (50.0, 0, 110.0)
    # a head of 4: 1 + 2 = 3 at 40, 6 at 50 -> reserved for 50, 2 to spare then
    assert p.reservation(4, 1, 30.0) == (50.0, 2, 110.0)
    # a head of 9 can never start (8 GPUs): no reservation
    assert p.reservation(9, 1, 30.0)[0] == float("inf")
    head, short, long_ = _QJob(6, 10.0), _QJob(1, 20.0), _QJob(1, 21.0)
    # short ends at 50 <= 50: starts; long_ would end at 51 on a GPU the head needs: refused
    assert p.order([head, long_, short]) == [short]
    # once the clock has passed a running job's expected end, it is expected to end now
    p.now = 60.0    # A (3) is overdue: 1 free + C 2 + A 3 = 6 -> due now, B at 110 not included
    assert p.reservation(6, 1, 60.0) == (60.0, 0, 110.0)


def test_backfill_lets_the_fitting_front_of_the_queue_start_in_order():
    p = _backfill_state(4, [(0.0, 1, 100.0)])
    p.now = 1.0
    a, b, c = _QJob(2, 500.0), _QJob(1, 500.0), _QJob(2, 5.0)
    # a and b fit (3 free): both start, FIFO; c is not looked at before they have started
    assert p.order([a, b, c]) == [a, b]


@pytest.mark.parametrize("name", ["gpucast", "oracle", "horus", "profiling"])
def test_the_score_index_agrees_with_choose_gpu_and_shares_classes_by_score_key(name):
    """The score index (classes of GPUs by what the score reads of their jobs) places a one-GPU
    job where the pure rule does; observations that differ only in what the score does not read
    (the workload's name here) share classes, and a policy that does not say what its score
    reads (``score_key`` None) keeps one class per set of objects."""
    import dataclasses

    rng = random.Random(3)
    source = "truth" if name == "oracle" else ("profiled" if name == "profiling" else "prediction")
    kinds = [obs(util=u, mem=m * GB, lo=m * GB, hi=1.1 * m * GB, source=source)
             for u, m in ((30.0, 2), (60.0, 3), (90.0, 5), (45.0, 1))]
    twins = [dataclasses.replace(o, workload="twin") for o in kinds]   # equal but for the name
    for _ in range(10):
        p = make_policy(name)
        n = 12
        p.attach([gpu(i, node=i // 4) for i in range(n)])
        state = [gpu(i, node=i // 4) for i in range(n)]
        for _step in range(20):
            o = rng.choice(kinds + twins)
            expect, _ = choose_gpu(p, state, o)
            got = p.place(_Job(o))
            assert (got[0] if got else None) == expect
            if got:
                p.on_start(_Job(o), got)
                g = state[got[0]]
                state[got[0]] = GpuOccupancy(g.index, g.gpu_type, g.memory_bytes, g.node, g.jobs + (o,))
        if p.score_key(kinds[0]) is not None:
            assert all(p._eq(a) == p._eq(b) for a, b in zip(kinds, twins))
        else:
            assert all(p._eq(a) != p._eq(b) for a, b in zip(kinds, twins))


def test_a_subclass_that_changes_the_score_is_keyed_by_identity():
    from gpucast.cluster.policies.gpucast import GpucastPolicy

    class Picky(GpucastPolicy):
        def score(self, gpu, job):
            return None if job.workload == "twin" else super().score(gpu, job)

    assert Picky().score_key(obs()) is None
    assert make_policy("gpucast").score_key(obs()) is not None
