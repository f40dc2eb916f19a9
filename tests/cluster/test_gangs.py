"""Planned gangs (multi-GPU jobs with a parallel plan) in the simulator: named in a mix YAML,
predicted as their plan (small Llama configs: cheap captures), placed by node, never shared.

The end-to-end runs use real predictions, the real truth (error 0, so a gang's service time is
its steps times gpucast's predicted optimizer step) and the real policies; the placements are the
engine's own record (``Simulator.placements``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpucast import cluster
from gpucast.cluster import gangs, mixes
from gpucast.cluster.engine import Simulator
from gpucast.cluster.policies import GpuOccupancy, choose_gpu, make_policy
from gpucast.cluster.traces import Trace, TraceError, TraceJob, load_trace
from gpucast.cluster.truth import Observation, Profile, Truth

GPU = "a100-80gb"
LLAMA = ("{model_type: llama, hidden_size: 512, intermediate_size: 1376, num_hidden_layers: 4, "
         "num_attention_heads: 8, num_key_value_heads: 8, vocab_size: 1000, max_position_embeddings: 256}")

# A user's mix: single-GPU jobs drawn over Gavel's all-single-GPU trace ed69ec, and four gangs that
# arrive among its first jobs: one node (tensor 8), two whole nodes (FSDP), four whole nodes (FSDP
# with tensor 2), and 12 GPUs with FSDP (two whole nodes, 8 + 4 GPUs of them used).
MIX = f"""
name: small-llm
trace: gavel:ed69ec
gpu: {GPU}
target: {{mean: 0.4}}
workloads:
  - {{model: mlp-small, batch_size: [32, 256], data: [{{}}, {{num_workers: 0}}]}}
gangs:
  - id: tp8
    arrival_s: 5
    steps: 4000
    model: "hf:llama"
    hf_config: {LLAMA}
    batch_size: 4
    seq_len: 256
    precision: bf16
    optimizer: adamw
    gpus: 8
    parallel: {{tensor: 8}}
  - id: fsdp16
    arrival_s: [10, 60]
    steps: 3000
    model: "hf:llama"
    hf_config: {LLAMA}
    batch_size: 4
    seq_len: 256
    precision: bf16
    optimizer: adamw
    gpus: 16
    parallel: {{sharding: fsdp-full}}
  - id: fsdp32-tp2
    arrival_s: 20
    steps: 2000
    model: "hf:llama"
    hf_config: {LLAMA}
    batch_size: 4
    seq_len: 256
    precision: bf16
    optimizer: adamw
    gpus: 32
    parallel: {{sharding: fsdp-full, tensor: 2}}
  - id: fsdp12
    arrival_s: 30
    steps: 2000
    model: "hf:llama"
    hf_config: {LLAMA}
    batch_size: 4
    seq_len: 256
    precision: bf16
    optimizer: adamw
    gpus: 12
    parallel: {{sharding: fsdp-full}}
