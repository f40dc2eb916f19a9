"""Re-partitioning MIG nodes while the simulator runs (gpucast.cluster.repartition): a node with
two faces, drained and reconfigured when jobs that want whole GPUs wait, or carved when jobs that
would run on its slices wait."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import gpucast.cluster as cl
from gpucast.cluster.behaviour import Observation
from gpucast.cluster.policies.base import GpuOccupancy, Policy
from gpucast.cluster.policies.gpucast import GpucastPolicy
from gpucast.cluster.trace_formats import Trace, TraceJob

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

GPU = "a100-80gb"


def test_a_dynamic_node_has_both_faces_and_counts_once():
    spec = cl.ClusterSpec.build(GPU, 16, 8, "3g.40gb*2", 1, mig_dynamic=True)
    assert spec.nodes == (("a100-80gb:3g.40gb", 16), ("a100-80gb", 8), ("a100-80gb", 8))
    assert spec.faces == ((0, 1), (0, 0), None)
    assert spec.physical_gpus == 16.0 and spec.max_job_gpus == 16
    assert spec.gpu_faces() == [(0, 1)] * 16 + [(0, 0)] * 8 + [None] * 8
    static = cl.ClusterSpec.build(GPU, 16, 8, "3g.40gb*2", 1)
    assert static.faces is None and static.max_job_gpus == 8
    with pytest.raises(ValueError, match="--mig-dynamic goes with --mig-layout"):
        cl.ClusterSpec.build(GPU, 16, 8, mig_dynamic=True)
    assert not spec.start_whole
    whole = cl.ClusterSpec.build(GPU, 16, 8, "3g.40gb*2", 1, mig_dynamic=True, mig_start="whole")
    assert whole.start_whole and whole.nodes == spec.nodes and whole.faces == spec.faces
    assert whole.with_mode("mps", 1).start_whole
    with pytest.raises(ValueError, match="^--mig-start goes with --mig-dynamic$"):
        cl.ClusterSpec.build(GPU, 16, 8, "3g.40gb*2", 1, mig_start="whole")
    with pytest.raises(ValueError, match="^unknown --mig-start 'half'; choose from carved, whole$"):
        cl.ClusterSpec.build(GPU, 16, 8, "3g.40gb*2", 1, mig_dynamic=True, mig_start="half")


def _job(jid, at, gpus, duration, model="resnet50"):
    """A job whose solo duration (and time limit, ``limit_s``) is ``duration``."""
    return TraceJob(jid, at, model, 32, gpus, "fp32", None, duration, None,
                    tuple(sorted({"model": model, "batch_size": 32, "precision": "fp32"}.items())))


def test_a_waiting_multi_gpu_job_drains_and_reconfigures_carved_nodes():
    """Two one-GPU nodes, both carved and re-partitionable. A (a light job) runs on a slice of
    node 0; B, a two-GPU job, arrives: the empty node 1 is reconfigured at once (60 s), node 0
    only once A has finished (the drain), and B starts when node 0's whole GPU opens, 60 s after
    A's end."""
    spec = cl.ClusterSpec.build(GPU, 2, 1, "3g.40gb*2", 2, mig_dynamic=True)
    tr = Trace("t", [_job("a", 0.0, 1, 1000.0, "mlp-small"), _job("b", 10.0, 2, 500.0)])
    res = cl.simulate(tr, spec, "gpucast", error_sigma=0)
    a, b = res.records
    assert a.start_s == 0.0 and a.finish_s >= 1000.0 - 1e-6       # on a slice: no faster than on the whole GPU
    assert b.start_s == pytest.approx(a.finish_s + 60.0)
    assert res.params["mig_repartitions"] == [[10.0, 70.0, 1, "whole"],
                                              [70.0, pytest.approx(a.finish_s + 60.0), 0, "whole"]]
    longer = cl.simulate(tr, spec, "gpucast", error_sigma=0, mig_reconfig_s=300.0)
    assert longer.records[1].start_s == pytest.approx(longer.records[0].finish_s + 300.0)
    static = cl.simulate(tr, cl.ClusterSpec.build(GPU, 2, 1, "3g.40gb*2", 2), "gpucast", error_sigma=0)
    assert "mig_repartitions" not in static.params


