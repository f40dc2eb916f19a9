"""One fresh worker process per run: :func:`run_isolated` and :class:`Child` (the same machinery
without the waiting, for :mod:`gpucast.profile.colocate`).

The child (``python -m gpucast.profile.worker SPEC.json RESULT.json``, :mod:`gpucast.profile.child`)
runs in a session of its own (its process group), with ``PYTHONPATH`` led by the ``src`` directory
of *this* gpucast (:func:`gpucast.profile.procs.child_env`). The parent waits; at ``timeout_s`` it
kills the whole process group (status ``timeout``); a child that exits without a result (a
segfault, the OOM killer, SIGKILL) gives status ``crash`` with the last line of its stderr. It never
raises for a job's failure; it raises ``JobError`` for a module job (factories are code: they cannot
cross a process boundary). Whatever the outcome, the child's process group is killed before the
child is reaped, so nothing the job started survives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpucast.profile.faults import failure_row
from gpucast.profile.procs import child_env, exit_reason, has_exited, kill_group, last_line
from gpucast.profile.provenance import now_iso
from gpucast.profile.spec import RunSpec

__all__ = ["Child", "run_isolated"]


class Child:
    """One worker process: started at construction, in its own process group.

    ``exited()`` polls without reaping; ``kill()`` kills the process group; ``finish()`` kills
    what is left of the group, reaps the child and returns its row (the result it wrote, or a
    ``timeout`` / ``crash`` row)."""

    def __init__(self, spec: RunSpec, workdir: str | os.PathLike, python: str = sys.executable,
                 env: dict | None = None):
        self.spec = spec
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.spec_path = self.dir / "spec.json"
        self.result_path = self.dir / "result.json"
        self.stderr_path = self.dir / "stderr.txt"
        self.spec_path.write_text(spec.to_json(), encoding="utf-8")  # refuses module jobs
        self.started_at = now_iso()
        self.t0 = time.perf_counter()
        self.timed_out = False
        self._reaped = False
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [python, "-m", "gpucast.profile.worker", str(self.spec_path), str(self.result_path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env=child_env(env), start_new_session=True,
            )
        self.pid = self.proc.pid

    def exited(self) -> bool:
        """Whether the process has exited (left a zombie, so its process group id stays ours)."""
        return self._reaped or has_exited(self.pid)

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the child to exit; True if it did."""
        deadline = time.monotonic() + timeout_s
        delay = 0.005
        while not self.exited():
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.1)
        return True

    @property
    def reaped(self) -> bool:
        return self._reaped

    def kill(self) -> None:
        """Kill the child's whole process group (the child is not reaped yet, so the id is still ours)."""
        if not self._reaped:
            kill_group(self.pid)

    def finish(self, timed_out: bool = False) -> dict:
        """Kill what is left of the group, reap the child, and return its row: the result it
        wrote if any, else ``timeout`` (``timed_out``) or ``crash``."""
        self.timed_out = self.timed_out or timed_out
        self.kill()
        if not self._reaped:
            self.proc.wait()
            self._reaped = True
        duration = time.perf_counter() - self.t0
        try:  # a result written before a hang at exit (driver teardown) still counts
            with open(self.result_path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
        if self.timed_out:
            return failure_row(self.spec, "timeout", "no result within the time limit; worker killed",
                               self.started_at, duration)
        reason = exit_reason(self.proc.returncode)
        last = last_line(self.stderr_path)
        error = f"worker {reason} without a result" + (f"; stderr: {last}" if last else "")
        return failure_row(self.spec, "crash", error[:500], self.started_at, duration)


def run_isolated(spec: RunSpec, timeout_s: float = 120, python: str = sys.executable,
                 env: dict | None = None) -> dict:
    """Run ``spec`` in a child process and return its row (see the module docstring).

    ``env``: variables set for the child on top of this process's environment."""
    spec.to_dict()  # a module job raises JobError here, before anything starts
    with tempfile.TemporaryDirectory(prefix="gpucast-worker-") as workdir:
        child = Child(spec, workdir, python=python, env=env)
        try:
            done = child.wait(timeout_s)
            row = child.finish(timed_out=not done)
        except BaseException:
            child.finish(timed_out=True)
            raise
    if row.get("status") == "timeout":
        row["error"] = f"no result within {timeout_s:g} s; worker killed"
    return row
