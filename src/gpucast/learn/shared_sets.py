"""The measured sets (``data/measured/<set>`` in the repository) as validated measured rows:
GPUMemNet's MLP runs and Gavel's solo throughputs, their records
(:mod:`gpucast.learn.shared_records`: the jobs, loaders and loops, and where each number comes
from) through :func:`gpucast.learn.rows.from_records`.
The names of ``shared_records`` are importable from here too.
"""

from __future__ import annotations

from pathlib import Path

from gpucast.gavel import GAVEL_SURROUNDINGS  # noqa: F401  (re-exported for tests)
from gpucast.learn.rows import MeasuredRow, from_records
from gpucast.learn.shared_records import (MLP_DATA, MLP_LOOP, MLP_STACK, gavel_records,  # noqa: F401
                                          mlp_records, mlp_records_of)

__all__ = ["MeasuredRow", "mlp_rows", "gavel_rows", "mlp_records", "mlp_records_of", "gavel_records"]


def mlp_rows(path: str | Path, limit: int | None = None) -> list[MeasuredRow]:
    """GPUMemNet's MLP runs as jobs (``path``: the runs.csv)."""
    return from_records(mlp_records(path, limit), str(path))


def gavel_rows(path: str | Path) -> list[MeasuredRow]:
    """Gavel's solo, single-GPU throughputs as jobs (``path``: simulation_throughputs.json)."""
    return from_records(gavel_records(path), str(path))