"""
GANG_IDS = {"tp8", "fsdp16-1", "fsdp16-2", "fsdp32-tp2", "fsdp12"}
N_JOBS = 40          # the first jobs by arrival: 35 single-GPU jobs and the 5 gang jobs
NODES = 6            # 6 nodes of 8 GPUs


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("mix") / "small-llm.yaml"
    p.write_text(MIX)
    return load_trace(p, limit=N_JOBS)


def _run(trace, policy, **params):
    spec = cluster.ClusterSpec.homogeneous(GPU, 8 * NODES, 8)
    sim = Simulator(trace, spec, make_policy(policy, **params), Truth(error_sigma=0.0))
    return sim, sim.run()


def test_the_mix_names_its_gangs_with_their_plans(trace):
    gang_jobs = {j.job_id: j for j in trace.jobs if j.job_id in GANG_IDS}
    assert set(gang_jobs) == GANG_IDS
    assert sum(j.gpus == 1 for j in trace.jobs) == N_JOBS - len(GANG_IDS)
    for jid, size, per_node in (("tp8", 8, 8), ("fsdp16-2", 16, 8), ("fsdp32-tp2", 32, 8), ("fsdp12", 12, 8)):
        tj = gang_jobs[jid]
        f = dict(tj.fields)
        assert tj.gpus == f["gpus"] == size and tj.steps > 0 and tj.duration_s is None
        assert f["parallel"].to_dict()["sharding" if jid != "tp8" else "tensor"] in ("fsdp-full", 8)
        assert gangs.node_gpus(tj.fields, tj.gpus) == per_node
        assert Profile.from_trace_job(tj).job().parallel is not None    # Job.from_dict's own group
    assert [j.arrival_s for j in trace.jobs] == sorted(j.arrival_s for j in trace.jobs)
    assert gang_jobs["fsdp16-2"].arrival_s == 60.0


def _node(g):
    return g // 8


def _overlap(a, b):
    return a[0] < (b[1] if b[1] is not None else math.inf) and b[0] < (a[1] if a[1] is not None else math.inf)


@pytest.mark.parametrize("policy", ["gpucast", "slot", "packing", "horus"])
def test_gangs_get_whole_nodes_alone_and_every_job_finishes(trace, policy):
    sim, res = _run(trace, policy)
    assert all(r.finish_s is not None for r in res.records), policy
    assert sum(r.oom_failures for r in res.records) == 0
    ids = [j.tj.job_id for j in sim.jobs]
    gang_runs = [p for p in sim.placements if ids[p[2]] in GANG_IDS]
    assert {ids[p[2]] for p in gang_runs} == GANG_IDS
    for start, end, i, gpus in gang_runs:
        job = sim.jobs[i]
        assert len(gpus) == job.gpus == len(set(gpus))
        nodes = sorted({_node(g) for g in gpus})
        if job.gpus <= 8:
            assert len(nodes) == 1                                   # inside one node
            held = set(gpus)
        else:
            assert len(nodes) == math.ceil(job.gpus / 8)             # whole nodes...
            per = [sum(_node(g) == n for g in gpus) for n in nodes]
            assert sorted(per, reverse=True) == [8] * (len(nodes) - 1) + [job.gpus - 8 * (len(nodes) - 1)]
            held = {g for n in nodes for g in range(8 * n, 8 * n + 8)}
        # ...that no other job touches while it runs (nor any GPU it runs on)
        for other in sim.placements:
            if other[2] != i and _overlap((start, end), other):
                assert not held & set(other[3]), (policy, ids[i], ids[other[2]])
        # its service time: its steps at its predicted optimizer step (error 0), run alone
        step = sim.truth.estimate(job.prof, GPU).step_time_s
        assert end - start == pytest.approx(job.tj.steps * step, rel=1e-9)


def test_the_gpucast_policy_still_shares_gpus_off_the_gangs_nodes(trace):
    # the exclusivity above is not a policy that never shares: light single-GPU jobs do share
    sim, _res = _run(trace, "gpucast")
    singles = [p for p in sim.placements if sim.jobs[p[2]].gpus == 1]
    shared = any(a is not b and a[3] == b[3] and _overlap(a, b) for a in singles for b in singles)
    assert shared


def test_a_gang_service_time_is_its_plans_predicted_step_times_steps(trace):
    import gpucast

    tj = next(j for j in trace.jobs if j.job_id == "fsdp16-1")
    p = gpucast.predict(Profile.from_trace_job(tj).job(), GPU)
    assert p.plan["nodes"] == 2 and p.plan["gpus"] == 16
    sim, res = _run(trace, "slot")
    rec = next(r for r in res.records if r.job_id == "fsdp16-1")
    assert rec.solo_duration_s == pytest.approx(tj.steps * p.step_time_s, rel=1e-12)
    assert rec.gpu_seconds == pytest.approx(16 * tj.steps * p.step_time_s, rel=1e-9)


def test_a_cluster_that_can_never_hold_a_gang_is_refused(trace):
    four = cluster.ClusterSpec.homogeneous(GPU, 48, 4)          # nodes of 4 GPUs: the plans want 8
    with pytest.raises(ValueError, match=r"job tp8: .*inside one node"):
        Simulator(trace, four, make_policy("slot"), Truth(error_sigma=0.0))
    small = Trace("t", [j for j in trace.jobs if j.job_id != "tp8"])
    with pytest.raises(ValueError, match=r"job fsdp16-1: its plan needs 2 whole nodes of at least 8 GPUs"):
        Simulator(small, four, make_policy("slot"), Truth(error_sigma=0.0))
    with pytest.raises(TraceError, match="job fsdp32-tp2: its parallel plan needs 32 GPUs, more than the cluster's 24"):
        load_trace(trace, gpus=24)
    # an ordinary multi-GPU job is still capped, as before
    plain = TraceJob("ddp", 0.0, "mlp-small", 32, 64, steps=10.0, fields=(("model", "mlp-small"),))
    assert load_trace(Trace("t", [plain]), gpus=24).jobs[0].gpus == 24


# ------------------------------------------------------------------ the placement rule itself
def _nodes(sizes):
    lo = np.cumsum([0] + sizes[:-1]).astype(np.int64)
    return lo, lo + np.array(sizes, dtype=np.int64)


def test_choose_inside_one_node_best_fit():
    lo, hi = _nodes([8, 8, 8])
    free = np.ones(24, dtype=bool)
    free[[0, 1, 2, 3, 4]] = False            # node 0: 3 free; node 1: 8 free; node 2: 5 free
    free[[16, 17, 18]] = False
    run, hold = gangs.choose(free, lo, hi, ["a"] * 3, 4, 8)
    assert run == hold == [19, 20, 21, 22]   # the fullest node that fits 4 (node 2), not node 1
    assert gangs.choose(free, lo, hi, ["a"] * 3, 3, 8)[0] == [5, 6, 7]
    free[8] = False
    free[19] = False                         # 3 + 7 + 4 free: no node has 8, though 14 GPUs are free
    assert gangs.choose(free, lo, hi, ["a"] * 3, 8, 8) is None


def test_choose_whole_nodes_of_one_type_and_the_rest_on_the_last():
    lo, hi = _nodes([8, 8, 8, 8])
    free = np.ones(32, dtype=bool)
    free[9] = False                          # node 1 is not whole
    run, hold = gangs.choose(free, lo, hi, ["a", "a", "b", "b"], 12, 8)
    assert run == list(range(16, 28)) and hold == list(range(16, 32))   # the two "b" nodes: one type
    run, hold = gangs.choose(free, lo, hi, ["a", "a", "b", "a"], 12, 8)
    assert run == list(range(0, 8)) + list(range(24, 28)) and hold == list(range(0, 8)) + list(range(24, 32))
    assert gangs.choose(free, lo, hi, ["a"] * 4, 32, 8) is None          # 3 whole nodes, 4 needed
    lo, hi = _nodes([4, 4, 4])
    assert gangs.choose(np.ones(12, dtype=bool), lo, hi, ["a"] * 3, 16, 8) is None   # nodes too small


def test_node_gpus_reads_the_plan():
    from gpucast.plan import Parallel

    assert gangs.node_gpus((("parallel", Parallel(sharding="fsdp-full")),), 16) == 8
    assert gangs.node_gpus({"parallel": {"gpus_per_node": 4}}, 16) == 4
    assert gangs.node_gpus((("parallel", Parallel(sharding="fsdp-full")),), 1) == 0   # one GPU: no gang
    assert gangs.node_gpus((("model", "resnet50"),), 16) == 0                        # DDP without a plan


def test_choose_gpu_keeps_off_a_gangs_gpus():
    gang = Observation("hf:llama", 4, 16, GPU, "prediction", 99.0, (95.0, 100.0), 1e9, (1e9, 1e9), 0.1,
                       node_gpus=8)
    light = Observation("mlp-small", 32, 1, GPU, "prediction", 5.0, (3.0, 7.0), 1e8, (1e8, 1e8), 0.01)
    gpus = [GpuOccupancy(0, GPU, 80e9, 0, (gang,)), GpuOccupancy(1, GPU, 80e9, 0, (light,)),
            GpuOccupancy(2, GPU, 80e9, 1, ())]
    policy = make_policy("gpucast")
    assert choose_gpu(policy, gpus, light)[0] == 1                  # shares with the light job...
    assert choose_gpu(policy, gpus[:1], light)[0] is None           # ...never with the gang
    one = Observation("hf:llama", 4, 2, GPU, "prediction", 99.0, (95.0, 100.0), 1e9, (1e9, 1e9), 0.1, node_gpus=8)
    assert choose_gpu(policy, gpus, one)[0] == 2                    # a gang takes an empty GPU only


def test_the_packaged_llm_mix_names_gangs_up_to_64_gpus():
    m = mixes.load("llm-mix")
    sizes = sorted(dict(g.fields)["gpus"] for g in m.gangs)
    assert sizes == [8, 16, 32, 64]
    assert all(dict(g.fields)["parallel"] is not None and g.steps for g in m.gangs)
