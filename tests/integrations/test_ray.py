"""gpucast on a real local Ray cluster: jobs predicted small share a GPU, a large one gets its own.

The cluster is started by the test (``ray.init`` with 2 *logical* GPUs: Ray schedules GPUs as
numbers and sets ``CUDA_VISIBLE_DEVICES``; no GPU is needed). The jobs are CPU-only stand-ins
that report the GPU ids and the GPU fraction Ray gave them and hold at a barrier, so the jobs
that must run at the same time really do. The sizing numbers come from real predictions
(``gpucast.api.predict``); only the arithmetic tests at the end use a hand-made Prediction.
"""

from __future__ import annotations

import sys
import time

import pytest

ray = pytest.importorskip("ray")

from gpucast.api import predict  # noqa: E402
from gpucast.integrations import ray as gray  # noqa: E402
from gpucast.integrations.resources import gpu_share  # noqa: E402
from gpucast.prediction import Prediction  # noqa: E402
from made_predictions import made_prediction

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

GPU = "a100-80gb"
SMALL = {"model": "mlp-small", "batch_size": 32,  # benchmark-style: inputs on the GPU (its MNIST
         "data": {"source": "device"},              # loader would make it loader-bound and tiny)
         "loop": {"item_calls": 1, "progress_bar": False, "log_every": 0, "cudnn_benchmark": True}}  # ~39 % util: a 0.5 share
LARGE = {"model": "resnet50", "batch_size": 64}    # ~99 % util: exclusive


class Barrier:
    """A counter the stand-ins meet at (an actor that takes no CPU)."""

    def __init__(self):
        self.n = 0

    def arrive(self) -> int:
        self.n += 1
        return self.n

    def count(self) -> int:
        return self.n


def stand_in(name: str, barrier, parties: int, hold_s: float = 0.3, wait_s: float = 90.0) -> dict:
    """A job that uses no GPU: reports what Ray assigned and waits until ``parties`` jobs have
    arrived (or ``wait_s`` passed), then holds for ``hold_s``."""
    import os
    import time

    import ray

    start = time.time()
    ray.get(barrier.arrive.remote())
    reached = False
    while time.time() - start < wait_s:
        if ray.get(barrier.count.remote()) >= parties:
            reached = True
            break
        time.sleep(0.02)
    time.sleep(hold_s)
    return dict(name=name, gpu_ids=sorted(int(g) for g in ray.get_gpu_ids()),
                gpu=ray.get_runtime_context().get_assigned_resources().get("GPU"),
                cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES"), share_env=os.environ.get("GPUCAST_SHARE"),
                start=start, end=time.time(), reached=reached)


@pytest.fixture(scope="module")
def cluster():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 2**20, namespace="gpucast-test")
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def shares():
    return {name: gpu_share(predict(spec, GPU)) for name, spec in (("small", SMALL), ("large", LARGE))}


def _barrier():
    return ray.remote(Barrier).options(num_cpus=0).remote()


def test_predictions_premise(shares):
    # What the placement tests rely on, from the real predictions: two small jobs fit on one
    # GPU (but not three of them), the large one needs a whole GPU.
    small, large = shares["small"], shares["large"]
    assert 0.25 < small.share <= 0.5 and not small.exclusive
    assert gray.num_gpus(small) == small.share
    assert large.exclusive and gray.num_gpus(large) == 1.0


def test_small_jobs_share_a_gpu_and_the_large_one_gets_its_own(cluster, shares):
    barrier = _barrier()
    launcher = gray.Launcher(GPU, num_cpus=0.5)
    # All three must run at once to pass the barrier: on 2 GPUs that is possible only if the two
    # small ones share one GPU and the large one has the other to itself.
    refs = [launcher.submit(spec, stand_in, name, barrier, 3)
            for name, spec in (("small-a", SMALL), ("small-b", SMALL), ("large", LARGE))]
    out = {r["name"]: r for r in ray.get(refs, timeout=180)}
    assert all(r["reached"] for r in out.values()), out
    a, b, big = out["small-a"], out["small-b"], out["large"]
    assert a["gpu"] == pytest.approx(shares["small"].share) and b["gpu"] == pytest.approx(shares["small"].share)
    assert big["gpu"] == pytest.approx(1.0)
    assert len(a["gpu_ids"]) == len(b["gpu_ids"]) == len(big["gpu_ids"]) == 1
    assert a["gpu_ids"] == b["gpu_ids"]                     # the small ones share one GPU...
    assert big["gpu_ids"] != a["gpu_ids"]                   # ...the large one has the other
    assert big["cuda_visible"] == str(big["gpu_ids"][0]) and a["cuda_visible"] == str(a["gpu_ids"][0])
    assert a["share_env"] == f"{shares['small'].share:g}" and big["share_env"] == "1"
    assert [ln.num_gpus for ln in launcher.launched] == [shares["small"].share] * 2 + [1.0]


