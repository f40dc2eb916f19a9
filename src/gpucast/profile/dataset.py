"""The append-only Parquet store of measured runs: atomic part files, resume, compaction.

A :class:`Dataset` is a directory of part files ``part-<time_ns>-<random>.parquet``, each holding
the rows of one :meth:`Dataset.append`, with the columns of :mod:`gpucast.profile.schema`.

Guarantees:

* An append is all-or-nothing. Rows are written to a hidden temp file in the same directory
  (``.part-....parquet.tmp-<pid>``), fsynced, then renamed with ``os.replace`` (atomic on POSIX);
  the directory is fsynced after, where the OS allows. A crash leaves at most a temp file, which
  readers ignore. An existing part is never rewritten, so concurrent appenders (several processes
  measuring into one directory) do not clash.
* Every row is checked against the schema: an unknown column is a ``ValueError`` naming it, a
  value the column's Arrow type cannot hold is a ``ValueError`` naming the column. Missing
  columns are null (``schema_version`` defaults to ``SCHEMA_VERSION``, as in ``empty_row()``).
* Reading skips what cannot be read (a truncated or garbage part, e.g. from a copy that was cut
  short), warning once per file on stderr with its name, and keeps every other row. Parts are read
  in name order, i.e. append order. A part written under an older schema gets nulls for columns it
  lacks; columns the current schema does not know are dropped.
* :meth:`Dataset.done_config_ids` is what a resumed suite skips: by default configurations that
  ended ``ok`` or ``oom`` (an OOM is a result: the job does not fit). ``crash``, ``timeout`` and
  ``error`` are retried.

Not modelled: locking (appends never conflict, but ``compact`` reads a snapshot and does not
delete parts: delete them yourself once the compacted file is where you want it), de-duplication
of re-measured configurations (both rows are kept; readers choose), and schema migrations beyond
adding nullable columns.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Iterable

from gpucast.profile.schema import COLUMNS, KINDS, arrow_schema, empty_row

__all__ = ["config_id", "Dataset"]

_PART_GLOB = "part-*.parquet"


def config_id(job_key: str, gpu_model: str, kind: str, partners: tuple[str, ...] = ()) -> str:
    """A stable 16-hex-digit id of what was measured: the job, the GPU model (NVML name), solo or
    co-located, and the partners' job keys (order does not matter: they are sorted)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    partners = tuple(partners)
    if kind == "solo" and partners:
        raise ValueError("a solo configuration has no partners")
    if kind == "colocated" and not partners:
        raise ValueError("a colocated configuration needs at least one partner")
    payload = json.dumps([str(job_key), str(gpu_model), kind, sorted(str(p) for p in partners)], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(table, dest: Path) -> Path:
    """Write ``table`` to ``dest`` via a temp file in the same directory, fsync, ``os.replace``."""
    import pyarrow.parquet as pq

    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(dest.parent)
    return dest


def _to_table(rows: list[dict]):
    import pyarrow as pa

    schema = arrow_schema()
    for i, row in enumerate(rows):
        unknown = [k for k in row if k not in COLUMNS]
        if unknown:
            raise ValueError(f"row {i}: unknown column {unknown[0]!r} (not in gpucast.profile.schema.COLUMNS)")
    defaults = empty_row()
    arrays = []
    for field in schema:
        values = [row.get(field.name, defaults[field.name]) for row in rows]
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"column {field.name!r} ({field.type}): {_one_line(exc)}") from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _conform(table):
    """``table`` with exactly the schema's columns, in order, cast to their types."""
    import pyarrow as pa

    schema = arrow_schema()
    arrays = []
    for field in schema:
        if field.name in table.column_names:
            arrays.append(table.column(field.name).cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


class Dataset:
    """An append-only directory of Parquet part files (created on the first append)."""

    def __init__(self, root):
        self.root = Path(root)
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"Dataset({str(self.root)!r})"

    def parts(self) -> list[Path]:
        """The part files, in append order (temp files excluded)."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob(_PART_GLOB) if p.is_file())

    def append(self, rows: list[dict]) -> Path:
        """Write ``rows`` as one new part file, atomically; return its path."""
        rows = list(rows)
        if not rows:
            raise ValueError("append needs at least one row")
        table = _to_table(rows)
        self.root.mkdir(parents=True, exist_ok=True)
        dest = self.root / f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
        return _write_atomic(table, dest)

    def _warn(self, path: Path, exc: BaseException) -> None:
        key = str(path)
        if key not in self._warned:
            self._warned.add(key)
            print(f"gpucast.profile.dataset: skipping unreadable part file {path}: {_one_line(exc)}", file=sys.stderr)

    def read(self):
        """Every readable part as one ``pyarrow.Table`` with the schema (empty when none)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = []
        for path in self.parts():
            try:
                with pq.ParquetFile(path) as pf:
                    tables.append(_conform(pf.read()))
            except Exception as exc:  # truncated, garbage, or incompatible: skip this part only
                self._warn(path, exc)
        if not tables:
            return arrow_schema().empty_table()
        return pa.concat_tables(tables)

    def rows(self) -> list[dict]:
        return self.read().to_pylist()

    def done_config_ids(self, statuses: Iterable[str] = ("ok", "oom")) -> set[str]:
        """Config ids with a row whose status is in ``statuses``: what a resumed suite skips."""
        wanted = set(statuses)
        table = self.read()
        ids = table.column("config_id").to_pylist()
        status = table.column("status").to_pylist()
        return {c for c, s in zip(ids, status) if c is not None and s in wanted}

    def compact(self, dest) -> Path:
        """All rows in one Parquet file at ``dest``, written atomically. Parts are left in place."""
        dest = Path(dest)
        if dest.parent.resolve() == self.root.resolve() and dest.match(_PART_GLOB):
            raise ValueError(f"{dest} would be read back as a part of this dataset; choose another name")
        table = self.read()
        dest.parent.mkdir(parents=True, exist_ok=True)
        return _write_atomic(table, dest)
