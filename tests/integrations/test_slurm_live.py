"""The shipped job_submit.lua plugin inside a real slurmctld (Debian's Slurm), end to end.

A one-node cluster (tests/integrations/slurm_cluster.py: munged, slurmctld and slurmd started by
the test, one GPU of ``gpu:1,shard:8`` whose device file is /dev/null since this machine has
none) runs the plugin as Slurm does, and the plugin runs the real ``gpucast slurm``. What is
asserted is what Slurm did: the job's ``TresPerNode`` after submission, the GRES slurmd gave the
running job (``SLURM_SHARDS_ON_NODE``, ``CUDA_VISIBLE_DEVICES``), which jobs ran together on the
one GPU and which waited for shards, and sbatch's refusal of a job gpucast cannot size. The
expected share comes from :func:`gpucast.integrations.slurm.gres_request` in this process (its
arithmetic is checked by hand in test_slurm.py).

Skipped where Slurm is not installed or the tests do not run as root (the reason is printed);
.ci/run installs Slurm and sets ``GPUCAST_REQUIRE_SLURM=1``, which turns that skip into a failure.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpucast.api import predict
from gpucast.integrations.slurm import gres_request, lua_plugin_path
from gpucast.job import Job

import slurm_cluster
from serve_process import metric, running_service
from slurm_cluster import SHARDS_PER_GPU, SlurmCluster

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

GPU = "a100-80gb"
SMALL = {"model": "mlp-small", "batch_size": 32,  # benchmark-style: inputs on the GPU (its MNIST
         "data": {"source": "device"},              # loader would make it loader-bound and tiny)
         "loop": {"item_calls": 1, "progress_bar": False, "log_every": 0, "cudnn_benchmark": True}}
LARGE = {"model": "resnet50", "batch_size": 64}
BIN = Path(sys.executable).with_name("gpucast")

JOB_SCRIPT = """#!/bin/sh
# Report the GRES slurmd gave this job. With $BARRIER set: wait until $N jobs have started and
# the test has written $BARRIER/release (at most 120 s), so that the test sees who ran together.
if [ -n "$BARRIER" ]; then
  touch "$BARRIER/started.$SLURM_JOB_ID"
  i=0
  while [ "$(ls "$BARRIER" | grep -c '^started[.]')" -lt "$N" ] || [ ! -e "$BARRIER/release" ]; do
    i=$((i + 1)); [ "$i" -gt 1200 ] && exit 3
    sleep 0.1
  done
fi
for v in CUDA_VISIBLE_DEVICES SLURM_SHARDS_ON_NODE SLURM_GPUS_ON_NODE SLURM_JOB_GPUS CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; do
  eval "echo $v=\\${$v:-}"
