"""Re-partitioning MIG nodes while the simulator runs (gpucast.cluster.repartition): a node with
two faces, drained and reconfigured when jobs that want whole GPUs wait."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import gpucast.cluster as cl
from gpucast.cluster.behaviour import Observation
from gpucast.cluster.policies.base import GpuOccupancy, Policy
from gpucast.cluster.policies.gpucast import GpucastPolicy
from gpucast.cluster.trace_formats import Trace, TraceJob

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


def _job(jid, at, gpus, duration, model="resnet50"):
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
    assert res.params["mig_repartitions"] == [[10.0, 70.0, 1], [70.0, pytest.approx(a.finish_s + 60.0), 0]]
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
