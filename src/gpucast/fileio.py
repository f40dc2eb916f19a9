"""Writing files so that a reader sees the old file or the whole new one, never half of it.

One job: :func:`atomic_write_text` (a temporary file in the target's directory, then
``os.replace``, with an ordinary file's mode). Used by every writer of reports, environment and
model files, and the prediction cache; a leaf module (it imports nothing of gpucast), so the low
layers can use it without importing the simulator's report.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``:
    a reader sees the old file or the whole new one, never half of it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; give it an ordinary file's mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
