"""The worker process's side: run a spec in this process and always produce its row, once
(``python -m gpucast.profile.worker SPEC.json RESULT.json``: :func:`main`) or spec after spec
(``--serve``: :func:`serve`, the persistent worker). The protocol (``hello``/``result``/``idle``
messages on a result channel of its own), the preload and the clean-up between runs are described
in :mod:`gpucast.profile.worker`, the entry point that runs this module's :func:`main`.

:func:`execute` is the body both share: :func:`gpucast.profile.runner.run_job`, with any failure
turned into a row (:mod:`gpucast.profile.faults`); :func:`write_row` writes the one-shot child's
row atomically.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
from pathlib import Path

from gpucast.profile.faults import child_fault, failure_row, fault_for_slot, is_oom, one_line
from gpucast.profile.nvml import FAKE_NVML_ENV, ScriptedNvml
from gpucast.profile.provenance import now_iso
from gpucast.profile.runner import run_job
from gpucast.profile.spec import RunSpec

__all__ = ["execute", "write_row", "serve", "main", "PRELOAD"]

# What a persistent worker imports before its first spec: everything a zoo job can need.
PRELOAD = (
    "torch", "torch._dynamo",  # torch.optim's first optimizer imports torch._dynamo (~1 s)
    "torchvision.models", "transformers", "transformers.integrations.sdpa_attention",
    "transformers.models.bert.modeling_bert", "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.t5.modeling_t5", "transformers.models.llama.modeling_llama",
    "gpucast.zoo", "gpucast.optim", "gpucast.profile.sampler", "gpucast.profile.nvml",
    "gpucast.hardware",
)


def execute(spec: RunSpec, backend=None) -> dict:
    """Run ``spec`` in this process and return its row, whatever happens (the child's body)."""
    started_at, t0 = now_iso(), time.perf_counter()
    if backend is None and os.environ.get(FAKE_NVML_ENV) == "1":
        backend = ScriptedNvml()
    try:
        return run_job(spec, backend=backend)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        status = "oom" if is_oom(exc) else "error"
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
        started_at, t = now_iso(), time.perf_counter()
        try:
            spec = RunSpec.from_dict(json.loads(line))
        except Exception as exc:  # noqa: BLE001
            channel.send(event="result", seq=seq, row=failure_row(
                None, "error", "bad run spec: " + one_line(exc), started_at, time.perf_counter() - t))
            channel.send(event="idle", seq=seq, **_clean_up(baseline))
            continue
        child_fault(spec.slot)
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
    started_at, t0 = now_iso(), time.perf_counter()
    try:
        with open(spec_path, encoding="utf-8") as f:
            spec = RunSpec.from_dict(json.load(f))
    except Exception as exc:  # noqa: BLE001
        write_row(result_path, failure_row(None, "error", "bad run spec: " + one_line(exc), started_at,
                                           time.perf_counter() - t0))
        return 0
    child_fault(spec.slot)
    write_row(result_path, execute(spec))
    return 0
