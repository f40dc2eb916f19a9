"""The rendezvous directory of a co-located group: the marker files through which the workers
and the parent agree on a start and one common wall-clock window (the protocol is described in
:mod:`gpucast.profile.colocate`). :class:`WorkerSync` is the worker's side; :func:`touch` and
:func:`write_json` write the markers (the parent's side uses them too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["WorkerSync", "touch", "write_json"]


def touch(path: Path) -> None:
    path.touch()


def write_json(path: Path, data) -> None:
    """Write ``data`` as JSON to ``path`` atomically (a temporary file, then ``os.replace``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


class WorkerSync:
    """The worker's side of the rendezvous (used by :func:`gpucast.profile.runner.run_job`)."""

    def __init__(self, sync_dir: str | os.PathLike, slot: int):
        self.dir = Path(sync_dir)
        self.slot = slot
        self._window: tuple[float, float] | None = None

    def ready(self) -> None:
        touch(self.dir / f"ready.{self.slot}")

    def warm(self) -> None:
        touch(self.dir / f"warm.{self.slot}")

    def window(self) -> tuple[float, float] | None:
        """The common window ``(t0, t1)`` once the parent has announced it, else None."""
        if self._window is None:
            try:
                t0, t1 = json.loads((self.dir / "window.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            self._window = (float(t0), float(t1))
        return self._window

    def done(self, t0: float, t1: float) -> None:
        write_json(self.dir / f"done.{self.slot}", [t0, t1])

    def released(self) -> bool:
        return (self.dir / "release").exists()