def test_policies_that_do_not_ask_leave_the_layout():
    spec = cl.ClusterSpec.build(GPU, 2, 1, "3g.40gb*2", 1, mig_dynamic=True)
    tr = Trace("t", [_job("a", 0.0, 1, 100.0)])
    assert cl.simulate(tr, spec, "slot", error_sigma=0).params["mig_repartitions"] == []


def _obs(slice_cost, gpu_type):
    return Observation("w", 32, 1, gpu_type, "prediction", util_pct=50.0, step_time_s=0.01, slice_cost=slice_cost)


def test_what_wants_whole_gpus():
    pol = GpucastPolicy()
    sl = "a100-80gb:3g.40gb"
    job = lambda gpus, cost: SimpleNamespace(gpus=gpus, obs={GPU: _obs(0.0, GPU), sl: _obs(cost, sl)})  # noqa: E731
    assert pol.wants_whole([job(2, 0.0)])
    assert pol.wants_whole([job(1, 1.5)])                         # too slow on every slice
    assert not pol.wants_whole([job(1, 0.3)])
    assert not Policy().wants_whole([job(2, 0.0)])


def test_switching_gpus_back_on_forgets_remembered_failures():
    pol = GpucastPolicy()
    pol.attach([GpuOccupancy(0, GPU, 80e9), GpuOccupancy(1, GPU, 80e9)])
    pol.switch_off([0, 1], True)
    job = SimpleNamespace(gpus=1, obs=_obs(0.0, GPU), ooms=0)
    assert pol.place(job) is None
    pol.switch_off([1], False)
    assert pol.place(job) == [1]


def test_the_cli_takes_dynamic_layouts():
    from gpucast.cli import app

    r = CliRunner().invoke(app, ["simulate", "--limit", "5", "--mig-reconfig-s", "5"])
    assert r.exit_code == 2 and r.output.strip().splitlines() == ["error: --mig-reconfig-s goes with --mig-dynamic"]
    ok = CliRunner().invoke(app, ["simulate", "--trace", "pai-mix", "--limit", "30", "--gpus", "16", "--gpu-type", GPU,
                                  "--policies", "gpucast", "--mig-layout", "3g.40gb*2", "--mig-nodes", "1",
                                  "--mig-dynamic"])
    assert ok.exit_code == 0, ok.output
    assert "re-partitioned on demand" in " ".join(ok.output.split())


def _runs(res):
    return {r.job_id: (r.start_s, r.finish_s) for r in res.records}


def test_a_whole_node_is_carved_when_more_jobs_wait_than_it_could_hold():
    """A node of 2 whole GPUs that may be carved into 1g.10gb*7, one job per GPU or slice: a and b
    hold both GPUs; three light jobs (mlp-small, as fast on a 1g slice as whole: more done on 7
    slices than on one GPU) wait, more than the 2 the whole GPUs could take, so the node drains
    and is carved; they all start when its slices open, 60 s after a and b end (three at once: on
slices, as the two whole GPUs, one job each, could not hold them). Two waiting would
    run on the whole GPUs as they free up: no carving."""
    spec = cl.ClusterSpec.build(GPU, 2, 2, "1g.10gb*7", 1, mig_dynamic=True, mig_start="whole")
    busy = [_job("a", 0.0, 1, 1000.0, "mlp-small"), _job("b", 0.0, 1, 1000.0, "mlp-small")]
    three = [_job(f"s{i}", 1.0, 1, 500.0, "mlp-small") for i in range(3)]
    res = cl.simulate(Trace("t", busy + three), spec, "gpucast", error_sigma=0, max_jobs_per_gpu=1)
    runs = _runs(res)
    end = max(runs["a"][1], runs["b"][1])
    assert [runs[f"s{i}"][0] for i in range(3)] == [pytest.approx(end + 60.0)] * 3
    assert res.params["mig_repartitions"] == [[1.0, pytest.approx(end + 60.0), 0, "carved"]]
    two = cl.simulate(Trace("t", busy + three[:2]), spec, "gpucast", error_sigma=0, max_jobs_per_gpu=1)
    assert two.params["mig_repartitions"] == [] and _runs(two)["s0"][0] == pytest.approx(end)
    # time-slicing up to 4 jobs a GPU: the whole GPUs take the three as they are
    shared = cl.simulate(Trace("t", busy + three), spec, "gpucast", error_sigma=0)
    assert shared.params["mig_repartitions"] == [] and _runs(shared)["s0"][0] == pytest.approx(1.0)


