"""`gpucast simulate`: a short real run (the bundled Gavel trace, cut with --limit) and the
one-line refusals of bad input, which must write nothing."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from gpucast.cli import app
from gpucast.cli.sim import parse_policies

REQUIRED = ("policy", "gpu_util_busy_pct", "gpu_util_pct", "makespan_s", "jct_mean_s", "jct_p99_s", "queue_delay_mean_s", "oom_failures")


def invoke(*args):
    return CliRunner().invoke(app, ["simulate", *[str(a) for a in args]])


def assert_one_error(result, start: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(start), result.stderr
    assert result.stdout == ""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    r = invoke("--trace", "gavel", "--gpus", 16, "--limit", 40, "--policies", "slot,slot-fifo,gpucast,oracle",
               "--json", out / "r.json", "--report", out / "r.html")
    return r, out


def test_simulate_prints_the_table_and_writes_json_and_report(run):
    r, out = run
    assert r.exit_code == 0, r.stderr + r.stdout
    for policy in ("slot", "slot-fifo", "gpucast", "oracle"):
        assert re.search(rf"^. {policy} ", r.stdout, re.M), r.stdout
    assert "util % busy" in r.stdout       # the first utilization column
    assert "gpucast: util busy " in r.stdout and "vs slot" in r.stdout
    rows = json.loads((out / "r.json").read_text())
    assert [row["policy"] for row in rows] == ["slot", "slot-fifo", "gpucast", "oracle"]
    for row in rows:
        for key in REQUIRED:
            assert key in row
        assert row["jobs"] == 40
        # the busy period is a part of the run holding all its GPU time: never a lower mean
        assert 0.0 <= row["gpu_util_pct"] <= row["gpu_util_busy_pct"] * (1 + 1e-12)
        assert row["gpu_util_busy_pct"] <= 100.0
        from gpucast.cluster import errors

        assert row["params"]["error_sigma"] == errors.measured().as_dict()   # the default: measured
    assert rows[0]["change_vs_slot_pct"]["gpu_util_pct"] == 0.0
    page = (out / "r.html").read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", page, re.I)
    assert "Assumptions" in page and "Co-location world: measured-pairs" in page and "RTX 3090" in page
    assert all(row["params"]["colocation"] == "measured-pairs" for row in rows)
    assert sorted(p.name for p in out.iterdir()) == ["r.html", "r.json"]  # no temporary files left


def test_same_seed_same_numbers(run, tmp_path):
    _, out = run
    r = invoke("--trace", "gavel", "--gpus", 16, "--limit", 40, "--policies", "slot,slot-fifo,gpucast,oracle",
               "--json", tmp_path / "again.json")
    assert r.exit_code == 0, r.stderr
    drop = ("wall_s",)
    def load(path):
        return [{k: v for k, v in row.items() if k not in drop} for row in json.loads(path.read_text())]

    first, again = load(out / "r.json"), load(tmp_path / "again.json")
    assert first == again


def test_an_environment_file_changes_what_the_policies_see(run, tmp_path):
    _, out = run
    env = tmp_path / "env.yaml"
    env.write_text("gpucast_environment: 1\ngpucast_version: 0.1.0\nlabel: slow-hosts\n"
                   "constants: {host_time_factor: 4.0}\n")
    r = invoke("--trace", "gavel", "--gpus", 16, "--limit", 40, "--policies", "slot,gpucast,oracle",
               "--json", tmp_path / "env.json", "--env", env)
    assert r.exit_code == 0, r.stderr
    plain = {row["policy"]: row for row in json.loads((out / "r.json").read_text())}
    slow = {row["policy"]: row for row in json.loads((tmp_path / "env.json").read_text())}
    # Gavel's steps are measured; slower hosts lower the utilization the predictions (and truth) say
    assert slow["gpucast"]["gpu_util_pct"] != plain["gpucast"]["gpu_util_pct"]
    assert slow["slot"]["makespan_s"] == plain["slot"]["makespan_s"]
    from gpucast.cluster.truth import _ENVIRONMENT

    assert _ENVIRONMENT is None  # the run's environment does not outlive it
    r = invoke("--limit", 5, "--env", tmp_path / "absent.yaml")
    assert_one_error(r, "error: cannot read environment file")


@pytest.mark.parametrize("args, start", [
    (["--policies", "slot,fifo"], "error: unknown policy 'fifo'"),
    (["--policies", ","], "error: --policies is empty"),
    (["--trace", "no-such-trace"], "error: "),
    (["--gpu-type", "no-such-gpu"], "error: "),
    (["--gpus", "0"], "error: --gpus must be at least 1"),
    (["--gpus", "-8"], "error: --gpus must be at least 1"),
    (["--gpus-per-node", "0"], "error: --gpus-per-node must be at least 1"),
    (["--limit", "0"], "error: --limit must be at least 1"),
    (["--error-sigma", "-0.1"], "error: --error-sigma must be >= 0"),
    (["--error-sigma", "util=x"], "error: --error-sigma 'util=x': util='x' is not a number"),
    (["--error-sigma", "speed=0.1"], "error: --error-sigma 'speed=0.1': expected"),
    (["--load", "0"], "error: --load must be > 0"),
    (["--trace", "no-such-mix.yaml"], "error: no-such-mix.yaml: no such mix file"),
    (["--colocation", "moon"], "error: unknown --colocation 'moon'; choose from measured-pairs, data-center, gavel"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, start):
    small = [] if "--limit" in args else ["--limit", 5]  # were the input good, a short run
    r = invoke(*args, *small, "--json", tmp_path / "o.json", "--report", tmp_path / "o.html")
    assert_one_error(r, start)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_outputs_are_refused_before_running(tmp_path):
    r = invoke("--limit", 5, "--json", tmp_path / "missing-dir" / "o.json", "--report", tmp_path / "o.html")
    assert_one_error(r, "error: --json")
    assert list(tmp_path.iterdir()) == []
    r = invoke("--limit", 5, "--report", tmp_path)  # a directory
    assert_one_error(r, "error: --report")
    r = invoke("--limit", 5, "--report", tmp_path / "same", "--json", tmp_path / "same")
    assert_one_error(r, "error: --report and --json name the same file")
    assert list(tmp_path.iterdir()) == []


def test_parse_policies():
    known = ["slot", "gpucast", "oracle"]
    assert parse_policies(" slot, GPUCAST ,slot,", known) == ["slot", "gpucast"]
    with pytest.raises(ValueError, match="unknown policy 'x'"):
        parse_policies("slot,x", known)
    with pytest.raises(ValueError, match="empty"):
        parse_policies(" , ", known)


def test_the_gavel_world_is_a_sensitivity_run(tmp_path):
    r = invoke("--trace", "gavel", "--gpus", 16, "--limit", 40, "--policies", "slot,gpucast",
               "--colocation", "gavel", "--json", tmp_path / "g.json")
    assert r.exit_code == 0, r.stderr + r.stdout
    assert "co-location world gavel" in r.stdout
    rows = json.loads((tmp_path / "g.json").read_text())
    assert [row["params"]["colocation"] for row in rows] == ["gavel", "gavel"]


# ----------------------------------------------------------------------------- --sweep


def test_sweep_on_two_workers_writes_the_sequential_table(tmp_path):
    args = ("--trace", "gavel", "--gpus", 8, "--limit", 40, "--policies", "slot,gpucast",
            "--sweep", "seed=0,1", "--sweep", "load=1,2")
    seq = invoke(*args, "--workers", 1, "--json", tmp_path / "seq.json")
    par = invoke(*args, "--workers", 2, "--json", tmp_path / "par.json", "--markdown", tmp_path / "par.md")
    assert seq.exit_code == 0 and par.exit_code == 0, seq.stderr + par.stderr
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("seq.json", "par.json"))
    assert (a["executor"], b["executor"], b["workers"]) == ("sequential", "processes", 2)
    assert a["rows"] == b["rows"]
    assert [(r["seed"], r["load"], r["policy"]) for r in b["rows"]] == [
        (0, 1.0, "slot"), (0, 1.0, "gpucast"), (0, 2.0, "slot"), (0, 2.0, "gpucast"),
        (1, 1.0, "slot"), (1, 1.0, "gpucast"), (1, 2.0, "slot"), (1, 2.0, "gpucast")]
    assert all(r["jobs"] == 40 for r in b["rows"])
    assert "8 runs on 2 local processes" in par.stdout and "gpucast simulate --sweep: 8 runs (seed 0/1, load 1/2)" in par.stdout
    md = (tmp_path / "par.md").read_text().splitlines()
    assert md[2].startswith("| seed | load | policy | util % busy |") and len(md) == 4 + 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["par.json", "par.md", "seq.json"]  # no temporary files


@pytest.mark.parametrize("args, start", [
    (["--sweep", "lod=1,2"], "error: --sweep: unknown axis 'lod'; did you mean 'load'?"),
    (["--sweep", "seed=1,x"], "error: --sweep seed: 'x' is not an integer"),
    (["--sweep", "load=-1"], "error: --sweep load: '-1' must be a number > 0"),
    (["--sweep", "policy=slot,gpucats"], "error: --sweep policy: unknown policy 'gpucats'; did you mean 'gpucast'?"),
    (["--sweep", "trace=gavel,no-such-trace"], "error: no trace named 'no-such-trace'"),
    (["--sweep", "seed=1", "--sweep", "seed=2"], "error: --sweep seed is given twice"),
    (["--sweep", "seed=1", "--workers", "0"], "error: --workers must be at least 1"),
    (["--sweep", "seed=1", "--workers", "2", "--ray-address", "auto"], "error: give --workers or --ray-address"),
    (["--sweep", "seed=1", "--report", "REPORT"], "error: --report is one run's HTML report"),
    (["--workers", "2"], "error: --workers, --ray-address and --markdown go with --sweep"),
    (["--sweep", "seed=1", "--ray-address", "nowhere"], "error: --ray-address 'nowhere': expected 'auto', 'local'"),
    (["--sweep", "seed=1", "--ray-address", "127.0.0.1:FREEPORT"], "error: --ray-address '127.0.0.1:"),
])
def test_bad_sweep_input_is_one_line_and_writes_nothing(tmp_path, args, start):
    import socket

    with socket.socket() as s:   # a port nothing listens on: a Ray cluster that is not there
        s.bind(("127.0.0.1", 0))
        free = str(s.getsockname()[1])
    args = [str(tmp_path / "r.html") if a == "REPORT" else a.replace("FREEPORT", free) for a in args]
    r = invoke(*args, "--limit", 5, "--gpus", 8, "--json", tmp_path / "o.json", "--markdown", tmp_path / "o.md")
    assert_one_error(r, start)
    assert list(tmp_path.iterdir()) == []
