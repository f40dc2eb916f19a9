"""Sweeps (:mod:`gpucast.cluster.sweep`): the grid, its one-line refusals, and the same table from
a sequential sweep, two local worker processes and a real Ray cluster (a head node started by the
test, given to ``gpucast simulate --ray-address``), each row equal to a plain
:func:`gpucast.cluster.simulate` run of its parameters; the workers predict nothing."""

from __future__ import annotations

import dataclasses

import pytest

import gpucast.cluster as cl
from gpucast.cluster import metrics, sweep

pytestmark = pytest.mark.slow  # end-to-end: `make test-slow` (docs/contributing.md)

BASE = sweep.Base(trace="gavel", gpus=8, limit=60, policies=("slot", "gpucast"))
AXES = {"load": [1.0, 2.0], "seed": [0, 1]}


def test_parse_axes_aliases_order_and_values():
    axes = sweep.parse_axes(["seed=3,1,3", "mix=philly-mix,gavel", "error_scale=0,0.5", "load=2"])
    assert axes == {"seed": [3, 1], "trace": ["philly-mix", "gavel"], "error-scale": [0.0, 0.5], "load": [2.0]}
    assert list(axes) == ["seed", "trace", "error-scale", "load"]   # the order given


@pytest.mark.parametrize("spec, message", [
    ("lod=1,2", "--sweep: unknown axis 'lod'; did you mean 'load'?"),
    ("sed=1", "--sweep: unknown axis 'sed'; did you mean 'seed'?"),
    ("colour=red", "--sweep: unknown axis 'colour' (axes: "),
    ("load", "--sweep 'load': expected AXIS=V1,V2,..."),
    ("load=", "--sweep load: no values"),
    ("load=0", "--sweep load: '0' must be a number > 0"),
    ("load=inf", "--sweep load: 'inf' must be a number > 0"),
    ("seed=1.5", "--sweep seed: '1.5' is not an integer"),
    ("gpus=0", "--sweep gpus: '0' must be at least 1"),
    ("error-scale=-1", "--sweep error-scale: '-1' must be a number >= 0"),
    ("policy=gpucats", "--sweep policy: unknown policy 'gpucats'; did you mean 'gpucast'?"),
])
def test_bad_axes_are_one_line(spec, message):
    with pytest.raises(sweep.SweepError) as e:
        sweep.parse_axes([spec], list(cl.POLICIES))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_an_axis_given_twice_is_refused():
    with pytest.raises(sweep.SweepError, match="--sweep seed is given twice"):
        sweep.parse_axes(["seed=1", "seeds=2"])


def test_points_first_axis_slowest_policies_fastest():
    pts = sweep.points(BASE, AXES)
    assert [(p.load, p.seed, p.policy) for p in pts] == [
        (1.0, 0, "slot"), (1.0, 0, "gpucast"), (1.0, 1, "slot"), (1.0, 1, "gpucast"),
        (2.0, 0, "slot"), (2.0, 0, "gpucast"), (2.0, 1, "slot"), (2.0, 1, "gpucast")]
    assert [p.index for p in pts] == list(range(8))
    assert all(p.trace == "gavel" and p.gpus == 8 and p.error_scale is None for p in pts)
    assert [p.policy for p in sweep.points(BASE, {"policy": ["oracle"]})] == ["oracle"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return sweep.prepare(BASE, sweep.points(BASE, AXES))


@pytest.fixture(scope="module")
def sequential(shared):
    return sweep.run(BASE, AXES, workers=1, shared=shared)


def test_each_row_is_the_plain_simulation_of_its_parameters(sequential):
    assert sequential.executor == "sequential"
    rows = sequential.rows
    assert len(rows) == 8
    for i in (1, 6):   # (load 1, seed 0, gpucast), (load 2, seed 1, slot)
        r = rows[i]
        tr = cl.load_trace("gavel", gpus=8, limit=60, load=r["load"])
        s = metrics.summarize(cl.simulate(tr, 8, r["policy"], seed=r["seed"]))
        assert {k: r[k] for k in s if k != "policy"} == {k: v for k, v in s.items() if k != "policy"}
    # the seed matters (the test can fail), and slot's change from itself is zero
    assert rows[1]["gpu_util_pct"] != rows[3]["gpu_util_pct"]
    assert rows[0]["change_vs_slot_pct"]["gpu_util_pct"] == 0.0
    assert rows[1]["change_vs_slot_pct"]["gpu_util_pct"] == pytest.approx(
        metrics.change_pct(rows[1]["gpu_util_pct"], rows[0]["gpu_util_pct"]))


def test_two_local_workers_give_the_same_table_and_predict_nothing(shared, sequential, tmp_path, monkeypatch):
    from gpucast.cluster.truth import prediction_cache_dir

    # The workers are spawned with this cache directory: a prediction made there would be written into it.
    monkeypatch.setenv("GPUCAST_CACHE_DIR", str(tmp_path))
    cache = prediction_cache_dir()
    assert cache is not None and tmp_path in cache.parents

    def cached() -> int:
        return sum(1 for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0

    par = sweep.run(BASE, AXES, workers=2, shared=shared)
    assert par.executor == "processes" and par.workers == 2
    assert par.rows == sequential.rows
    assert cached() == 0
    # The control: without the parent's table a worker does predict (so the check above can fail).
    small = dataclasses.replace(BASE, limit=3)
    pts = sweep.points(small, {"load": [1.0]})
    bare = dataclasses.replace(sweep.prepare(small, pts), table=sweep.PredictionTable({}))
    sweep.run(small, {"load": [1.0]}, workers=2, shared=bare)
    assert cached() > 0


@pytest.fixture()
def ray_head(monkeypatch):
    """A real Ray head node, started here with ``ray start --head --block`` in its own process
    group (2 CPUs, on a free port, token authentication off for this test), stopped with it."""
    pytest.importorskip("ray")
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    import ray

    if ray.is_initialized():
        pytest.skip("another test holds a Ray connection in this process")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    proc = subprocess.Popen([ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"ray start --head did not listen on port {port}")
                time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_ray_cluster_given_by_address_gives_the_same_table(ray_head, sequential, tmp_path):
    import json

    import ray
    from typer.testing import CliRunner

    from gpucast.cli import app

    r = CliRunner().invoke(app, ["simulate", "--trace", "gavel", "--gpus", "8", "--limit", "60", "--policies",
                                 "slot,gpucast", "--sweep", "load=1,2", "--sweep", "seed=0,1", "--ray-address",
                                 ray_head, "--json", str(tmp_path / "ray.json")])
    assert r.exit_code == 0, r.stderr + r.stdout
    got = json.loads((tmp_path / "ray.json").read_text())
    assert got["executor"] == "ray" and got["workers"] == 2    # the head's 2 CPUs
    assert got["rows"] == json.loads(json.dumps(sequential.rows))
    assert "8 runs on Ray (2 CPUs)" in r.stdout
    assert not ray.is_initialized()     # the command's own connection is closed


def test_table_and_markdown_show_the_varying_parameters(sequential):
    headers, cells = sweep.table_rows(sequential)
    assert headers[:3] == ["load", "seed", "policy"] and "util % busy" in headers
    assert [c[:3] for c in cells[:2]] == [["1", "0", "slot"], ["1", "0", "gpucast"]]
    md = sweep.markdown(sequential, "t").splitlines()
    assert md[0] == "# t" and md[2].startswith("| load | seed | policy | util % busy |") and len(md) == 4 + 8
