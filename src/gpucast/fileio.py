"""Writing files so that a reader sees the old file or the whole new one, never half of it.

Two jobs, one mechanism (a temporary file in the target's directory, then ``os.replace``, with an
ordinary file's mode):

* :func:`atomic_write_text` writes a file in one go. Used by every writer of reports, environment
  and model files, and the prediction cache.
* :func:`reserve_output` is for commands that write a file after long work (``gpucast simulate
  --json``, ``advise --report``, ``probe-host --out``, ``calibrate --out``, ``learn fit --out``): it
  creates the temporary file *before* the work starts, so a destination that cannot be written
  (a missing or read-only directory, ``/proc``, a directory given as a file) fails at once with
  one :class:`OutputError` (a ValueError: the command line prints it as one ``error:`` line and
  exits 2), and no work is lost. The returned :class:`OutputFile` is passed where a path would go
  (``atomic_write_text`` and every writer built on it accept it); writing it fills the temporary
  file and commits it with ``os.replace``. A failure then (ENOSPC, EROFS, EACCES, ...) is one
  :class:`OutputError` too, and the temporary file is removed. A reservation never committed is
  removed when its ``with`` block ends or, at the latest, when the process exits.
* :func:`check_output_dir` is the same check for a command whose output is a directory filled
  while it runs (``gpucast profile suite --out``, ``profile run --save``): it leaves nothing behind.

What is not modelled: the free space needed (only the directory's writability is reserved), and
a file changed by someone else between reservation and commit (the commit replaces it).

A leaf module (it imports nothing of gpucast), so the low layers can use it without importing the
simulator's report.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path


class OutputError(ValueError):
    """An output file cannot be reserved or written; one line naming the flag, the file and the cause."""


def _file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_PENDING: dict[str, "OutputFile"] = {}  # resolved target -> its uncommitted reservation


@atexit.register
def _discard_pending() -> None:
    for out in list(_PENDING.values()):
        out.discard()


class OutputFile:
    """An output file reserved by :func:`reserve_output`: its temporary file exists already.

    ``write_text(text)`` (or ``atomic_write_text(out, text)``) fills and commits it once;
    ``discard()`` (or leaving the ``with`` block without a commit) removes the temporary file."""

    def __init__(self, path: Path, flag: str, tmp: str, key: str):
        self.path, self.flag, self.tmp, self._key = path, flag, tmp, key
        self.committed = False

    def __repr__(self) -> str:
        return f"OutputFile({str(self.path)!r}, flag={self.flag!r})"

    def __str__(self) -> str:  # writers test the name (``.svg``?) and print it
        return str(self.path)

    def _error(self, what: str, exc: OSError) -> OutputError:
        cause = exc.strerror or type(exc).__name__
        return OutputError(f"{self.flag} {str(self.path)!r} {what} ({cause}); no partial file is left")

    def write_text(self, text: str) -> Path:
        """Fill the temporary file with ``text`` and replace the target with it; an OSError on the
        way becomes one :class:`OutputError` and the temporary file is removed."""
        if self.committed or self.tmp is None:
            raise RuntimeError(f"{self!r} was already committed or discarded")
        try:
            with open(self.tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())  # a full disk shows here, not after the rename
            os.chmod(self.tmp, _file_mode())  # mkstemp makes it 0600; give it an ordinary file's mode
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.discard()
            raise self._error("could not be written", exc) from None
        except BaseException:
            self.discard()
            raise
        self.committed = True
        self.tmp = None
        _PENDING.pop(self._key, None)
        return self.path

    def discard(self) -> None:
        """Remove the temporary file (no-op once committed or discarded)."""
        if self.tmp is not None:
            _unlink(self.tmp)
            self.tmp = None
        _PENDING.pop(self._key, None)

    def __enter__(self) -> "OutputFile":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def reserve_output(path, flag: str = "output") -> OutputFile:
    """Reserve ``path`` for writing later: create its temporary file in the target's directory now.

    Raises :class:`OutputError` (one line, naming ``flag``) when ``path`` is a directory, its
    directory does not exist, the existing file is not writable, the temporary file cannot be
    created, or another pending reservation names the same file."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    name = f"{flag} {str(path)!r}"
    if path.is_dir():
        raise OutputError(f"{name} is a directory")
    if not parent.is_dir():
        raise OutputError(f"{name}: directory {str(parent)!r} does not exist")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{name} is not writable")
    key = os.path.realpath(path)
    if key in _PENDING:
        raise OutputError(f"{_PENDING[key].flag} and {flag} name the same file ({str(path)!r})")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(f"{name}: cannot create a file in directory {str(parent)!r} "
                          f"({exc.strerror or type(exc).__name__})") from None
    os.close(fd)
    out = OutputFile(path, flag, tmp, key)
    _PENDING[key] = out
    return out


def check_output_dir(path, flag: str = "output") -> None:
    """Raise :class:`OutputError` unless directory ``path`` exists or can be made, and files can be
    created in it: a file is reserved (and released at once) in ``path`` or, when it does not
    exist yet, in its nearest existing parent. Creates nothing that stays, not even ``path``. For
    commands whose output is a directory filled while they run (``gpucast profile suite --out``)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {str(path)!r} is not a directory")
    existing = path
    while not existing.is_dir():
        if existing.exists() or existing.parent == existing:
            raise OutputError(f"{flag} {str(path)!r}: {str(existing)!r} is not a directory")
        existing = existing.parent
    try:
        reserve_output(existing / f".gpucast-write-check-{os.getpid()}", flag).discard()
    except OutputError:
        raise OutputError(f"{flag} {str(path)!r}: cannot create files in {str(existing)!r}") from None


def reserve_outputs(*targets) -> list:
    """:func:`reserve_output` for each ``(path, flag)`` pair, all or none: an :class:`OutputFile`
    per pair, None where ``path`` is None; if one fails, those reserved already are discarded."""
    outs: list = []
    try:
        for path, flag in targets:
            outs.append(None if path is None else reserve_output(path, flag))
    except BaseException:
        discard(outs)
        raise
    return outs


def discard(outs) -> None:
    """Discard each reservation of ``outs`` not committed (None entries are skipped)."""
    for out in outs:
        if out is not None:
            out.discard()


def atomic_write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``:
    a reader sees the old file or the whole new one, never half of it. ``path`` may be an
    :class:`OutputFile` from :func:`reserve_output`: its reserved temporary file is used."""
    if isinstance(path, OutputFile):
        return path.write_text(text)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    return path
