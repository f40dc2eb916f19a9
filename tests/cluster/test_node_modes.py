"""Nodes that share their GPUs differently (ClusterSpec.modes): time-slicing, MPS, and MPS as the
device plugin's replicas run it ("mps:N": at most N clients, each limited to 1/N of the SMs, alone
too), read by the simulator's truth and by the gpucast policy, which places each job where its
predicted cost under that GPU's mode is lowest."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import gpucast.cluster as cl
from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import modes as sharing, mps
from gpucast.cluster.behaviour import Observation
from gpucast.cluster.engine import Simulator
from gpucast.cluster.policies.base import GpuOccupancy
from gpucast.cluster.policies.gpucast import GpucastPolicy
from gpucast.cluster.timeshare import JobTimeline
from gpucast.cluster.truth import Truth

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

GiB = 1 << 30


def test_modes_go_on_whole_nodes_after_the_carved_ones():
    spec = cl.ClusterSpec.build("a100-80gb", 32, 8, "3g.40gb,2g.20gb,2g.20gb", 1, mps_nodes=2, mps_replicas=4)
    assert [g for g, _n in spec.nodes] == ["a100-80gb:3g.40gb", "a100-80gb:2g.20gb", "a100-80gb", "a100-80gb",
                                           "a100-80gb"]
    assert spec.modes == (None, None, "mps:4", "mps:4", None)
    assert spec.gpu_modes() == [None] * (8 + 16) + ["mps:4"] * 16 + [None] * 8
    assert cl.ClusterSpec.build("a100-80gb", 16, 8, mps_nodes=1).gpu_modes() == ["mps"] * 8 + [None] * 8
    assert cl.ClusterSpec.build("a100-80gb", 16, 8).modes is None


@pytest.mark.parametrize("kwargs, match", [
    ({"mps_nodes": 3}, "--mps-nodes must be between 0 and the cluster's 2 nodes of whole GPUs, got 3"),
    ({"mps_replicas": 2}, "--mps-replicas goes with --mps-nodes"),
    ({"mps_nodes": 1, "mps_replicas": 0}, "MPS replicas must be a whole number of at least 1"),
])
def test_bad_node_modes_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cl.ClusterSpec.build("a100-80gb", 16, 8, **kwargs)


def test_a_spec_names_each_nodes_mode_from_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown sharing mode 'mig' \(timeslice, mps, mps:N\)"):
        cl.ClusterSpec((("a100-80gb", 8),), ("mig",))
    with pytest.raises(ValueError, match="1 nodes but 2 sharing modes"):
        cl.ClusterSpec((("a100-80gb", 8),), ("mps", None))
    with pytest.raises(ValueError, match="whole number"):
        cl.ClusterSpec((("a100-80gb", 8),), ("mps:x",))


def _records(res):
    return [(r.start_s, r.finish_s) for r in res.records], res.util_timeline


@pytest.mark.parametrize("policy", ["gpucast", "oracle"])
def test_every_node_in_a_mode_runs_as_the_whole_run_in_that_mode_does(policy):
    """The per-node mode is the run's mode for that node: a cluster whose every node is MPS in a
    time-sliced run is, job for job, the run in MPS (Gavel's measured pairs, read as time-sliced,
    no longer answer there), and the reverse."""
    tr = cl.load_trace("philly-mix", limit=80)
    plain = cl.ClusterSpec.homogeneous("v100-16gb", 16)
    for node_mode, run_mode in (("mps", "timeslice"), ("timeslice", "mps")):
        marked = cl.ClusterSpec(plain.nodes, (node_mode,) * len(plain.nodes))
        got = cl.simulate(tr, marked, policy, seed=0, sharing=run_mode)
        want = cl.simulate(tr, plain, policy, seed=0, sharing=node_mode)
        other = cl.simulate(tr, plain, policy, seed=0, sharing=run_mode)
        assert _records(got) == _records(want)
        assert _records(got) != _records(other)      # the mode matters on this trace


def test_a_lone_job_under_mps_replicas_pays_its_limit_in_the_engine():
    tr = cl.load_trace("philly-mix", limit=1)
    runs = {}
    for mode in (None, "mps:2"):
        spec = cl.ClusterSpec((("a100-80gb", 1),), (mode,))
        runs[mode] = cl.simulate(tr, spec, "gpucast", seed=0)
    sim = Simulator(tr, cl.ClusterSpec.homogeneous("a100-80gb", 1), cl.make_policy("gpucast"), Truth(seed=0))
    sim._prepare(sim.jobs[0])
    tl = sim.jobs[0].beh["a100-80gb"].timeline()
    (limited,) = mps.slowdowns([tl], [0.5], timeshare.world())
    assert limited > 1.01                                    # its compute-bound kernels: the limit costs it
    run = [r.finish_s - r.start_s for r in (runs[None].records[0], runs["mps:2"].records[0])]
    assert run[1] / run[0] == pytest.approx(limited, rel=1e-9)


def test_mps_replicas_read_by_nvml_alone_and_shared():
    compute = JobTimeline(0.1, 0.08, 2, mem_bound=0.0)
    # alone at half the SMs: 0.16 s of kernels in a 0.18 s step
    sd, util = mps.shared_state([compute], [0.5])
    assert sd == pytest.approx([1.8]) and util == pytest.approx(100 * 0.16 / 0.18)
    assert sharing.slowdowns([compute], mode="mps:2") == pytest.approx([1.8])
    assert sharing.slowdowns([compute], mode="mps") == [1.0]
    cool = JobTimeline(0.1, 0.01, 2, mem_bound=0.0)
    sd2, util2 = sharing.shared_state([compute, cool], mode="mps:2")
    assert sd2 == mps.slowdowns([compute, cool], [0.5, 0.5])
    assert util < util2 <= 100.0                              # the neighbour's kernels add to what NVML reads


def _obs(name, util, mem_bound=0.0):
    return Observation(name, 32, 1, "a100-80gb", "prediction", util_pct=util, memory_bytes=4.0 * GiB,
                       step_time_s=0.1, gaps=2.0, mem_bound=mem_bound)


def _gpu(i, mode, jobs=()):
    return GpuOccupancy(i, "a100-80gb", 80 * GiB, i, tuple(jobs), mode)


def test_the_policy_counts_the_limit_a_lone_job_pays_and_the_replica_cap():
    pol = GpucastPolicy()
    hot, cool = _obs("hot", 95.0), _obs("cool", 10.0)
    limited = _gpu(0, "mps:2")
    for job in (hot, cool):
        (alone,) = mps.slowdowns([job.timeline()], [0.5], timeshare.predicting())
        assert pol.score(limited, job) == pytest.approx(alone - 1.0)
        assert pol.score(_gpu(1, None), job) == 0.0
    assert pol.cap(limited) == 2 and pol.cap(_gpu(1, "mps:8")) == pol.max_jobs_per_gpu
    pol.attach([limited, _gpu(1, None)])
    # a hot job takes the time-sliced GPU although the limited one comes first
    assert pol.place(type("J", (), {"gpus": 1, "obs": hot, "ooms": 0})()) == [1]
    full = _gpu(0, "mps:2", (cool, cool))
    assert pol.score(full, cool) is not None                    # the score alone would allow it ...
    pol.attach([full])
    assert pol.place(type("J", (), {"gpus": 1, "obs": cool, "ooms": 0})()) is None   # ... the cap does not


@pytest.mark.parametrize("name", ["packing", "horus", "profiling", "gpucast"])
def test_every_sharing_policy_keeps_to_the_replica_cap(name):
    """A GPU of 2 MPS replicas holding two jobs takes no third, whatever the policy (the device
    plugin would have no replica left to give); the time-sliced GPU beside it does."""
    job = _obs("small", 5.0)
    pol = cl.make_policy(name)
    pol.attach([_gpu(0, "mps:2", (job, job)), _gpu(1, None, (job, job))])
    ask = type("J", (), {"gpus": 1, "obs": job, "ooms": 0})()
    assert pol.place(ask) == [1]


def test_the_policy_places_a_job_where_its_gpus_mode_costs_least():
    """Two GPUs holding the same compute-bound job, one time-sliced and one under MPS replicas:
    each job goes where the co-location model, solved in that GPU's mode, says it costs less."""
    res = _obs("res", 60.0)
    seen = {}
    for util, mb in ((95.0, 0.0), (60.0, 0.0), (60.0, 1.0), (30.0, 0.5), (95.0, 1.0)):
        job = _obs(f"j{util}-{mb}", util, mb)
        gpus = [_gpu(0, "timeslice", (res,)), _gpu(1, "mps:2", (res,))]
        costs = []
        for g in gpus:
            before = sharing.slowdowns([res.timeline()], timeshare.predicting(), g.mode)
            after = sharing.slowdowns([res.timeline(), job.timeline()], timeshare.predicting(), g.mode)
            costs.append(after[0] - before[0] + after[1] - 1.0 - 1.0)       # _cost with consolidate 1
        pol = GpucastPolicy()
        pol.attach(gpus)
        got = pol.place(type("J", (), {"gpus": 1, "obs": job, "ooms": 0})())
        assert [pol.score(g, job) for g in gpus] == pytest.approx(costs, rel=1e-12)
        assert got == [int(costs[1] < costs[0])]
        seen[(util, mb)] = got[0]
    # a compute-bound job would pay its SM limit: time-sliced; a memory-bound one loses nothing to
    # the limit, and the resident's compute-bound kernels leave it the DRAM: under MPS
    assert seen[(95.0, 0.0)] == 0 and seen[(95.0, 1.0)] == 1, seen


def test_the_cli_takes_mps_nodes_and_replicas():
    from gpucast.cli import app

    ok = CliRunner().invoke(app, ["simulate", "--trace", "pai-mix", "--limit", "30", "--gpus", "16", "--gpu-type",
                                  "a100-80gb", "--policies", "gpucast", "--mps-nodes", "1", "--mps-replicas", "2"])
    assert ok.exit_code == 0, ok.output
    assert "(1 nodes under MPS, 2 replicas)" in " ".join(ok.output.split())
    bad = CliRunner().invoke(app, ["simulate", "--limit", "5", "--gpus", "16", "--mps-nodes", "3"])
    assert bad.exit_code == 2
    lines = bad.output.strip().splitlines()
    assert len(lines) == 1 and "--mps-nodes must be between 0 and the cluster's 2 nodes" in lines[0]
