"""How a run fails, and how the no-GPU tests make it fail: the failure rows and the test faults.

A job's failure is never raised past a worker: :func:`failure_row` is the row of a run that
measured nothing (status ``oom``, ``timeout``, ``crash`` or ``error``, with one line of error,
:func:`one_line`); :func:`is_oom` tells an out-of-memory failure (``torch.cuda.OutOfMemoryError``,
or a ``RuntimeError`` / allocator failure whose message says the device ran out of memory) from
any other.

Test faults (the no-GPU test boundary; ``GPUCAST_PROFILE_TEST_FAULT`` is unset in production):
``KIND`` applies to every run, ``KIND@N`` only to the run whose ``slot`` is ``N``
(:func:`fault_for_slot`). At the first step of a run (:func:`raise_step_fault`): ``oom`` raises
``torch.cuda.OutOfMemoryError``, ``oom-message`` a ``RuntimeError`` whose message says "CUDA out
of memory", ``error`` a ``ValueError`` with a two-line message. In the worker process, once it has
read its spec (:func:`child_fault`): ``sigkill`` (it prints a line to stderr and kills itself with
SIGKILL), ``hang`` (it starts a grandchild process and both sleep for an hour); ``leak`` (read by
the persistent worker after the run, :mod:`gpucast.profile.child`) reports memory above the
worker's baseline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from gpucast.profile.provenance import base_row
from gpucast.profile.schema import empty_row
from gpucast.profile.spec import RunSpec

__all__ = ["FAULT_ENV", "fault_for_slot", "raise_step_fault", "child_fault", "one_line", "is_oom", "failure_row"]

FAULT_ENV = "GPUCAST_PROFILE_TEST_FAULT"
_OOM_MARKERS = ("out of memory", "cudnn_status_alloc_failed", "cublas_status_alloc_failed")


def fault_for_slot(slot: int) -> str:
    """The test fault set for ``slot`` by ``GPUCAST_PROFILE_TEST_FAULT`` (``KIND`` or ``KIND@SLOT``),
    or "" (always, in production: the variable is unset)."""
    kind, _, target = os.environ.get(FAULT_ENV, "").partition("@")
    if target and target.strip() != str(slot):
        return ""
    return kind.strip()


def raise_step_fault(slot: int) -> None:
    """The first-step test faults (``oom``, ``oom-message``, ``error``; see the module docstring)."""
    fault = fault_for_slot(slot)
    if fault == "oom":
        import torch

        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (test fault)")
    if fault == "oom-message":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (test fault)")
    if fault == "error":
        raise ValueError("test fault: the job raised\nsecond line that must not reach the row")


def child_fault(slot: int) -> None:
    """The worker-process test faults (``sigkill``, ``hang``), right after a spec is read."""
    fault = fault_for_slot(slot)
    if fault == "sigkill":
        print("test fault: the worker kills itself with SIGKILL", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        time.sleep(3600)


# ------------------------------------------------------------------------------- failures
def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 500 characters)."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:500]


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` says the device ran out of memory (torch's OOM error, or an allocator's message)."""
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
    row = base_row(spec) if spec is not None else empty_row()
    row.update(status=status, error=error, started_at=started_at, duration_s=duration_s)
    return row
