"""The parent's side of a persistent worker: :class:`WorkerPool` keeps one worker process
(``python -m gpucast.profile.worker --serve``, :mod:`gpucast.profile.child`) and runs spec after
spec in it, with the row semantics of :func:`gpucast.profile.isolated.run_isolated`; a fresh
process replaces it after any run that is not ``ok``, after a dirty clean-up report, when it died
between runs, and every ``max_runs`` runs (default ``MAX_RUNS_PER_WORKER``). :class:`_Server` is
one such process and its channels (specs on its stdin, messages on a pipe of its own). The
protocol and the restart policy are described in :mod:`gpucast.profile.worker`.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpucast.profile.faults import failure_row
from gpucast.profile.procs import child_env, exit_reason, has_exited, kill_group, last_line
from gpucast.profile.provenance import now_iso
from gpucast.profile.spec import RunSpec

__all__ = ["WorkerPool", "MAX_RUNS_PER_WORKER", "IDLE_WAIT_S"]

MAX_RUNS_PER_WORKER = 40  # a persistent worker is replaced after this many runs (bounds drift)
IDLE_WAIT_S = 30.0  # at most this long for a worker's clean-up after a run, before the next run


class _WorkerExited(Exception):
    pass


class _Server:
    """One persistent worker process (``--serve``) in its own process group, and its channels."""

    def __init__(self, python: str, env: dict, stderr_path: Path, device: str | None, preload):
        self.stderr_path = stderr_path
        self.runs = 0          # results received
        self.seq = 0           # specs sent
        self.idle_seq = 0      # the last run whose clean-up was reported
        self.idle: dict | None = None
        self.hello: dict | None = None
        self.hello_s: float | None = None
        self.hello_noted = False
        self._buf = b""
        self._messages: list[dict] = []
        self._reaped = False
        self._eof = False
        cmd = [python, "-m", "gpucast.profile.worker", "--serve"]
        if device:
            cmd += ["--device", device]
        if preload is not None:
            cmd += ["--preload", ",".join(preload)]
        read_fd, write_fd = os.pipe()
        try:
            cmd += ["--result-fd", str(write_fd)]
            self.t0 = time.monotonic()
            with open(stderr_path, "ab") as err:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                             env=env, start_new_session=True, pass_fds=(write_fd,))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the worker holds the only write end: its exit ends the channel
        self.fd = read_fd
        self.pid = self.proc.pid

    # -- state
    def exited(self) -> bool:
        """Whether the process has exited (left a zombie, so its process group id stays ours)."""
        return self._reaped or has_exited(self.pid)

    def stderr_size(self) -> int:
        try:
            return self.stderr_path.stat().st_size
        except OSError:
            return 0

    # -- channels
    def send(self, line: str) -> int:
        """Send one spec line; its sequence number. A worker that is gone is found by the wait."""
        self.seq += 1
        try:
            self.proc.stdin.write(line.encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        return self.seq

    def _read(self, timeout: float) -> None:
        """Read what the channel holds (waiting up to ``timeout``) into parsed messages."""
        if self._eof:
            time.sleep(max(0.0, min(timeout, 0.01)))
            return
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return
        data = os.read(self.fd, 1 << 16)
        if not data:
            self._eof = True
            return
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for raw in lines:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # not ours (nothing else should write here); the wait goes on
            if isinstance(msg, dict):
                self._take(msg)

    def _take(self, msg: dict) -> None:
        event = msg.get("event")
        if event == "hello":
            self.hello, self.hello_s = msg, time.monotonic() - self.t0
        elif event == "idle":
            self.idle_seq, self.idle = int(msg.get("seq", 0)), msg
        elif event == "result":
            self._messages.append(msg)

    def _pop_result(self, seq: int) -> dict | None:
        for msg in self._messages:
            if msg.get("seq") == seq and isinstance(msg.get("row"), dict):
                self._messages.clear()
                self.runs += 1
                return msg["row"]
        return None

    def _drain(self) -> None:
        """Read whatever the channel still holds, without waiting."""
        while not self._eof and select.select([self.fd], [], [], 0.0)[0]:
            self._read(0.0)

    def wait_result(self, seq: int, deadline: float) -> dict | None:
        """The row of spec ``seq``; None at ``deadline``; raises ``_WorkerExited`` if the worker
        is gone without sending it."""
        delay = 0.002
        while True:
            row = self._pop_result(seq)
            if row is not None:
                return row
            if self._eof or self.exited():
                self._drain()  # what it wrote before it exited
                row = self._pop_result(seq)
                if row is not None:
                    return row
                raise _WorkerExited
            left = deadline - time.monotonic()
            if left <= 0:
                self._drain()  # a result sent just in time still counts
                return self._pop_result(seq)
            self._read(min(left, delay))
            delay = min(delay * 2, 0.05)

    def wait_idle(self, deadline: float) -> dict | None:
        """The clean-up report of the last run; None if it did not come by ``deadline`` or the
        worker is gone."""
        delay = 0.002
        while self.idle_seq < self.seq:
            left = deadline - time.monotonic()
            if left <= 0 or self._eof or self.exited():
                self._drain()
                return self.idle if self.idle_seq >= self.seq else None
            self._read(min(left, delay))
            delay = min(delay * 2, 0.05)
        return self.idle

    def wait_hello(self, deadline: float) -> dict | None:
        while self.hello is None and time.monotonic() < deadline and not self._eof and not self.exited():
            self._read(min(0.05, deadline - time.monotonic()))
        return self.hello

    # -- ending
    def end(self) -> int:
        """Kill the worker's whole process group, reap it, close the channels; its return code."""
        if not self._reaped:
            kill_group(self.pid)
            self.proc.wait()
            self._reaped = True
            for f in (self.proc.stdin,):
                try:
                    f.close()
                except OSError:
                    pass
            os.close(self.fd)
        return self.proc.returncode


