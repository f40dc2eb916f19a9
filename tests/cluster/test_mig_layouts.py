"""Static MIG layouts in the simulator (ClusterSpec.partitioned, gpucast simulate --mig-layout):
the layout checked against the GPU, slices weighed as their share of the GPU, one-GPU jobs only."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import gpucast.cluster as cl
from gpucast import mig
from gpucast.cluster import metrics


def test_a_layout_is_checked_against_the_mig_guides_limits():
    assert [p.name for p in mig.layout("a100-80gb", "3g.40gb, 2g.20gb,2g.20gb")] == ["3g.40gb", "2g.20gb", "2g.20gb"]
    assert len(mig.layout("a100-80gb", "1g.10gb*7")) == 7
    with pytest.raises(mig.LayoutError, match="needs 8 compute"):
        mig.layout("a100-80gb", "4g.40gb,4g.40gb")
    with pytest.raises(mig.LayoutError, match="needs 5 compute and 10 memory slices; a100-80gb has 7 and 8"):
        mig.layout("a100-80gb", "1g.20gb*5")       # memory slices run out first
    with pytest.raises(mig.LayoutError, match="did you mean"):
        mig.layout("a100-80gb", "1g.5gb")
    with pytest.raises(mig.LayoutError, match="PROFILE\\*COUNT"):
        mig.layout("a100-80gb", "1g.10gb*x")


def test_a_carved_node_holds_its_slices_and_counts_as_its_whole_gpus():
    spec = cl.ClusterSpec.partitioned("a100-80gb", 16, "3g.40gb,2g.20gb,2g.20gb", mig_nodes=1)
    assert spec.gpu_types == {"a100-80gb:3g.40gb": 8, "a100-80gb:2g.20gb": 16, "a100-80gb": 8}
    assert spec.physical_gpus == 16.0
    assert spec.reference_gpu == "a100-80gb"       # durations stay solo times on the whole GPU
    assert sorted(set(spec.weights())) == [2 / 7, 3 / 7, 1.0]
    with pytest.raises(ValueError, match="--mig-nodes"):
        cl.ClusterSpec.partitioned("a100-80gb", 16, "1g.10gb", mig_nodes=3)


@pytest.fixture(scope="module")
def trace():
    """Sixty jobs of the bundled Gavel trace (no mix to draw: quick)."""
    return cl.load_trace("gavel", gpus=16, limit=60)


@pytest.mark.parametrize("policy", ["gpucast", "packing", "slot"])
def test_multi_gpu_jobs_never_land_on_slices_and_every_job_finishes(policy, trace):
    spec = cl.ClusterSpec.partitioned("a100-80gb", 16, "3g.40gb,2g.20gb,2g.20gb", mig_nodes=1)
    tr, res = trace, cl.simulate(trace, spec, policy, sharing="mps")
    assert all(rec.finish_s is not None for rec in res.records)
    assert max(j.gpus for j in tr.jobs) > 8           # capped to the 8 whole GPUs, not the 32 slices
    # the utilization timeline is a share of the 16 whole GPUs: never above 100 %
    assert 0 < max(u for _, u in res.util_timeline) <= 100.0


def test_placements_respect_slices(monkeypatch, trace):
    """The placements the engine made: a job on a slice is a one-GPU job."""
    from gpucast.cluster import engine as eng

    spec = cl.ClusterSpec.partitioned("a100-80gb", 16, "3g.40gb,2g.20gb,2g.20gb", mig_nodes=1)
    tr = trace
    seen = []
    orig = eng.Simulator._result

    def keep(self):
        seen.extend((self.jobs[j].gpus, gpus) for _s, _e, j, gpus in self.placements)
        return orig(self)

    monkeypatch.setattr(eng.Simulator, "_result", keep)
    cl.simulate(tr, spec, "gpucast", sharing="mps")
    types = [t for _, _, t in spec.gpus()]
    on_slices = [(k, g) for k, g in seen if any(":" in types[i] for i in g)]
    assert on_slices and all(k == 1 and len(g) == 1 for k, g in on_slices)
    assert any(k > 1 for k, _ in seen)


def test_an_uncarved_build_is_the_homogeneous_cluster():
    assert cl.ClusterSpec.build("a100-80gb", 16) == cl.ClusterSpec.homogeneous("a100-80gb", 16)
    with pytest.raises(ValueError, match="--mig-nodes goes with --mig-layout"):
        cl.ClusterSpec.build("a100-80gb", 16, mig_nodes=1)


def test_the_cli_carves_nodes_and_refuses_a_bad_layout_in_one_line():
    from gpucast.cli import app

    base = ["simulate", "--trace", "gavel", "--limit", "30", "--gpus", "16", "--gpu-type", "a100-80gb",
            "--policies", "gpucast"]
    ok = CliRunner().invoke(app, base + ["--mig-layout", "3g.40gb,2g.20gb,2g.20gb", "--mig-nodes", "1"])
    assert ok.exit_code == 0, ok.output
    assert "1 nodes carved into MIG 3g.40gb,2g.20gb,2g.20gb" in ok.output
    bad = CliRunner().invoke(app, base + ["--mig-layout", "3g.40gb*3"])
    assert bad.exit_code == 2
    assert bad.output.strip() == ("error: MIG layout '3g.40gb*3' needs 9 compute and 12 memory slices; "
                                  "a100-80gb has 7 and 8")


def _obs(gpu_type, step, util=20.0):
    from gpucast.cluster.behaviour import Observation

    return Observation("w", 8, 1, gpu_type, "prediction", util, (util, util), 1e9, (1e9, 1e9), step)


def test_slice_costs_come_from_the_told_steps_on_the_slice_and_its_whole_gpu():
    from gpucast.cluster.behaviour import with_slice_costs

    obs = {"a100-80gb:3g.40gb": _obs("a100-80gb:3g.40gb", 0.15), "a100-80gb:1g.10gb": _obs("a100-80gb:1g.10gb", 0.1)}
    out = with_slice_costs({**obs, "a100-80gb": _obs("a100-80gb", 0.1)})
    assert out["a100-80gb:3g.40gb"].slice_cost == pytest.approx(0.5)
    assert out["a100-80gb:1g.10gb"].slice_cost == 0.0
    # a cluster of slices only: nothing faster to wait for
    assert all(o.slice_cost == 0.0 for o in with_slice_costs(obs).values())
    assert with_slice_costs({"v100-16gb": _obs("v100-16gb", 0.1)}) == {"v100-16gb": _obs("v100-16gb", 0.1)}


def test_the_gpucast_policy_prefers_a_whole_gpu_to_a_slow_slice_and_refuses_a_very_slow_one():
    from dataclasses import replace

    from gpucast.cluster.policies.base import GpuOccupancy, choose_gpu
    from gpucast.cluster.policies import make_policy

    pol = make_policy("gpucast")
    whole = GpuOccupancy(1, "a100-80gb", 80e9)
    sl = GpuOccupancy(0, "a100-80gb:3g.40gb", 40e9)
    job = {"a100-80gb": _obs("a100-80gb", 0.1),
           "a100-80gb:3g.40gb": replace(_obs("a100-80gb:3g.40gb", 0.15), slice_cost=0.5)}
    assert choose_gpu(pol, [sl, whole], job)[0] == 1                  # the slice is lower-numbered but slower
    host_bound = {**job, "a100-80gb:3g.40gb": replace(job["a100-80gb:3g.40gb"], slice_cost=0.0)}
    assert choose_gpu(pol, [sl, whole], host_bound)[0] == 0           # as fast there: first fit
    too_slow = {**job, "a100-80gb:3g.40gb": replace(job["a100-80gb:3g.40gb"], slice_cost=1.5)}
    assert choose_gpu(pol, [sl], too_slow)[0] is None                # 2.5x slower: wait for a whole GPU
    assert choose_gpu(make_policy("gpucast", max_slice_cost=2.0), [sl], too_slow)[0] == 0


def test_a_slice_draws_its_whole_gpus_error():
    from gpucast.cluster.truth import Profile, Truth

    t = Truth(error_sigma=0.5, seed=3)
    tr = cl.load_trace("gavel", limit=3)
    prof = Profile.from_trace_job(tr.jobs[0])
    ratio = t._factor(prof, "a100-80gb:2g.20gb", "step") / t._factor(prof, "a100-80gb", "step")
    assert ratio == 1.0
    assert t._factor(prof, "h100", "step") != t._factor(prof, "a100-80gb", "step")