done
"""


def expected(spec: dict):
    return gres_request(predict(Job.from_dict(spec), GPU), shards_per_gpu=SHARDS_PER_GPU)


def tres(value: str) -> str:
    """A TRES entry in one spelling: Slurm 22.05 prints ``gres:shard:3``, 23.02+ ``gres/shard:3``."""
    return value.replace("gres/", "gres:")


def plugin_text(**config) -> str:
    """The shipped plugin behind a ``gpucast_config`` preset (the plugin's documented hook)."""
    items = {"command": str(BIN), "default_gpu": GPU, "shards_per_gpu": SHARDS_PER_GPU, **config}
    lua = ", ".join(f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}" for k, v in items.items())
    return f"gpucast_config = {{ {lua} }}\n" + lua_plugin_path().read_text()


def start_cluster(root: Path, sharing: str = "shard", **config) -> SlurmCluster:
    why = slurm_cluster.missing()
    if why:
        if os.environ.get("GPUCAST_REQUIRE_SLURM") == "1":
            pytest.fail(f"GPUCAST_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)
    c = SlurmCluster(root, plugin_text(**config), env={"GPUCAST_CACHE_DIR": str(root / "cache")}, sharing=sharing)
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    script = root / "jobs" / "job.sh"
    script.write_text(JOB_SCRIPT)
    script.chmod(0o755)
    (root / "jobs" / "small.json").write_text(json.dumps(SMALL))
    (root / "jobs" / "large.yaml").write_text(f"model: {LARGE['model']}\nbatch_size: {LARGE['batch_size']}\n")
    return c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("slurm"))
    yield c
    c.stop()


def sbatch(cluster: SlurmCluster, *args, env=None) -> int:
    jobs = cluster.root / "jobs"
    p = cluster.run("sbatch", "--parsable", "-o", str(jobs / "out.%j"), *args, jobs / "job.sh",
                    env=env, cwd=jobs)
    assert p.returncode == 0, f"sbatch failed: {p.stderr.strip()}\n{cluster.log_tail()}"
    return int(p.stdout.strip().split(";")[0])


def output(cluster: SlurmCluster, job_id: int) -> dict[str, str]:
    j = cluster.wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"})
    assert j["JobState"] == "COMPLETED", (j, cluster.log_tail("slurmd"))
    text = (cluster.root / "jobs" / f"out.{job_id}").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_comment_opt_in_gets_gpucast_share_and_runs_on_it(cluster):
    want = expected(SMALL)
    assert want.kind == "shard" and not want.share.exclusive
    job_id = sbatch(cluster, f"--comment=gpucast:{json.dumps(SMALL)}")
    assert tres(cluster.job(job_id)["TresPerNode"]) == tres(want.tres_per_node)
    env = output(cluster, job_id)
    assert env["SLURM_SHARDS_ON_NODE"] == str(want.count)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert any(f"job from comment on {GPU}" in line for line in cluster.plugin_log())


def test_environment_opt_in_replaces_the_users_gpu_request(cluster):
    """GPUCAST_JOB names a relative YAML spec (taken from the job's working directory); the job
    asked for 2 GPUs with --gpus, which this node could never give: the plugin drops that and
    sets gpucast's whole-GPU request for resnet50 b64, so Slurm accepts and runs it."""
    want = expected(LARGE)
    assert want.share.exclusive and want.gres == "gpu:1"
    job_id = sbatch(cluster, "--gpus=2", env={"GPUCAST_JOB": "large.yaml", "GPUCAST_GPU": GPU})
    j = cluster.job(job_id)
    assert tres(j["TresPerNode"]) == "gres:gpu:1"
    assert "gpu" not in j.get("TresPerJob", "")
    env = output(cluster, job_id)
    assert env["SLURM_GPUS_ON_NODE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["SLURM_SHARDS_ON_NODE"] == ""


def test_small_jobs_share_the_gpu_until_its_shards_run_out(cluster):
    """As many gpucast-sized small jobs as the GPU's shards hold run at the same time on the one
    GPU; one more waits for shards (Reason=Resources) and runs when they end."""
    count = expected(SMALL).count
    fit = SHARDS_PER_GPU // count
    assert 2 <= fit <= 3, f"mlp-small's share ({count} shards) no longer makes a useful packing case"
    barrier = cluster.root / "barrier"
    barrier.mkdir()
    env = {"BARRIER": str(barrier), "N": str(fit)}
    ids = [sbatch(cluster, f"--comment=gpucast:{json.dumps(SMALL)}", env=env) for _ in range(fit + 1)]
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("started.*"))) < fit and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # a scheduling pass or two: the last job must still be waiting
    states = {i: cluster.job(i) for i in ids}
    running = [i for i in ids if states[i]["JobState"] == "RUNNING"]
    assert running == ids[:fit], {i: (s["JobState"], s["Reason"]) for i, s in states.items()}
    assert states[ids[-1]]["JobState"] == "PENDING" and states[ids[-1]]["Reason"] == "Resources"
    (barrier / "release").touch()
    for i in ids:
        env_i = output(cluster, i)
        assert env_i["SLURM_SHARDS_ON_NODE"] == str(count) and env_i["CUDA_VISIBLE_DEVICES"] == "0"


def test_jobs_that_do_not_opt_in_pass_unchanged(cluster):
    before = len(cluster.plugin_log())
    job_id = sbatch(cluster, "--gres=shard:2", "--comment=nightly build")
    assert tres(cluster.job(job_id)["TresPerNode"]) == "gres:shard:2"
    assert output(cluster, job_id)["SLURM_SHARDS_ON_NODE"] == "2"
    assert not any("gpucast:" in line for line in cluster.plugin_log()[before:])


