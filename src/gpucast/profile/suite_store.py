"""Where the suite's rows go and come from: :func:`read_rows` (Parquet files and directories of
earlier collections), the compacted copy of the dataset rewritten atomically after every append
(:class:`Compacted`), and what earlier rows say (the configurations already done, the solo step
times that co-located groups need).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable

__all__ = ["read_rows", "Compacted", "done_ids", "solo_step_times"]


def read_rows(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Rows of Parquet files and directories (a directory: its ``*.parquet`` files, the
    part files of a :class:`~gpucast.profile.dataset.Dataset` included; not recursive). A path
    that does not exist raises ``FileNotFoundError``; an unreadable file is skipped with a warning."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"no such file or directory: {str(p)!r}")
        files = sorted(p.glob("*.parquet")) if p.is_dir() else [p]
        for f in files:
            try:
                rows.extend(pq.read_table(f).to_pylist())
            except Exception as exc:  # noqa: BLE001 - a broken file must not hide the others
                print(f"warning: skipping unreadable {f}: {' '.join(str(exc).split())}", file=sys.stderr)
    return rows


class Compacted:
    """The dataset's rows in memory, rewritten as one Parquet file after every append (atomically:
    a temporary file in the same directory, fsync, ``os.replace``). Reading each new part once
    keeps this linear; ``Dataset.compact`` would re-read every part after every run."""

    def __init__(self, ds, path: Path):
        self.path = Path(path)
        self.tables = [ds.read()]

    @property
    def num_rows(self) -> int:
        return sum(t.num_rows for t in self.tables)

    def rows(self) -> list[dict]:
        return [r for t in self.tables for r in t.to_pylist()]

    def add(self, part: Path) -> Path:
        import pyarrow.parquet as pq

        self.tables.append(pq.read_table(part))
        return self.write()

    def write(self) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.concat_tables(self.tables, promote_options="default")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                pq.write_table(table, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return self.path


def done_ids(rows: Iterable[dict], statuses=("ok", "oom")) -> set[str]:
    """The config ids that already have a row of one of ``statuses`` (resume skips them)."""
    return {r["config_id"] for r in rows if r.get("config_id") and r.get("status") in statuses}


def solo_step_times(rows: Iterable[dict], gpu_model: str) -> dict[str, float]:
    """Job key -> mean step time of its ``ok`` solo rows on ``gpu_model`` (a group's baselines)."""
    out = {}
    for r in rows:
        if (r.get("kind") == "solo" and r.get("status") == "ok" and r.get("gpu_model") == gpu_model
                and r.get("step_time_mean_s")):
            out[r["job_key"]] = float(r["step_time_mean_s"])
    return out
