"""The compiled placement score fill (gpucast.cluster.timeshare.kernel.scores, used by
GpucastPolicy._class_scores) against GpucastPolicy.score in Python: the same score, or the same
refusal, on every GPU state, for gpucast and the oracle (Gavel's measured pairs included), with
the policy's parameters changed, on two GPU types at once; and the policies it must not stand in
for fall back to Python."""

import random
import zlib
import sys
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("numba")

from gpucast.cluster import interference, timeshare  # noqa: E402
from gpucast.cluster.timeshare import kernel as timeshare_kernel  # noqa: E402
from gpucast.cluster.behaviour import Observation  # noqa: E402
from gpucast.cluster.policies.base import GpuOccupancy  # noqa: E402
from gpucast.cluster.policies.gpucast import GpucastPolicy  # noqa: E402
from gpucast.cluster.policies.oracle import OraclePolicy  # noqa: E402

# CPython sums floats one after another up to 3.11, as the kernel does (see test_timeshare_kernel).
BITWISE = sys.version_info < (3, 12)
TYPES = ("v100-16gb", "a100-40gb")
GiB = 1 << 30


def _pool(rng: random.Random, gpu_type: str, n: int) -> list:
    """Observations of every kind the score reads: intervals or none, util told or not, syncs
    known or not, 1-4 GPUs, a MIG slice cost, Gavel job types that make measured pairs on a V100,
    and twins (another object with the same fields, so the same score key)."""
    gavel = sorted({a for a, _b in interference.measured_pair_slowdowns("v100-16gb")})[:12]
    out = []
    for k in range(n):
        util = rng.choice((None, rng.uniform(5, 100), rng.uniform(80, 100), rng.uniform(1, 20)))
        iv = None if util is None or rng.random() < 0.3 else (max(0.0, util - 10),
                                                                min(100.0, util + rng.uniform(0, 15)))
        mem = rng.choice((rng.uniform(0.5, 6), rng.uniform(4, 12), None))
        miv = None if mem is None or rng.random() < 0.3 else (mem * GiB * 0.9, mem * GiB * rng.uniform(1.0, 1.3))
        o = Observation(f"w{k}", 32, rng.choice((1, 1, 1, 2, 4)), gpu_type, rng.choice(("prediction", "truth")),
                        util_pct=util, util_interval=iv, memory_bytes=None if mem is None else mem * GiB,
                        memory_interval=miv, step_time_s=rng.choice((None, rng.uniform(0.005, 0.5))),
                        job_type=rng.choice(gavel + [None]), gaps=rng.choice((0.0, 1.0, 3.0, rng.uniform(0, 40))),
                        mem_bound=rng.uniform(0, 1),
                        held_pct=None if util is None or rng.random() < 0.5 else util * 0.8,
                        syncs=rng.choice((None, 1.0, rng.uniform(0.5, 20))),
                        slice_cost=rng.choice((0.0, 0.0, 0.0, rng.uniform(0, 0.8), 1.5)))
        out.append(o)
        if rng.random() < 0.2:
            out.append(replace(o))      # a twin: equal, not the same object
    return out