def test_a_queue_of_small_jobs_is_packed_two_per_gpu(cluster, shares):
    # Five 0.35-shares on 2 GPUs: at most two per GPU at once (three would need 1.05), so Ray
    # runs four, queues the fifth, and starts it when a share frees up.
    assert 2 * shares["small"].share <= 1.0 < 3 * shares["small"].share
    barrier = _barrier()
    refs = gray.launch([(SMALL, stand_in, (f"s{i}", barrier, 4)) for i in range(5)], GPU, num_cpus=0.5)
    out = ray.get(refs, timeout=180)
    assert sum(r["reached"] for r in out) == 5              # four ran together (the fifth came later)
    for r in out:
        assert r["gpu"] == pytest.approx(shares["small"].share) and len(r["gpu_ids"]) == 1
    # at any job's start, at most two jobs (itself included) were running on its GPU
    for r in out:
        running = [o for o in out if o["gpu_ids"] == r["gpu_ids"] and o["start"] <= r["start"] < o["end"]]
        assert len(running) <= 2, (r, running)
    last = max(out, key=lambda r: r["start"])
    assert last["start"] >= min(r["end"] for r in out if r is not last)   # the fifth waited for a share
    assert {tuple(r["gpu_ids"]) for r in out} == {(0,), (1,)}


def test_actors_hold_their_share(cluster, shares):
    barrier = _barrier()
    launcher = gray.Launcher(GPU, as_actors=True, num_cpus=0.5)
    refs = launcher.submit_all([(SMALL, stand_in, ("actor-a", barrier, 2)), (SMALL, stand_in, ("actor-b", barrier, 2))])
    out = ray.get(refs, timeout=180)
    assert all(r["reached"] for r in out)
    assert out[0]["gpu_ids"] == out[1]["gpu_ids"] and out[0]["gpu"] == pytest.approx(shares["small"].share)
    assert all(ln.actor is not None for ln in launcher.launched)
    # the actors still hold their shares: 2 GPUs minus two small shares are free
    # (polled: the cluster's view is eventually consistent, and earlier tests' leases may linger)
    free = 2 - 2 * shares["small"].share
    deadline = time.time() + 30
    while time.time() < deadline and abs(ray.available_resources().get("GPU", 0) - free) > 1e-6:
        time.sleep(0.05)
    assert ray.available_resources().get("GPU", 0) == pytest.approx(free)
    for ln in launcher.launched:
        ray.kill(ln.actor)
    launcher.release()


def mps_limits() -> dict:
    import os

    return {k: os.environ.get(k) for k in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")}


def test_under_mps_a_shared_task_runs_with_its_limits(cluster, shares):
    # mps=True: the MPS client limits reach the task's environment (where an MPS daemon would read
    # them at CUDA's start); the large job, given a whole GPU, runs without limits.
    launcher = gray.Launcher(GPU, mps=True, num_cpus=0.5)
    small, large = ray.get([launcher.submit(SMALL, mps_limits), launcher.submit(LARGE, mps_limits)], timeout=180)
    mib = -(-shares["small"].memory_bytes // 2**20)
    assert small == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(round(shares["small"].share * 100)),
                     "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={mib}M"}
    assert large == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": None, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": None}


# ------------------------------------------------------------------ the translation, by hand
def _pred(util=30.0, mem_hi=2**30, **kw) -> Prediction:
    return made_prediction(util, mem_hi, **kw)


def test_num_gpus_spells_the_share():
    assert gray.num_gpus(_pred(util=30.0)) == pytest.approx(0.40)        # 30 % + 10 points margin
    assert gray.num_gpus(_pred(util=31.0)) == pytest.approx(0.45)        # rounded up to the 0.05 grid
    assert gray.num_gpus(_pred(util=95.0)) == 1.0                        # exclusive
    assert gray.num_gpus(_pred(util=95.0, gpus=4)) == 4.0                # whole GPUs for each replica
    assert gray.num_gpus(_pred(util=10.0, gpus=2)) == 2.0                # Ray cannot gang fractions
    assert gray.num_gpus(_pred(util=10.0, mem_hi=100 * 2**30, fits=False)) == 1.0
    assert gray.num_gpus(gpu_share(_pred(util=30.0))) == pytest.approx(0.40)   # a GpuShare works too