def test_a_waiting_multi_gpu_job_keeps_the_node_whole():
    """As above with a two-GPU job c waiting ahead of the light jobs: no carving while c waits."""
    spec = cl.ClusterSpec.build(GPU, 2, 2, "1g.10gb*7", 1, mig_dynamic=True, mig_start="whole")
    tr = Trace("t", [_job("a", 0.0, 1, 1000.0, "mlp-small"), _job("b", 0.0, 1, 1000.0, "mlp-small"),
                     _job("c", 0.5, 2, 300.0)] + [_job(f"s{i}", 1.0, 1, 500.0, "mlp-small") for i in range(3)])
    res = cl.simulate(tr, spec, "gpucast", error_sigma=0, max_jobs_per_gpu=1)
    start = _runs(res)["c"][0]
    assert start == pytest.approx(1000.0)
    # carved only once c runs (then the light jobs still waiting are more than the node could hold)
    assert [r[0] for r in res.params["mig_repartitions"]] == [start]


def test_a_node_keeps_a_face_it_opened_for_the_hold():
    """Carved at 1,060 s for three light jobs; a two-GPU job arriving at 1,100 s wants the node
    whole again, but it was carved less than an hour ago: it drains at 1,060 + 3,600 s (an event
    brings that pass) and the job starts 60 s later; with no hold, as soon as the light jobs end."""
    spec = cl.ClusterSpec.build(GPU, 2, 2, "1g.10gb*7", 1, mig_dynamic=True, mig_start="whole")
    tr = Trace("t", [_job("a", 0.0, 1, 1000.0, "mlp-small"), _job("b", 0.0, 1, 1000.0, "mlp-small")]
               + [_job(f"s{i}", 1.0, 1, 500.0, "mlp-small") for i in range(3)] + [_job("c", 1100.0, 2, 300.0)])
    held = cl.simulate(tr, spec, "gpucast", error_sigma=0, max_jobs_per_gpu=1)
    carved = held.params["mig_repartitions"][0][1]
    assert held.params["mig_repartitions"][1] == [pytest.approx(carved + 3600.0), pytest.approx(carved + 3660.0), 0,
                                                  "whole"]
    assert _runs(held)["c"][0] == pytest.approx(carved + 3660.0)
    free = cl.simulate(tr, spec, "gpucast", error_sigma=0, max_jobs_per_gpu=1, mig_hold_s=0.0)
    last = max(_runs(free)[f"s{i}"][1] for i in range(3))
    assert free.params["mig_repartitions"][1] == [1100.0, pytest.approx(last + 60.0), 0, "whole"]
    assert _runs(free)["c"][0] == pytest.approx(last + 60.0)
    with pytest.raises(ValueError, match="mig_hold_s must be >= 0"):
        cl.simulate(tr, spec, "gpucast", error_sigma=0, mig_hold_s=-1.0)


