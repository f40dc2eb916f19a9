"""The isolated child process a run happens in: an OOM, a hang or a crash ends only the child.

Child: ``python -m gpucast.profile.worker SPEC.json RESULT.json`` reads a
:class:`~gpucast.profile.runner.RunSpec` (``RunSpec.to_dict`` as JSON), runs it with
:func:`~gpucast.profile.runner.run_job` and always writes one schema row to ``RESULT.json``,
atomically (a temporary file, then ``os.replace``): status ``ok``; ``oom`` for
``torch.cuda.OutOfMemoryError`` or a ``RuntimeError`` / allocator failure whose message says
the device ran out of memory; ``error`` with one line (``Type: first line of the message``) for
anything else. The start barrier of the spec (``start_file`` / ``start_at``, wall clock) is
waited for after set-up, inside ``run_job``.

Parent: :func:`run_isolated` starts the child in a session of its own (its process group), with
``PYTHONPATH`` led by the ``src`` directory of *this* gpucast so that the child runs the same
code, and waits. At ``timeout_s`` it kills the whole process group (status ``timeout``); a
child that exits without a result (a segfault, the OOM killer, SIGKILL) gives status ``crash``
with the last line of its stderr. It never raises for a job's failure; it raises ``JobError``
for a module job (factories are code: they cannot cross a process boundary). Whatever the
outcome, the child's process group is killed before the child is reaped, so nothing the job
started survives it. :class:`Child` is the same machinery without the waiting, for
:mod:`gpucast.profile.colocate`.

Test hooks (the no-GPU test boundary; unset in production):

* ``GPUCAST_PROFILE_FAKE_NVML=1``: the child samples a deterministic fake NVML
  (:class:`ScriptedNvml`, a device named "gpucast fake GPU", which maps to no catalog GPU) in
  place of the real one, so that a CPU run (``RunSpec.device="cpu"``) exercises the sampler.
* ``GPUCAST_PROFILE_TEST_FAULT``: ``sigkill`` (the child prints a line to stderr and kills
  itself with SIGKILL as soon as it has read its spec), ``hang`` (the child starts a grandchild
  process and both sleep for an hour), and the first-step faults of
  :mod:`gpucast.profile.runner` (``oom``, ``oom-message``, ``error``); ``KIND@N`` targets only
  the worker in co-location slot ``N``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpucast.profile.runner import RunSpec, _now_iso, base_row, run_job, fault_for_slot

__all__ = ["run_isolated", "Child", "execute", "failure_row", "write_row", "ScriptedNvml", "FAKE_NVML_ENV", "main"]

FAKE_NVML_ENV = "GPUCAST_PROFILE_FAKE_NVML"
_SRC = str(Path(__file__).resolve().parents[2])  # the directory that holds this gpucast package
_OOM_MARKERS = ("out of memory", "cudnn_status_alloc_failed", "cublas_status_alloc_failed")


class ScriptedNvml:
    """A deterministic :class:`~gpucast.profile.nvml.NvmlBackend` for no-GPU tests (see above).

    Utilization cycles 30, 60, 90 %; memory used grows 1 MiB a reading from 1 GiB; the
    process holds 512 MiB; 1500 MHz; 100 W. Not a measurement of anything."""

    UTIL = (30, 60, 90)

    def __init__(self) -> None:
        self.reads = 0

    def device_name(self) -> str:
        return "gpucast fake GPU"

    def memory_total(self) -> int:
        return 16 << 30

    def driver_version(self) -> str:
        return "0.0-fake"

    def utilization_gpu(self) -> int:
        self.reads += 1
        return self.UTIL[self.reads % len(self.UTIL)]

    def memory_used(self) -> int:
        return (1 << 30) + (min(self.reads, 1024) << 20)

    def process_memory(self, pids) -> int:
        return 512 << 20 if tuple(pids) else 0

    def sm_clock_mhz(self) -> int:
        return 1500

    def power_w(self) -> float:
        return 100.0

    def close(self) -> None:
        pass


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 500 characters)."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:500]


def _is_oom(exc: BaseException) -> bool:
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in _OOM_MARKERS)


def failure_row(spec: RunSpec | None, status: str, error: str, started_at: str | None = None,
                duration_s: float | None = None) -> dict:
    """The row of a run that produced no measurement."""
    if spec is not None:
        row = base_row(spec)
    else:
        from gpucast.profile.schema import empty_row

        row = empty_row()
    row.update(status=status, error=error, started_at=started_at, duration_s=duration_s)
    return row


def execute(spec: RunSpec, backend=None) -> dict:
    """Run ``spec`` in this process and return its row, whatever happens (the child's body)."""
    started_at, t0 = _now_iso(), time.perf_counter()
    if backend is None and os.environ.get(FAKE_NVML_ENV) == "1":
        backend = ScriptedNvml()
    try:
        return run_job(spec, backend=backend)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        status = "oom" if _is_oom(exc) else "error"
        row = failure_row(spec, status, one_line(exc), started_at, time.perf_counter() - t0)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return row


def write_row(path: str | os.PathLike, row: dict) -> None:
    """Write ``row`` as JSON to ``path`` atomically (temporary file in the same directory, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(row, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _child_fault(slot: int) -> None:
    fault = fault_for_slot(slot)
    if fault == "sigkill":
        print("test fault: the worker kills itself with SIGKILL", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m gpucast.profile.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec_path, result_path = args
    started_at, t0 = _now_iso(), time.perf_counter()
    try:
        with open(spec_path, encoding="utf-8") as f:
            spec = RunSpec.from_dict(json.load(f))
    except Exception as exc:  # noqa: BLE001
        write_row(result_path, failure_row(None, "error", "bad run spec: " + one_line(exc), started_at,
                                           time.perf_counter() - t0))
        return 0
    _child_fault(spec.slot)
    write_row(result_path, execute(spec))
    return 0


# ------------------------------------------------------------------------------- parent side
def _child_env(env: dict | None) -> dict:
    out = dict(os.environ)
    out.update(env or {})
    rest = out.get("PYTHONPATH", "")
    out["PYTHONPATH"] = _SRC + (os.pathsep + rest if rest else "")
    return out


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


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
        self.started_at = _now_iso()
        self.t0 = time.perf_counter()
        self.timed_out = False
        self._reaped = False
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [python, "-m", "gpucast.profile.worker", str(self.spec_path), str(self.result_path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env=_child_env(env), start_new_session=True,
            )
        self.pid = self.proc.pid

    def exited(self) -> bool:
        """Whether the child has exited (it is left a zombie, so its process group id stays ours)."""
        if self._reaped:
            return True
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # pragma: no cover - reaped elsewhere
            return True

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
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

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
        reason = _exit_reason(self.proc.returncode)
        last = _last_line(self.stderr_path)
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


if __name__ == "__main__":
    sys.exit(main())