def test_options_merge_and_refuse_num_gpus():
    p = _pred(util=30.0, mem_hi=2**30)
    opts = gray.ray_options({"model": "x"}, GPU, predict_fn=lambda job, gpu: p, num_cpus=2,
                            runtime_env={"env_vars": {"MINE": "1"}, "pip": ["x"]})
    assert opts["num_gpus"] == pytest.approx(0.40) and opts["num_cpus"] == 2
    env = opts["runtime_env"]["env_vars"]
    assert env["MINE"] == "1" and opts["runtime_env"]["pip"] == ["x"]
    assert env["GPUCAST_SHARE"] == "0.4" and env["GPUCAST_GPU"] == GPU and env["GPUCAST_UTIL_PCT"] == "30"
    assert env["GPUCAST_GPU_MEMORY_BYTES"] == str(-(-2**30 * 11 // 10))   # ceil(1 GiB x 1.1)
    assert "memory" not in opts                                           # host RAM in Ray: not GPU memory
    with pytest.raises(ValueError, match="num_gpus"):
        gray.options_for(p, num_gpus=1)
    with pytest.raises(ValueError, match="num_gpus"):
        gray.Launcher(GPU, num_gpus=1)


def test_mps_limits_only_for_a_fraction_of_one_gpu():
    shared = gray.options_for(_pred(util=30.0, mem_hi=2**30), mps=True)["runtime_env"]["env_vars"]
    assert shared["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"            # the 0.40 share, in percent
    assert shared["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={-(-2**30 * 11 // 10 // 2**20)}M"   # 1.1 GiB, in MiB
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in gray.env_vars(_pred(util=30.0))       # mps off: none
    for whole in (_pred(util=95.0), _pred(util=10.0, gpus=2)):           # exclusive; Ray's whole GPUs
        assert not any(k.startswith("CUDA_MPS") for k in gray.env_vars(whole, mps=True))
    opts = gray.ray_options({"model": "x"}, GPU, predict_fn=lambda job, gpu: _pred(util=30.0), mps=True,
                            runtime_env={"env_vars": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}})
    assert opts["runtime_env"]["env_vars"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"   # gpucast's limit wins


# ------------------------------------------------------------------ parallel plans: placement groups
def test_a_plan_across_nodes_is_one_bundle_per_node_strictly_spread():
    p = _pred(util=20.0, gpus=16, nodes=2)
    assert gray.placement(p) == {"bundles": [{"GPU": 8.0}, {"GPU": 8.0}], "strategy": "STRICT_SPREAD"}
    assert gray.num_gpus(p) == 8.0                                       # each node's worker
    assert gray.placement(_pred(gpus=12, nodes=2))["bundles"] == [{"GPU": 8.0}, {"GPU": 4.0}]
    # a plan inside one node, a data-parallel job and a share: one bundle on one node
    assert gray.placement(_pred(util=20.0, gpus=8, nodes=1)) == {"bundles": [{"GPU": 8.0}], "strategy": "STRICT_PACK"}
    assert gray.placement(_pred(util=20.0, gpus=4)) == {"bundles": [{"GPU": 4.0}], "strategy": "STRICT_PACK"}
    assert gray.placement(_pred(util=30.0)) == {"bundles": [{"GPU": 0.4}], "strategy": "STRICT_PACK"}


def test_the_launcher_refuses_a_plan_across_nodes():
    launcher = gray.Launcher(GPU, predict_fn=lambda job, gpu: _pred(util=20.0, gpus=16, nodes=2))
    with pytest.raises(ValueError, match="spans nodes"):
        launcher.submit({"model": "mlp-small", "batch_size": 32}, stand_in, "x", None, 1)
    assert launcher.launched == []


def test_placement_groups_on_the_local_cluster(cluster):
    from ray.util import remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    # a plan inside one node: its one bundle is reserved on the (one) node, and a worker in it
    # gets both GPUs
    pg = gray.placement_group(_pred(util=20.0, gpus=2, nodes=1))
    try:
        ray.get(pg.ready(), timeout=120)
        got = ray.get(ray.remote(lambda: sorted(int(g) for g in ray.get_gpu_ids())).options(
            num_gpus=2, num_cpus=0, scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote(), timeout=120)
        assert got == [0, 1]
    finally:
        remove_placement_group(pg)
    # a plan across two nodes cannot be placed on a one-node cluster: STRICT_SPREAD keeps it pending
    spread = gray.placement_group(_pred(util=20.0, gpus=2, nodes=2, gpus_per_node=1))
    try:
        assert ray.util.placement_group_table(spread)["strategy"] == "STRICT_SPREAD"
        assert not spread.wait(timeout_seconds=3)
    finally:
        remove_placement_group(spread)


def test_a_real_16_gpu_fsdp_prediction_asks_for_two_whole_nodes():
    llama = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
             "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000, "max_position_embeddings": 256}
    p = predict({"model": "hf:llama", "hf_config": llama, "batch_size": 4, "seq_len": 256, "precision": "bf16",
                 "optimizer": "adamw", "gpus": 16, "parallel": {"sharding": "fsdp-full"}}, GPU)
    assert p.plan["nodes"] == 2
    assert gray.placement(p) == {"bundles": [{"GPU": 8.0}, {"GPU": 8.0}], "strategy": "STRICT_SPREAD"}
    assert gray.options_for(p)["num_gpus"] == 8.0 and gray.env_vars(p)["GPUCAST_SHARE"] == "8"