def test_the_node_whose_jobs_end_first_by_their_limits_drains():
    """Two one-GPU nodes, each running one job: a (limit 5,000 s) on node 0, b (1,000 s) on node 1;
    node 1 is carved, after b."""
    spec = cl.ClusterSpec.build(GPU, 2, 1, "1g.10gb*7", 2, mig_dynamic=True, mig_start="whole")
    tr = Trace("t", [_job("a", 0.0, 1, 5000.0, "mlp-small"), _job("b", 0.0, 1, 1000.0, "mlp-small")]
               + [_job(f"s{i}", 1.0, 1, 500.0, "mlp-small") for i in range(2)])
    res = cl.simulate(tr, spec, "gpucast", error_sigma=0, max_jobs_per_gpu=1)
    assert res.params["mig_repartitions"] == [[1.0, pytest.approx(_runs(res)["b"][1] + 60.0), 1, "carved"]]
    swapped = Trace("t", [_job("a", 0.0, 1, 1000.0, "mlp-small"), _job("b", 0.0, 1, 5000.0, "mlp-small")]
                    + [_job(f"s{i}", 1.0, 1, 500.0, "mlp-small") for i in range(2)])
    assert cl.simulate(swapped, spec, "gpucast", error_sigma=0, max_jobs_per_gpu=1).params[
        "mig_repartitions"][0][2] == 0


def test_what_wants_slices():
    """gpucast's rule on a node of one whole GPU and its 7 1g.10gb slices, one job per GPU or slice:
    more than one job that does more on the slices than whole; not one too slow there, nor one that
    does not fit a slice's memory."""
    pol = GpucastPolicy(max_jobs_per_gpu=1)
    sl = "a100-80gb:1g.10gb"
    pol.attach([GpuOccupancy(0, GPU, 80e9)] + [GpuOccupancy(i, sl, 10e9) for i in range(1, 8)])

    def job(cost, gpus=1, mem=1e9):
        return SimpleNamespace(gpus=gpus, obs={GPU: _obs(0.0, GPU), sl: replace(_obs(cost, sl), memory_bytes=mem)})

    node = ([0], list(range(1, 8)))
    assert pol.wants_slices(iter([job(0.2), job(0.2)]), *node)
    assert not pol.wants_slices(iter([job(0.2)]), *node)                   # the whole GPU takes it after the drain
    assert not pol.wants_slices(iter([job(1.5), job(1.5)]), *node)         # over max_slice_cost
    assert not pol.wants_slices(iter([job(0.2, mem=20e9)] * 2), *node)     # not within a slice's memory
    assert not pol.wants_slices(iter([job(0.2), job(0.2), job(0.0, gpus=2)]), *node)
    assert pol.wants_whole([job(0.2, mem=20e9)]) and not pol.wants_whole([job(0.2)])
    assert not Policy().wants_slices(iter([job(0.2)] * 3), *node)


def test_the_cli_takes_the_start_face():
    from gpucast.cli import app

    bad = CliRunner().invoke(app, ["simulate", "--limit", "5", "--gpu-type", GPU, "--mig-layout", "3g.40gb*2",
                                   "--mig-start", "whole"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == ["error: --mig-start goes with --mig-dynamic"]
    hold = CliRunner().invoke(app, ["simulate", "--limit", "5", "--mig-hold-s", "10"])
    assert hold.exit_code == 2 and hold.output.strip().splitlines() == ["error: --mig-hold-s goes with --mig-dynamic"]
    ok = CliRunner().invoke(app, ["simulate", "--trace", "pai-mix", "--limit", "30", "--gpus", "16", "--gpu-type", GPU,
                                  "--policies", "gpucast", "--mig-layout", "3g.40gb*2", "--mig-nodes", "1",
                                  "--mig-dynamic", "--mig-start", "whole", "--mig-hold-s", "0"])
    assert ok.exit_code == 0, ok.output
    assert "re-partitioned on demand from whole" in " ".join(ok.output.split())
