"""gpucast probe-host: this CPU's dispatch speed and loader primitives as an environment file
that round-trips through --env. Timing here compares two measurements or checks structure, never
an absolute time (the machine may be loaded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucast.estimate.environment import Environment
from gpucast.learn.artifacts import load_environment
from gpucast.probe import host

BIN = Path(sys.executable).parent / "gpucast"
CMD = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "gpucast.cli"]


@pytest.fixture(scope="module")
def probe():
    return host.measure()


def test_the_probe_measures_every_primitive(probe):
    assert set(probe.dispatch_s) == {p.name for p in host.DISPATCH_PRIMITIVES}
    assert all(v > 0 for v in probe.dispatch_s.values())
    # The speed is what its own measurements give (no bound on this machine's speed).
    assert probe.speed == pytest.approx(host.speed_from(probe.dispatch_s, probe.torch_version.split("+")[0]))
    # Every loader constant it writes is an Environment constant, in its units.
    names = {d["name"] for d in Environment.describe()}
    assert set(probe.loader) <= names
    assert {"memory_sample_s", "collate_batch_s", "collate_bytes_per_s"} <= set(probe.loader)


def test_the_speed_is_the_geometric_mean_of_reference_over_measured():
    half = {p.name: 2 * p.reference_s for p in host.DISPATCH_PRIMITIVES}
    assert host.speed_from(half, "2.4") == pytest.approx(0.5)
    # A 1.x release measured here is slower than its CPU: the speed is the CPU's.
    env = Environment.default()
    assert host.speed_from(half, "1.11") == pytest.approx(0.5 * env.torch1_host_factor)


def test_loader_constants_cost_what_was_measured_on_this_host(probe):
    """With host_time_factor = 1/speed a constant written as measured x speed costs what was measured."""
    c = probe.constants()
    for name, here in probe.loader_measured_s.items():
        if name == "collate_bytes_per_s":  # a rate: the host factor divides it
            assert c[name] / c["host_time_factor"] == pytest.approx(here)
        else:
            assert c[name] * c["host_time_factor"] == pytest.approx(here)


def test_the_file_round_trips_through_env(tmp_path, probe):
    out = tmp_path / "host.yaml"
    doc = host.write(probe, out, label="node-a")
    env, messages = load_environment(out)
    assert not messages
    assert env.host_time_factor == pytest.approx(1 / probe.speed, rel=1e-5)
    for name, v in probe.loader.items():
        assert getattr(env, name) == pytest.approx(v, rel=1e-5)
    assert env.label.startswith("node-a@")
    assert yaml.safe_load(out.read_text())["provenance"]["probe"]["not_seen"] == doc["provenance"]["probe"]["not_seen"]


def test_a_slower_host_predicts_a_slower_host_bound_step(tmp_path, probe):
    import gpucast
    from gpucast.job import Job

    out = tmp_path / "host.yaml"
    host.write(probe, out)
    doc = yaml.safe_load(out.read_text())
    doc["constants"]["host_time_factor"] = 2 * doc["constants"]["host_time_factor"]
    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump(doc))
    job = Job("resnet18-cifar", batch_size=8)
    a = gpucast.predict(job, "h100", env=load_environment(out)[0])
    b = gpucast.predict(job, "h100", env=load_environment(slow)[0])
    assert b.host_time_s == pytest.approx(2 * a.host_time_s, rel=0.02)


def test_the_cli_writes_the_file_and_predict_reads_it(tmp_path):
    out = tmp_path / "host.yaml"
    r = subprocess.run([*CMD, "probe-host", "--quick", "--out", str(out), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["constants"]["host_time_factor"] > 0 and out.is_file()
    r = subprocess.run([*CMD, "predict", "resnet18-cifar", "-b", "8", "--gpu", "t4",
                        "--env", str(out), "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out_doc = json.loads(r.stdout)
    pred = out_doc[0] if isinstance(out_doc, list) else out_doc
    assert "host-" in pred["model_version"]


def test_an_unwritable_out_is_one_error_line(tmp_path):
    r = subprocess.run([*CMD, "probe-host", "--out", str(tmp_path / "no" / "x.yaml")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--out" in r.stderr