def _cluster(rng, pools, cap: int, gpus: int = 160, modes=(None,)) -> list:
    out = []
    for i in range(gpus):
        t = TYPES[i % 2]
        n = rng.choice(range(cap + 2))
        jobs = tuple(rng.choice(pools[t]) for _ in range(n))
        mem = rng.choice((16 * GiB, 40 * GiB, 8 * GiB))
        out.append(GpuOccupancy(i, t, mem, i // 8, jobs, rng.choice(modes)))
    return out


def _check(policy, seed: int, modes=(None,)):
    rng = random.Random(seed)
    pools = {t: _pool(rng, t, 30) for t in TYPES}
    gpus = _cluster(rng, pools, policy.max_jobs_per_gpu, modes=modes)
    policy.attach(gpus)
    assert policy._compiled_fill() is not None
    seen = 0
    for k in range(60):
        job = {t: rng.choice(pools[t]) for t in TYPES}
        _o, val, st, _capped = policy._table(SimpleNamespace(obs=job))
        for g in policy.view:
            c = policy._cls[g.index]
            want = None if len(g.jobs) >= policy.max_jobs_per_gpu else policy.score(g, job[g.gpu_type])
            if want is None:
                assert st[c] == 2, (g, job)
            else:
                seen += 1
                assert st[c] == 1, (g, job)
                assert val[c] == want if BITWISE else val[c] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert seen > 100          # the states were not all refused


@pytest.mark.parametrize("params", [{}, {"min_gain": 0.2, "consolidate": 0.0, "weigh_gangs": True, "cautious": False,
                                         "max_jobs_per_gpu": 5, "max_slice_cost": 0.5},
                                    {"memory_risk": 0.1, "max_jobs_per_gpu": 2}])
@pytest.mark.parametrize("cls", [GpucastPolicy, OraclePolicy])
def test_the_compiled_fill_scores_as_score_does(cls, params):
    _check(cls(**params), seed=zlib.crc32(repr((cls.__name__, sorted(params))).encode()))


@pytest.mark.parametrize("cls", [GpucastPolicy, OraclePolicy])
def test_the_data_center_world_scores_as_score_does(cls):
    """Exclusive slices on the data-center GPUs (truth and prediction; the GeForce-free type mix
    resolves every GPU so) and the margin they bring: the compiled fill with each GPU type's
    resolved constants is score's."""
    try:
        timeshare.set_world("data-center")
        _check(cls(), seed=11)
    finally:
        timeshare.set_world(None)
        timeshare.set_constants(None)


@pytest.mark.parametrize("cls", [GpucastPolicy, OraclePolicy])
def test_gpus_shared_in_different_modes_score_as_score_does(cls):
    """Some GPUs time-sliced, some under MPS, some in the run's mode: the time-sliced ones by the
    compiled fill, the MPS ones in Python, each as :meth:`score` says for that GPU's mode."""
    _check(cls(), seed=7, modes=(None, "timeslice", "mps"))


def test_a_gpus_own_mode_scores_as_the_run_in_that_mode_does():
    """A GPU marked MPS in a time-sliced run scores as an unmarked GPU does in an MPS run (and
    the reverse), so the per-GPU mode is the run's mode, only for that GPU."""
    rng = random.Random(3)
    pools = {t: _pool(rng, t, 30) for t in TYPES}
    gpus = [g for g in _cluster(rng, pools, 4, gpus=60) if 0 < len(g.jobs) < 4]
    differ = 0
    for own, run in (("mps", "timeslice"), ("timeslice", "mps")):
        for g in gpus:
            job = rng.choice(pools[g.gpu_type])
            got = GpucastPolicy().score(replace(g, mode=own), job)
            try:
                timeshare.set_mode(own)
                want = GpucastPolicy().score(g, job)
            finally:
                timeshare.set_mode(None)
            assert got == want
            try:
                timeshare.set_mode(run)
                differ += GpucastPolicy().score(g, job) != want
            finally:
                timeshare.set_mode(None)
    assert differ > 10          # the two modes do score these states differently


def test_the_oracle_fill_answers_with_measured_pairs():
    # Two single-GPU Gavel jobs on a V100: the measured pair decides, not the model (so a fill that
    # ignored the pairs would score these differently from score()).
    pairs = interference.measured_pair_slowdowns("v100-16gb")
    (a, b), (sa, sb) = next(((k, v) for k, v in pairs.items() if k[0] != k[1] and v[0] > 1.3))
    mk = lambda jt, i: Observation(f"g{i}", 16, 1, "v100-16gb", "truth", util_pct=40.0, memory_bytes=GiB,  # noqa: E731
                                   step_time_s=0.05, job_type=jt)
    ra, rb = mk(a, 0), mk(b, 1)
    pol = OraclePolicy()
    pol.attach([GpuOccupancy(0, "v100-16gb", 16 * GiB, 0, (ra,))])
    sc, ok = pol._class_scores(rb, np.array([pol._cls[0]]))
    assert ok[0]
    g = pol.view[0]
    assert sc[0] == pol.score(g, rb)
    model = timeshare.slowdowns([ra.timeline(), rb.timeline()], timeshare.world())
    assert pol.predicted_slowdowns(g, rb) != model          # the pair, not the model


def test_policies_that_change_the_score_take_python():
    class Costlier(GpucastPolicy):
        def _cost(self, pre, job, after):
            return super()._cost(pre, job, after)

    class OwnSlowdowns(GpucastPolicy):
        def _slowdowns(self, obs, gpu_type, mode=None):
            return [1.0] * len(obs)

    assert GpucastPolicy()._compiled_fill() is not None and OraclePolicy()._compiled_fill() is not None
    assert Costlier()._compiled_fill() is None
    assert OwnSlowdowns()._compiled_fill() is None


def test_without_numba_the_fill_is_not_used(monkeypatch):
    monkeypatch.setitem(timeshare_kernel._STATE, "ok", False)
    assert GpucastPolicy()._compiled_fill() is None
    _pol = GpucastPolicy()
    rng = random.Random(2)
    pools = {t: _pool(rng, t, 10) for t in TYPES}
    _pol.attach(_cluster(rng, pools, _pol.max_jobs_per_gpu, gpus=16))
    _o, _val, st, _c = _pol._table(SimpleNamespace(obs={t: pools[t][0] for t in TYPES}))
    assert (st[:len(_pol._crep)] > 0).all()