class WorkerPool:
    """A pool of one persistent worker process (``--serve``; see the module docstring).

    ``run(spec, timeout_s)`` has exactly the semantics of :func:`run_isolated` (one row, status
    ``ok``/``oom``/``timeout``/``crash``/``error``, never raising for a job's failure, the
    worker's process group killed on timeout, ``JobError`` for a module job) but reuses the
    worker between ``ok`` runs. The worker is started on the first ``run`` (or by ``start``);
    ``timeout_s`` covers the whole call, so a run that needs a fresh worker pays its start-up,
    as a ``run_isolated`` child does. A fresh process replaces the worker after a run that is
    not ``ok``, after ``max_runs`` runs, when its clean-up report says memory is not back to
    its baseline (or does not come within ``IDLE_WAIT_S``), and when it died between runs; each
    replacement is noted in ``notes``. ``stop()`` ends the worker now (its GPU memory and
    context are freed; the next ``run`` starts a fresh one); ``close()`` (or leaving the
    ``with`` block) ends it for good.

    ``env``: variables set for the worker on top of this process's environment, read at each
    worker start. ``device``: whose CUDA context the worker creates at start (``None``: on its
    first run). ``preload``: modules imported at start (default ``PRELOAD``).
    """

    def __init__(self, *, python: str = sys.executable, env: dict | None = None, device: str | None = None,
                 max_runs: int = MAX_RUNS_PER_WORKER, preload=None, workdir: str | os.PathLike | None = None):
        if not isinstance(max_runs, int) or max_runs < 1:
            raise ValueError(f"max_runs must be an integer >= 1, got {max_runs!r}")
        self.python = python
        self.env = dict(env or {})
        self.device = device
        self.max_runs = max_runs
        self.preload = None if preload is None else tuple(preload)
        self._own_dir = workdir is None
        self.dir = Path(tempfile.mkdtemp(prefix="gpucast-pool-") if workdir is None else workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.starts = 0                   # worker processes started
        self.runs = 0                     # calls of ``run`` that returned a row
        self.start_s: list[float] = []    # per ended worker: seconds from its start to its ``hello``
        self.notes: list[str] = []        # why each worker was replaced (or what it could not preload)
        self._w: _Server | None = None
        self._closed = False

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The current worker's process id (None when none is running)."""
        return self._w.pid if self._w is not None else None

    def start(self) -> int:
        """Start a worker now if none is running; its pid."""
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        if self._w is None:
            self.starts += 1
            self._w = _Server(self.python, child_env(self.env), self.dir / f"worker-{self.starts}.stderr",
                              self.device, self.preload)
        return self._w.pid

    def stop(self, note: str | None = None) -> None:
        """End the current worker (if any); ``note`` goes to ``notes``."""
        w, self._w = self._w, None
        if w is not None:
            if w.hello_s is not None:
                self.start_s.append(w.hello_s)
            w.end()
            if note:
                self.notes.append(f"worker {w.pid} ended after {w.runs} run(s): {note}")

    def close(self) -> None:
        self.stop()
        self._closed = True
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def wait_ready(self, timeout_s: float = 120.0) -> dict | None:
        """Start a worker if none is running and wait for its ``hello`` (None if it did not come)."""
        self.start()
        return self._w.wait_hello(time.monotonic() + timeout_s)

    def _ready(self, deadline: float) -> _Server:
        """The worker for the next run: the current one if it is fit, else a fresh one."""
        w = self._w
        if w is not None:
            if w.seq:  # it has run: its clean-up report decides
                idle = w.wait_idle(min(deadline, time.monotonic() + IDLE_WAIT_S))
                if idle is None:
                    gone = w.exited()
                    rc = w.end()
                    self.stop(f"{exit_reason(rc)} after its last run" if gone else
                              "its clean-up after the last run did not finish in time")
                elif not idle.get("clean", False):
                    leaked = ", ".join(f"device {d}: {b} bytes" for d, b in sorted(idle.get("leaked", {}).items()))
                    self.stop(f"memory not back to its baseline after its last run ({leaked})")
            elif w.exited():
                self.stop(f"{exit_reason(w.end())} before its first run")
        self.start()
        return self._w

    def _note_hello(self, w: _Server) -> None:
        """Note once per worker what it could not preload or initialise (its runs will say why
        they fail; this says it early)."""
        if w.hello is not None and not w.hello_noted:
            w.hello_noted = True
            problems = list(w.hello.get("preload_failed") or [])
            if w.hello.get("init_error"):
                problems.append(f"device {w.hello.get('device')}: {w.hello['init_error']}")
            if problems:
                self.notes.append(f"worker {w.pid} started without: {'; '.join(problems)}"[:500])

    def run(self, spec: RunSpec, timeout_s: float = 120) -> dict:
        """Run ``spec`` in the worker and return its row (see the class docstring)."""
        line = spec.to_json()  # a module job raises JobError here, before anything starts
        started_at, t0 = now_iso(), time.perf_counter()
        deadline = time.monotonic() + timeout_s
        try:
            w = self._ready(deadline)
            since = w.stderr_size()
            seq = w.send(line)
            try:
                row = w.wait_result(seq, deadline)
            except _WorkerExited:
                self._note_hello(w)
                reason = exit_reason(w.end())
                last = last_line(w.stderr_path, since)
                self.stop(f"{reason} during a run (crash)")
                error = f"worker {reason} without a result" + (f"; stderr: {last}" if last else "")
                row = failure_row(spec, "crash", error[:500], started_at, time.perf_counter() - t0)
            else:
                self._note_hello(w)
                if row is None:
                    self.stop(f"no result within {timeout_s:g} s (timeout)")
                    row = failure_row(spec, "timeout", f"no result within {timeout_s:g} s; worker killed",
                                      started_at, time.perf_counter() - t0)
                elif row.get("status") != "ok":
                    self.stop(f"a run ended {row.get('status')}")
                elif w.runs >= self.max_runs:
                    self.stop(f"every {self.max_runs} runs")
        except BaseException:
            self.stop("interrupted")
            raise
        self.runs += 1
        return row
