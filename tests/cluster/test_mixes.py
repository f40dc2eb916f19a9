"""Workload mixes: they reproduce their target utilization statistics, every policy runs on them,
and a bad mix file gets one clear error line."""

import pytest
from typer.testing import CliRunner

from gpucast.cluster import mixes
from gpucast.cluster.truth import Profile, predict_cached

SLOW = pytest.mark.slow  # whole mixes drawn and simulated: `make test-slow` (docs/contributing.md)

# Stated tolerances of the drawn mixes (fixed seed 0), in utilization points: the candidates'
# predicted utilizations are discrete and a block of ten jobs can only approximate ten quantiles.
MEAN_TOLERANCE = 3.0
MEDIAN_TOLERANCE = 3.0


@pytest.fixture(scope="module")
def drawn():
    return {name: mixes.build(name) for name in mixes.MIX_NAMES}


def _stats(trace, name):
    gpu = mixes.load(name).gpu
    return mixes.statistics(trace, lambda j: predict_cached(Profile.from_trace_job(j), gpu).util_pct)


@SLOW
def test_philly_mix_averages_about_52_percent(drawn):
    s = _stats(drawn["philly-mix"], "philly-mix")
    assert abs(s["mean_pct"] - 52.0) <= MEAN_TOLERANCE
    assert abs(s["gpu_hour_mean_pct"] - 52.0) <= MEAN_TOLERANCE
    assert s["p10_pct"] < 30 < 80 < s["p90_pct"]       # a spread, not one job type


@SLOW
def test_pai_mix_has_a_median_of_ten_percent_or_less(drawn):
    s = _stats(drawn["pai-mix"], "pai-mix")
    assert abs(s["median_pct"] - 10.0) <= MEDIAN_TOLERANCE
    assert s["share_under_100_pct"] >= 98.0             # 98 % of PAI's tasks used less than they asked


@SLOW
def test_a_mix_keeps_the_traces_arrivals_sizes_and_durations(drawn):
    from gpucast.cluster.traces import load_trace, solo_duration_s

    base = load_trace(mixes.load("philly-mix").trace)
    mix = drawn["philly-mix"]
    assert [j.arrival_s for j in mix.jobs] == [j.arrival_s for j in base.jobs]
    assert [j.gpus for j in mix.jobs] == [j.gpus for j in base.jobs]
    assert [j.duration_s for j in mix.jobs] == pytest.approx([solo_duration_s(j) for j in base.jobs])
    assert len({j.profile_key for j in mix.jobs}) >= 20


@SLOW
def test_the_same_seed_draws_the_same_mix(drawn):
    again = mixes.build("pai-mix")
    assert [j.fields for j in again.jobs] == [j.fields for j in drawn["pai-mix"].jobs]


@SLOW
@pytest.mark.parametrize("world", ["measured-pairs", "gavel"])
@pytest.mark.parametrize("name", mixes.MIX_NAMES)
def test_every_policy_runs_end_to_end_on_each_mix_and_world(drawn, name, world):
    from gpucast import cluster
    from gpucast.cluster import timeshare
    from gpucast.cluster.traces import Trace

    tr = drawn[name]
    small = Trace(tr.name, tr.jobs[:150], tr.source, tr.notes)
    # llm-mix's gangs take up to 8 whole A100-80GB nodes (a profiling pool takes a GPU of a ninth)
    spec = cluster.ClusterSpec.homogeneous("a100-80gb", 80) if name == "llm-mix" else 32
    for policy in cluster.POLICIES:
        res = cluster.simulate(small, spec, policy, seed=0, colocation=world)
        assert len(res.records) == 150 and res.params["colocation"] == world
        assert sum(r.finish_s is not None for r in res.records) == 150, policy
        assert all(0.0 <= u <= 100.0 for _, u in res.util_timeline)
    assert timeshare.world_name() == "measured-pairs"      # the run's world is undone after it


