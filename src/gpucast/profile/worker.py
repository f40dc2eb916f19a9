"""The isolated child process a run happens in: an OOM, a hang or a crash ends only the child.

Two ways to run a :class:`~gpucast.profile.runner.RunSpec` out of process, with the same row
semantics (status ``ok``/``oom``/``timeout``/``crash``/``error``; never raising for a job's
failure; the worker's whole process group killed on timeout and before it is reaped):

* :func:`run_isolated`: one fresh process per run (``python -m gpucast.profile.worker SPEC.json
  RESULT.json``). Every run pays the interpreter, ``import torch`` / torchvision / transformers
  and a CUDA context (3-5 s on the device machine, more than a run's GPU work).
* :class:`WorkerPool`: one persistent worker (``python -m gpucast.profile.worker --serve``) that
  pays that once and then runs spec after spec; a fresh process replaces it after any run that
  is not ``ok`` and every ``max_runs`` runs (see "Persistent worker" below).

One-shot child: reads a :class:`~gpucast.profile.runner.RunSpec` (``RunSpec.to_dict`` as JSON),
runs it with :func:`~gpucast.profile.runner.run_job` and always writes one schema row to
``RESULT.json``, atomically (a temporary file, then ``os.replace``): status ``ok``; ``oom`` for
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

Persistent worker (``--serve``). At start, before reading anything, the worker imports
``PRELOAD`` (torch and ``torch._dynamo``, which the first optimizer of a process imports;
torchvision's models; transformers and the four Hugging Face model modules the zoo uses; the
zoo itself), creates the CUDA context of ``--device`` if one is given,
freezes the objects that exist by then out of the garbage collector (``gc.freeze``: they are
modules, and the collections between runs then take microseconds), and sends ``hello``. Then,
for each line on stdin (a ``RunSpec.to_dict`` JSON object), it runs the spec exactly as the
one-shot child does (:func:`execute`) and sends exactly one ``result`` message holding the row;
then it cleans up and sends ``idle``; then it reads the next line. End of stdin ends it.

Its result channel is a file descriptor of its own (``--result-fd N``, a pipe from the
parent), one JSON object per line: ``{"event": "hello", "pid", "preload_s", "init_s", ...}``,
``{"event": "result", "seq": N, "row": {...}}`` (``seq`` counts the spec lines this worker
read, from 1), ``{"event": "idle", "seq": N, "clean": bool, "leaked": {device: bytes}, ...}``.
Its stdout is not used for anything (the parent sends it to ``/dev/null``: torch and
transformers print warnings there); its stderr goes to a log file. Without ``--result-fd`` it
writes the messages to its original stdout and points file descriptor 1 at stderr first, so
that ``python -m gpucast.profile.worker --serve < specs.jsonl > results.jsonl`` works by hand.

Between runs. The job's model, optimizer, inputs and step live only in ``run_job``'s frame,
which is gone when the row is returned; the worker then runs ``gc.collect()`` (reference cycles
of models and tracebacks), frees cuBLAS's workspaces (torch allocates them through its caching
allocator and keeps them per handle, so they would otherwise stay allocated), calls
``torch.cuda.empty_cache()`` and ``torch.cuda.reset_peak_memory_stats()`` on every device, and
checks that ``torch.cuda.memory_allocated()`` is back to its value before the worker's first
run (its baseline, 0 in practice). If not, ``idle`` says ``clean: false`` and the parent ends
the worker before the next run (noted in :attr:`WorkerPool.notes`). So a run starts with no
tensor and no cached block left by an earlier one and with zeroed peak statistics: its
``torch_max_allocated_bytes`` / ``torch_max_reserved_bytes`` are its own, as in a fresh
process. NVML's process memory (``proc_mem_max_bytes``) still includes the CUDA context, as it
does in a fresh process; unlike a fresh process, that context also holds the kernel images
loaded (lazily, ``CUDA_MODULE_LOADING=LAZY``) by the earlier runs of the same worker, a few
tens to a few hundred MiB that grow with the variety of jobs; the restart every ``max_runs``
runs bounds that drift. cuDNN and cuBLAS heuristics caches also persist, which shortens the
warm-up of a later run with the same shapes but not its steady window. Restart policy (parent
side): a fresh process after any run whose status is not ``ok`` (an OOM or an error can leave
the CUDA context or the allocator in a bad state; it is rare, so the restart is cheap), after a
dirty ``idle``, when the worker died between runs, and every ``max_runs`` runs (default
``MAX_RUNS_PER_WORKER`` = 40) to bound drift.

Test hooks (the no-GPU test boundary; unset in production):

* ``GPUCAST_PROFILE_FAKE_NVML=1``: the child samples a deterministic fake NVML
  (:class:`ScriptedNvml`, a device named "gpucast fake GPU", which maps to no catalog GPU) in
  place of the real one, so that a CPU run (``RunSpec.device="cpu"``) exercises the sampler.
* ``GPUCAST_PROFILE_TEST_FAULT``: ``sigkill`` (the child prints a line to stderr and kills
  itself with SIGKILL as soon as it has read its spec), ``hang`` (the child starts a grandchild
  process and both sleep for an hour), ``leak`` (persistent worker only: after that run the
  worker reports memory above its baseline, as if the run had left a tensor behind), and the
  first-step faults of :mod:`gpucast.profile.runner` (``oom``, ``oom-message``, ``error``);
  ``KIND@N`` targets only specs whose ``slot`` is ``N`` (the worker in co-location slot ``N``;
  in a persistent worker, any spec given that slot).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpucast.profile.runner import RunSpec, _now_iso, base_row, run_job, fault_for_slot

__all__ = ["run_isolated", "Child", "WorkerPool", "serve", "execute", "failure_row", "write_row", "ScriptedNvml",
           "FAKE_NVML_ENV", "PRELOAD", "MAX_RUNS_PER_WORKER", "main"]

FAKE_NVML_ENV = "GPUCAST_PROFILE_FAKE_NVML"
MAX_RUNS_PER_WORKER = 40  # a persistent worker is replaced after this many runs (bounds drift)
# What a persistent worker imports before its first spec: everything a zoo job can need.
PRELOAD = (
    "torch", "torch._dynamo",  # torch.optim's first optimizer imports torch._dynamo (~1 s)
    "torchvision.models", "transformers", "transformers.integrations.sdpa_attention",
    "transformers.models.bert.modeling_bert", "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.t5.modeling_t5", "transformers.models.llama.modeling_llama",
    "gpucast.zoo", "gpucast.optim", "gpucast.profile.sampler", "gpucast.profile.nvml",
    "gpucast.hardware",
)
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


# ------------------------------------------------------------------------------- persistent worker
class _Channel:
    """The worker's result channel: one JSON object per line on a file descriptor of its own."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_inheritable(fd, False)  # processes a job execs do not get it

    def send(self, **message) -> None:
        data = (json.dumps(message, sort_keys=True) + "\n").encode("utf-8")
        while data:
            data = data[os.write(self.fd, data):]