def test_a_job_gpucast_cannot_size_is_refused_with_its_reason(cluster):
    before = cluster.job_ids()
    jobs = cluster.root / "jobs"
    p = cluster.run("sbatch", '--comment=gpucast:{"model": "no-such-net", "batch_size": 8}', jobs / "job.sh",
                    cwd=jobs)
    assert p.returncode != 0
    assert "gpucast: cannot size the job (comment): field 'model': unknown zoo workload 'no-such-net'" in p.stderr
    assert cluster.job_ids() == before


def test_scontrol_update_with_a_gpucast_comment_resizes_a_pending_job(cluster):
    """slurm_job_modify sizes the job again from the new spec. (Slurm 22.05 itself refuses to
    turn a pending shard request into whole GPUs on update, plugin or not: `scontrol update
    Gres=gpu:1` fails the same way; so the new spec here is another shared one.)"""
    other = {"model": "resnet18-cifar", "batch_size": 32}
    want = expected(other)
    assert want.kind == "shard" and want.count != expected(SMALL).count
    job_id = sbatch(cluster, "--hold", f"--comment=gpucast:{json.dumps(SMALL)}")
    assert tres(cluster.job(job_id)["TresPerNode"]) == tres(expected(SMALL).tres_per_node)
    spec = cluster.root / "jobs" / "other.json"
    spec.write_text(json.dumps(other))
    p = cluster.run("scontrol", "update", f"JobId={job_id}", f"Comment=gpucast:{spec}")
    assert p.returncode == 0, p.stderr
    assert tres(cluster.job(job_id)["TresPerNode"]) == tres(want.tres_per_node)
    cluster.run("scontrol", "release", str(job_id))
    assert output(cluster, job_id)["SLURM_SHARDS_ON_NODE"] == str(want.count)


def test_with_a_service_configured_the_plugin_asks_it(cluster, tmp_path_factory):
    """config.service set and fallback off: the job is sized from a running `gpucast serve`
    (its cache counts the request) or refused; sizing the same as the local path."""
    body = {"workload": SMALL["model"], "batch_size": SMALL["batch_size"], "data": SMALL["data"],
            "loop": SMALL["loop"], "gpu": GPU}
    with running_service(tmp_path_factory.mktemp("serve"), warm=body) as url:
        cluster.set_plugin(plugin_text(service=url, fallback=False))
        try:
            hits = metric(url, "gpucast_prediction_cache_hits_total")
            started = time.monotonic()
            job_id = sbatch(cluster, f"--comment=gpucast:{json.dumps(SMALL)}")
            print(f"sbatch through the service: {time.monotonic() - started:.2f} s")
            assert metric(url, "gpucast_prediction_cache_hits_total") == hits + 1
            assert tres(cluster.job(job_id)["TresPerNode"]) == tres(expected(SMALL).tres_per_node)
            assert output(cluster, job_id)["SLURM_SHARDS_ON_NODE"] == str(expected(SMALL).count)
        finally:
            cluster.set_plugin(plugin_text())


def test_mps_site_gets_gpucast_mps_share(tmp_path):
    """A site that shares GPUs through MPS (`gpu:1,mps:100`, plugin config use_mps): the job asks
    for gpucast's MPS count and slurmd gives it that percentage of the GPU's threads."""
    want = gres_request(predict(Job.from_dict(SMALL), GPU), mps=True, mps_per_gpu=slurm_cluster.MPS_PER_GPU)
    assert want.kind == "mps"
    c = start_cluster(tmp_path, sharing="mps", use_mps=True, mps_per_gpu=slurm_cluster.MPS_PER_GPU)
    try:
        job_id = sbatch(c, f"--comment=gpucast:{json.dumps(SMALL)}")
        assert tres(c.job(job_id)["TresPerNode"]) == tres(want.tres_per_node)
        env = output(c, job_id)
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == str(want.count)  # count of 100 = percent
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
    finally:
        c.stop()
