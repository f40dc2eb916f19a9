"""Worker processes in process groups of their own: the environment a worker starts with (the
``src`` directory of *this* gpucast leads its ``PYTHONPATH``, so that it runs the same code),
polling for its exit without reaping it (so its process group id stays ours), killing the whole
group, and the words for how it ended (its exit reason, its stderr's last line).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["kill_group", "has_exited", "child_env", "last_line", "exit_reason"]

_SRC = str(Path(__file__).resolve().parents[2])  # the directory that holds this gpucast package


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by child ``pid`` (not yet reaped, so the id is still ours)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def has_exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # pragma: no cover - reaped elsewhere
        return True


def child_env(env: dict | None) -> dict:
    """This process's environment plus ``env``, with ``PYTHONPATH`` led by this gpucast's ``src``."""
    out = dict(os.environ)
    out.update(env or {})
    rest = out.get("PYTHONPATH", "")
    out["PYTHONPATH"] = _SRC + (os.pathsep + rest if rest else "")
    return out


def last_line(path: Path, since: int = 0) -> str:
    """The last non-empty line of ``path`` written after byte ``since``."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(since, f.tell() - 8192))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def exit_reason(returncode: int) -> str:
    """``killed by SIGKILL`` / ``exited with code 1``: how a child ended, for rows and notes."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"
