"""`gpucast pack`: several one-GPU jobs on one GPU in every sharing mode (gpucast.advisor.pack), with
real zoo workloads predicted by gpucast.api, checked against the co-location models the simulator
uses and against a brute-force search of MIG layouts."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from typer.testing import CliRunner

from gpucast import mig
from gpucast.advisor.pack import MAX_JOBS, PackError, pack
from gpucast.advisor.sharing import timeline
from gpucast.api import predict
from gpucast.cli import app
from gpucast.cli.pack import parse_job
from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import mps
from gpucast.hardware import get_gpu
from gpucast.job import Job as gpucast_job

GPU = "a100-80gb"
JOBS = ["mlp-small", "resnet50:64", "mobilenet-v2:32"]


@pytest.fixture(scope="module")
def packed():
    return pack([parse_job(j) for j in JOBS], GPU)


def test_every_mode_is_the_simulators_model_of_it(packed):
    """The shared arrangements are timeshare's and mps's slowdowns of the jobs' own predictions, as
    the simulator and the advisor solve them; the HAMi throttle only adds to time-slicing."""
    tls = [timeline(predict(parse_job(j), GPU)) for j in JOBS]
    by = {a.mode: a for a in packed.arrangements}
    assert list(by) == ["timeslice", "timeslice+hami", "mps", "mps:3", "mig"]
    c = timeshare.CURRENT.on(GPU)       # a data-center GPU: exclusive slices (the data-center world's model)
    assert c.exclusive == "yes" and c == timeshare.WORLDS["data-center"].on(GPU)
    assert by["timeslice"].slowdowns == pytest.approx(timeshare.slowdowns(tls, c, "timeslice"))
    assert sum(t.util / s for t, s in zip(tls, by["timeslice"].slowdowns)) <= 1.0 + 1e-9
    assert by["mps"].slowdowns == pytest.approx(timeshare.slowdowns(tls, c, "mps"))
    assert by["mps:3"].slowdowns == pytest.approx(mps.slowdowns(tls, [1 / 3] * 3, c))
    assert all(h >= t - 1e-12 for h, t in zip(by["timeslice+hami"].slowdowns, by["timeslice"].slowdowns))
    for a in packed.arrangements:
        assert a.progress == pytest.approx(sum(1 / s for s in a.slowdowns)) and a.worst == max(a.slowdowns)
        assert all(s >= 1.0 for s in a.slowdowns)


def test_the_mig_layout_is_the_best_of_all_layouts_and_assignments(packed):
    """Each job's MIG slowdown is its step on its slice over its step on the whole GPU (predicted
    afresh); the layout is one the GPU holds; no other layout of three slices and assignment keeps
    more progress (brute force over every one)."""
    a = next(x for x in packed.arrangements if x.mode == "mig")
    jobs = [parse_job(j) for j in JOBS]
    whole = [predict(j, GPU).step_time_s for j in jobs]
    for j, w, sl, s in zip(jobs, whole, a.slices, a.slowdowns):
        assert s == pytest.approx(max(1.0, predict(j, f"{GPU}:{sl}").step_time_s / w))
    mig.layout(GPU, ",".join(a.slices))
    profs = [p for p in mig.profiles(GPU) if p.compute_slices < p.of_compute]
    step = {(i, p.name): predict(j, p.full_name).step_time_s for i, j in enumerate(jobs) for p in profs}
    best = 0.0
    for combo in itertools.product(profs, repeat=len(jobs)):
        try:
            mig.layout(GPU, ",".join(p.name for p in combo))
        except mig.LayoutError:
            continue
        best = max(best, math.fsum(min(1.0, whole[i] / step[i, p.name]) for i, p in enumerate(combo)))
    assert a.progress == pytest.approx(best)


def test_the_best_arrangement_keeps_the_most_progress(packed):
    b = packed.arrangements[packed.best]
    assert b.memory_fits and b.progress == max(a.progress for a in packed.arrangements if a.memory_fits)
    assert packed.why[0].startswith(f"best: {b.detail}: together the jobs keep {b.progress:.2f} of 3")
    assert any(line.startswith(f"time slices on {GPU} are exclusive") for line in packed.why)   # a data-center GPU


def test_what_does_not_fit_is_not_chosen():
    """On an A100-40GB two resnet50 at batch 256 (about 23 GiB each) fit neither together (46 GiB)
    nor on any slice (the largest holds 20 GiB): nothing is chosen; beside mlp-small it fits
    shared, not on a slice."""
    two = pack([parse_job("resnet50:256"), parse_job("resnet50:256")], "a100-40gb")
    assert two.best is None and not any(a.memory_fits for a in two.arrangements)
    assert two.why[0] == "nothing fits: the jobs' memory exceeds a100-40gb's in every arrangement"
    mixed = pack([parse_job("resnet50:256"), parse_job("mlp-small")], "a100-40gb")
    by = {a.mode: a for a in mixed.arrangements}
    assert by["timeslice"].memory_fits and not by["mig"].memory_fits
    assert mixed.arrangements[mixed.best].mode != "mig"
    assert any(line.startswith("MIG ") and "does not fit" in line for line in mixed.why)


def test_a_gpu_without_mig_has_no_layout():
    res = pack(["mlp-small", "resnet18"], "v100-16gb")
    assert [a.mode for a in res.arrangements] == ["timeslice", "timeslice+hami", "mps", "mps:2"]
    assert "v100-16gb has no MIG profiles" in res.why


@pytest.mark.parametrize("jobs, gpu, message", [
    (["mlp-small"], GPU, "pack takes 2 to 7 jobs, got 1 (one job: `gpucast advise`)"),
    (["mlp-small"] * (MAX_JOBS + 1), GPU, "pack takes 2 to 7 jobs, got 8"),
    (["mlp-small", "resnet18"], f"{GPU}:3g.40gb", "a100-80gb:3g.40gb is a MIG slice: pack takes a whole GPU"),
])
def test_refusals(jobs, gpu, message):
    with pytest.raises(PackError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        pack(jobs, gpu)


def test_a_multi_gpu_job_is_refused():
    with pytest.raises(PackError, match="^resnet50 b32 fp32 runs on 2 GPUs: pack places one-GPU jobs$"):
        pack([parse_job("mlp-small"), parse_job("resnet50").with_(gpus=2)], GPU)


def test_the_cli_prints_the_table_json_and_one_line_errors():
    r = CliRunner().invoke(app, ["pack", "mlp-small", "resnet18:64", "--gpu", "h100", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [j["job"] for j in out["jobs"]] == ["mlp-small b32 fp32", "resnet18 b64 fp32"]
    assert out["best"] in {a["mode"] for a in out["arrangements"]} and out["gpu"] == "h100"
    assert get_gpu("h100").memory_bytes == out["gpu_memory_bytes"] and out["model_version"].startswith("analytic-")
    t = CliRunner().invoke(app, ["pack", "mlp-small", "resnet18:64:amp-bf16"])
    assert t.exit_code == 0, t.output
    assert "resnet18 b64 amp-bf16" in t.output and "best: " in t.output and "* " in t.output
    assert "Kubernetes, " in t.output and "nvidia.com/" in t.output
    for args, line in [(["pack", "resnet50:x", "mlp-small"],
                        "error: job 'resnet50:x': the batch size 'x' is not a whole number"),
                       (["pack", "mlp-small", "resnet18", "--gpu", "a100-80"], None),
                       (["pack", "mlp-small"], "error: pack takes 2 to 7 jobs, got 1 (one job: `gpucast advise`)")]:
        bad = CliRunner().invoke(app, args)
        lines = bad.output.strip().splitlines()
        assert bad.exit_code == 2 and len(lines) == 1, bad.output
        assert line is None and lines[0].startswith("error: unknown GPU 'a100-80'") or lines[0] == line


def test_a_job_argument_is_a_zoo_spec_or_a_job_file(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("model: mlp-small\nbatch_size: 16\nprecision: amp-bf16\n")
    assert parse_job(str(f)) == gpucast_job("mlp-small", batch_size=16, precision="amp-bf16")
    assert parse_job("bert-base:16:amp-bf16") == gpucast_job("bert-base", batch_size=16, precision="amp-bf16")
    assert parse_job("resnet50") == gpucast_job("resnet50")
    for bad, words in [("resnet50:1:fp32:x", "give MODEL[:BATCH[:PRECISION]]"), (":8", "give MODEL"),
                       (str(tmp_path / "missing.yaml"), "cannot read job file")]:
        with pytest.raises(Exception, match=words.replace("[", r"\[").replace("]", r"\]")):
            parse_job(bad)


def test_each_arrangement_carries_its_kubernetes_requests(packed):
    """Every job gets one device-plugin GPU in the shared modes (HAMi: cores 100/N and its peak in
    MiB), its slice's resource under MIG, and the GPU's configuration is named."""
    from gpucast.integrations import k8s_pack

    by = {a.mode: a for a in packed.arrangements}
    n = len(JOBS)
    for mode in ("timeslice", "mps", "mps:3"):
        assert by[mode].requests == ({"nvidia.com/gpu": "1"},) * n
    assert "3 replicas" in by["timeslice"].node and "sharing.mps" in by["mps:3"].node
    assert [r["nvidia.com/gpucores"] for r in by["timeslice+hami"].requests] == ["33"] * n
    assert [int(r["nvidia.com/gpumem"]) for r in by["timeslice+hami"].requests] == [
        math.ceil(m / 2**20) for m in packed.memory_bytes]
    assert by["mig"].requests == tuple({f"nvidia.com/mig-{s}": "1"} for s in by["mig"].slices)
    with pytest.raises(ValueError, match="^unknown arrangement 'mig2'$"):
        k8s_pack.requests("mig2", GPU, [1, 2])
    with pytest.raises(ValueError, match="needs each job's slice"):
        k8s_pack.requests("mig", GPU, [1, 2])