BAD = [
    ("name: x\n", "target"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50, batch_size: 32}]\ncolour: red\n", "colour: unknown field"),
    ("target: {mean: 0.5, median: 0.1}\nworkloads: [{model: resnet50, batch_size: 32}]\n", "exactly one"),
    ("target: {mean: 52}\nworkloads: [{model: resnet50, batch_size: 32}]\n", "target.mean"),
    ("target: {mean: 0.5}\nworkloads: []\n", "workloads"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50, batch_size: 32, weight: -1}]\n", "weight"),
    ("target: {mean: 0.5}\nworkloads: [{model: no-such-net, batch_size: 32}]\n", "workloads[1]"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50, batch_size: 32, data: {workers: 2}}]\n", "workloads[1]"),
    ("target: {mean: 0.5\n", "not valid YAML"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50, batch_size: 32, gpus: 4}]\n", "workloads[1].gpus"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50, batch_size: 32, parallel: {tensor: 2}}]\n",
     "workloads[1].parallel"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50}]\ngangs: [{model: gpt2, gpus: 16, steps: 10}]\n",
     "gangs[1]: a gang needs"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50}]\n"
     "gangs: [{model: gpt2, gpus: 16, parallel: {sharding: zero3}}]\n", "exactly one of 'steps'"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50}]\n"
     "gangs: [{model: gpt2, gpus: 16, steps: 10, arrival_s: -1, parallel: {sharding: zero3}}]\n",
     "gangs[1].arrival_s"),
    ("target: {mean: 0.5}\nworkloads: [{model: resnet50}]\n"
     "gangs: [{model: gpt2, gpus: 12, steps: 10, parallel: {tensor: 8}}]\n", "gangs[1]: field 'gpus' (12)"),
]


@pytest.mark.parametrize("text,expect", BAD)
def test_a_bad_mix_file_gets_one_clear_error_line(tmp_path, text, expect):
    from gpucast.cli import app

    p = tmp_path / "mix.yaml"
    p.write_text(text)
    out = tmp_path / "sim.json"
    r = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--gpus", "8", "--policies", "slot",
                                 "--json", str(out)])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert expect in lines[0]
    assert not out.exists()


@SLOW
def test_a_gang_larger_than_the_cluster_or_its_nodes_is_one_error_line(tmp_path):
    from gpucast.cli import app

    p = tmp_path / "mix.yaml"
    p.write_text("trace: gavel:ed69ec\ntarget: {mean: 0.5}\nworkloads: [{model: mlp-small, batch_size: 32}]\n"
                 "gangs: [{id: big, model: mlp-small, batch_size: 32, gpus: 16, steps: 10, "
                 "parallel: {sharding: ddp}}]\n")
    for args, expect in ((["--gpus", "8"], "job big: its parallel plan needs 16 GPUs, more than the cluster's 8"),
                         (["--gpus", "32", "--gpus-per-node", "4"], "job big: its plan needs 2 whole nodes"),
                         (["--gpus", "16", "--policies", "profiling"], "(policy profiling)")):
        r = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--limit", "5", "--policies", "slot", *args])
        assert r.exit_code == 2, r.output
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and expect in lines[0], r.output


@SLOW
def test_a_users_own_mix_from_a_small_yaml(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("name: mine\ntrace: gavel:ee9e8c\ntarget: {mean: 0.6, concentration: 4}\n"
                 "workloads:\n  - {model: resnet18-cifar, batch_size: [64, 128], data: [{}, {num_workers: 0}]}\n"
                 "  - {model: lstm-lm-small, batch_size: 20, weight: 2}\n")
    m = mixes.load(p)
    assert m.name == "mine" and len(m.candidates) == 5
    assert sum(w for _c, w in m.candidates) == pytest.approx(3.0)
    tr = mixes.build(m)
    assert {j.workload for j in tr.jobs} <= {"resnet18-cifar", "lstm-lm-small"}