def _preload(modules) -> tuple[list[str], list[str]]:
    """Import ``modules`` (an import that fails is reported, not fatal: the job that needs it
    will fail as it would in a fresh process); load the zoo's family modules."""
    loaded, failed = [], []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{name}: {one_line(exc)}")
            print(f"preload: {name}: {one_line(exc)}", file=sys.stderr, flush=True)
    if "gpucast.zoo" in sys.modules:
        sys.modules["gpucast.zoo"].workloads()
    return loaded, failed


def _init_device(device: str | None) -> str | None:
    """Create the CUDA context of ``device`` now (so that the first run does not pay it); an error
    string if that fails (the runs then fail as they would in a fresh process)."""
    if not device or not device.startswith("cuda"):
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA GPU"
        dev = torch.device(device)
        if dev.index is not None:
            torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001
        return one_line(exc)
    return None


def _cuda_allocated() -> dict[int, int]:
    """``torch.cuda.memory_allocated`` of every device, if this process has a CUDA context."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    return {d: int(torch.cuda.memory_allocated(d)) for d in range(torch.cuda.device_count())}


def _clean_up(baseline: dict[int, int]) -> dict:
    """Between runs: collect, free cuBLAS workspaces and cached blocks, reset peak statistics,
    and compare what is still allocated with ``baseline`` (see the module docstring)."""
    gc.collect()
    torch = sys.modules.get("torch")
    reserved = {}
    if torch is not None and torch.cuda.is_initialized():
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()
        for d in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(d)
            reserved[d] = int(torch.cuda.memory_reserved(d))
    allocated = _cuda_allocated()
    leaked = {str(d): b - baseline.get(d, 0) for d, b in allocated.items() if b != baseline.get(d, 0)}
    return {"clean": not leaked, "leaked": leaked, "allocated": {str(d): b for d, b in allocated.items()},
            "reserved": {str(d): b for d, b in reserved.items()}}


def serve(result_fd: int, device: str | None = None, preload=PRELOAD, stdin=None) -> int:
    """The persistent worker's body (see the module docstring): preload, ``hello``, then one
    ``result`` and one ``idle`` message per spec line on ``stdin`` until it ends."""
    stdin = sys.stdin if stdin is None else stdin
    channel = _Channel(result_fd)
    t0 = time.perf_counter()
    loaded, failed = _preload(preload)
    t1 = time.perf_counter()
    init_error = _init_device(device)
    gc.collect()
    gc.freeze()  # imported modules: never garbage; the collections between runs skip them
    baseline = _cuda_allocated()
    channel.send(event="hello", pid=os.getpid(), preload_s=t1 - t0, init_s=time.perf_counter() - t1,
                 preloaded=loaded, preload_failed=failed, device=device, init_error=init_error)
    seq = 0
    while True:
        line = stdin.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        seq += 1
        started_at, t = _now_iso(), time.perf_counter()
        try:
            spec = RunSpec.from_dict(json.loads(line))
        except Exception as exc:  # noqa: BLE001
            channel.send(event="result", seq=seq, row=failure_row(
                None, "error", "bad run spec: " + one_line(exc), started_at, time.perf_counter() - t))
            channel.send(event="idle", seq=seq, **_clean_up(baseline))
            continue
        _child_fault(spec.slot)
        channel.send(event="result", seq=seq, row=execute(spec))
        leak_fault = fault_for_slot(spec.slot) == "leak"
        del spec  # nothing of the run is referenced past this point
        state = _clean_up(baseline)
        if leak_fault:
            state.update(clean=False, leaked={"test": 1 << 20})
        channel.send(event="idle", seq=seq, **state)


def _serve_main(args: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gpucast.profile.worker --serve",
                                 description="Persistent worker: one RunSpec JSON per line on stdin, "
                                             "one result message per spec on the result channel.")
    ap.add_argument("--result-fd", type=int, default=None,
                    help="file descriptor of the result channel [the original stdout; fd 1 then goes to stderr]")
    ap.add_argument("--device", default=None, help="create this device's CUDA context at start (cuda, cuda:N)")
    ap.add_argument("--preload", default=None,
                    help="comma-separated modules to import at start [the default PRELOAD list]; '' for none")
    ns = ap.parse_args(args)
    fd = ns.result_fd
    if fd is None:
        fd = os.dup(1)
        os.dup2(2, 1)  # library noise printed to stdout goes to stderr, not into the results
    preload = PRELOAD if ns.preload is None else tuple(m for m in ns.preload.split(",") if m.strip())
    return serve(fd, device=ns.device, preload=preload)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--serve":
        return _serve_main(args[1:])
    if len(args) != 2:
        print("usage: python -m gpucast.profile.worker SPEC.json RESULT.json\n"
              "       python -m gpucast.profile.worker --serve [--result-fd N] [--device D] [--preload M,...]",
              file=sys.stderr)
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
def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by child ``pid`` (not yet reaped, so the id is still ours)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _has_exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # pragma: no cover - reaped elsewhere
        return True


def _child_env(env: dict | None) -> dict:
    out = dict(os.environ)
    out.update(env or {})
    rest = out.get("PYTHONPATH", "")
    out["PYTHONPATH"] = _SRC + (os.pathsep + rest if rest else "")
    return out


def _last_line(path: Path, since: int = 0) -> str:
    """The last non-empty line of ``path`` written after byte ``since``."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(since, f.tell() - 8192))
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
        """Whether the process has exited (left a zombie, so its process group id stays ours)."""
        return self._reaped or _has_exited(self.pid)

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
            _kill_group(self.pid)

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


# ------------------------------------------------------------------------------- persistent worker, parent side
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
        return self._reaped or _has_exited(self.pid)

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
            _kill_group(self.pid)
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
            self._w = _Server(self.python, _child_env(self.env), self.dir / f"worker-{self.starts}.stderr",
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
                    self.stop(f"{_exit_reason(rc)} after its last run" if gone else
                              "its clean-up after the last run did not finish in time")
                elif not idle.get("clean", False):
                    leaked = ", ".join(f"device {d}: {b} bytes" for d, b in sorted(idle.get("leaked", {}).items()))
                    self.stop(f"memory not back to its baseline after its last run ({leaked})")
            elif w.exited():
                self.stop(f"{_exit_reason(w.end())} before its first run")
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
        started_at, t0 = _now_iso(), time.perf_counter()
        deadline = time.monotonic() + timeout_s
        try:
            w = self._ready(deadline)
            since = w.stderr_size()
            seq = w.send(line)
            try:
                row = w.wait_result(seq, deadline)
            except _WorkerExited:
                self._note_hello(w)
                reason = _exit_reason(w.end())
                last = _last_line(w.stderr_path, since)
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


if __name__ == "__main__":
    sys.exit(main())
