"""Every command that writes a file reserves it before its work (:func:`gpucast.fileio.reserve_output`):
an unwritable destination is one ``error:`` line, exit 2, and the work never starts; a write failure
after the work (a full disk) is one ``error:`` line too, with no temporary file left behind.

The commands run for real (in-process, so that the work can be replaced by a function that fails
the test if it is called, and the disk made "full" by a failing fsync)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from read_only_dir import read_only_dir
from typer.testing import CliRunner

from gpucast import fileio
from gpucast.cli import app


def _rows(path: Path, n: int) -> Path:
    lines = ["model,batch_size,data.source,gpu,step_time_s,util_pct,group"]
    rng = np.random.default_rng(0)
    for i in range(n):
        lines.append(f"mlp:{32 * (i + 1)}:{64 * (i % 3 + 1)};10,{8 * (i + 1)},device,t4,"
                     f"{0.001 * (i + 1):.4f},{rng.uniform(5, 95):.1f},g{i % 3}")
    path.write_text("\n".join(lines) + "\n")
    return path


# command -> (arguments of a short good run (tmp -> list), its output flags, the work it must not start)
COMMANDS = {
    "simulate": (lambda tmp: ["simulate", "--limit", "5", "--gpus", "16", "--policies", "slot"],
                 ("--json", "--report"), [("gpucast.cli.sim", "run_policies"), ("gpucast.cli.sim", "_load_trace")]),
    "advise": (lambda tmp: ["advise", "resnet18-cifar", "-b", "64", "--gpu", "t4", "--counts", "1",
                            "--precisions", "fp32"],
               ("--report",), [("gpucast.advisor", "advise")]),
    "probe-host": (lambda tmp: ["probe-host", "--quick"], ("--out",), [("gpucast.probe.host", "measure")]),
    "calibrate": (lambda tmp: ["calibrate", str(_rows(tmp / "rows.csv", 6)), "--no-cv"], ("--out",),
                  [("gpucast.learn.calibrate", "calibrate"), ("gpucast.learn.rows", "read_rows")]),
    "learn fit": (lambda tmp: ["learn", "fit", str(_rows(tmp / "rows.csv", 12)), "--force"], ("--out",),
                  [("gpucast.learn.evaluate", "fit_hybrid")]),
}
SUFFIX = {"--json": ".json", "--report": ".html", "--out": ".yaml"}
CASES = [(c, f) for c, (_a, flags, _w) in COMMANDS.items() for f in flags]


def invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


def error_lines(result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.strip()]


def forbid_work(monkeypatch, command):
    import importlib

    for module, name in COMMANDS[command][2]:
        def called(*a, _name=name, **k):
            raise AssertionError(f"{command}: {_name} ran although its output could not be reserved")

        monkeypatch.setattr(importlib.import_module(module), name, called)


def assert_refused(r, flag):
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = error_lines(r)
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag} "), r.stderr
    assert r.stdout == ""


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp") or p.name.startswith("."))


@pytest.mark.parametrize("command, flag", CASES)
def test_an_unwritable_target_is_refused_before_the_work(tmp_path, monkeypatch, command, flag):
    args = COMMANDS[command][0](tmp_path)
    forbid_work(monkeypatch, command)
    # /proc: os.access says a root user may write there; only creating the file tells
    r = invoke([*args, flag, f"/proc/gpucast-test{SUFFIX[flag]}"])
    assert_refused(r, flag)
    assert "cannot create a file in directory '/proc'" in r.stderr
    r = invoke([*args, flag, tmp_path / "missing" / f"x{SUFFIX[flag]}"])
    assert_refused(r, flag)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command, flag", CASES)
def test_a_read_only_directory_is_refused_before_the_work(tmp_path, monkeypatch, command, flag):
    args = COMMANDS[command][0](tmp_path)
    forbid_work(monkeypatch, command)
    with read_only_dir(tmp_path / "ro") as ro:
        r = invoke([*args, flag, ro / f"x{SUFFIX[flag]}"])
        assert_refused(r, flag)
        assert list(ro.iterdir()) == []


@pytest.mark.parametrize("command, flag", CASES)
def test_a_full_disk_after_the_work_is_one_error_line_and_leaves_nothing(tmp_path, monkeypatch, command, flag):
    args = COMMANDS[command][0](tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    target = tmp_path / f"out{SUFFIX[flag]}"

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "fsync", full)
    r = invoke([*args, flag, target])
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr, r.exception)
    errors = [ln for ln in error_lines(r) if ln.startswith("error:")]
    assert errors == [f"error: {flag} {str(target)!r} could not be written (No space left on device); "
                      "no partial file is left"], r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no temporary file


def test_simulate_into_proc_is_one_line_in_a_real_process():
    r = subprocess.run([sys.executable, "-m", "gpucast.cli", "simulate", "--limit", "5", "--json", "/proc/r.json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["error: --json '/proc/r.json': cannot create a file in directory "
                                             "'/proc' (No such file or directory)"]
    assert r.stdout == ""


@pytest.mark.parametrize("args, flag", [
    (["profile", "suite", "--budget", "5", "--out"], "--out"),
    (["profile", "run", "mlp-small", "--save"], "--save"),
])
def test_an_output_directory_that_cannot_be_written_is_refused_before_measuring(tmp_path, monkeypatch, args, flag):
    import gpucast.cli.data as cd

    def no_gpu_check(*a, **k):
        raise AssertionError("the GPU was looked for although the output directory cannot be written")

    monkeypatch.setattr(cd, "gpu_model_or_fail", no_gpu_check)
    for target in ("/proc/gpucast-test/run", tmp_path / "a-file" / "run"):
        (tmp_path / "a-file").write_text("x")
        r = invoke([*args, target])
        assert_refused(r, flag)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
