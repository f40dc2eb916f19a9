"""Lucid's RTX 3090 measurements (``data/measured/lucid-rtx3090`` in the repository): its solo
runs and pairs read and checked, and the solo runs as measured rows of gpucast jobs.

The set (its README): 35 solo runs (``singles.csv``) and 335 pairs run together on one RTX 3090
by time-slicing (``pairs.csv``), from the public artifact of Lucid (Hu et al., ASPLOS '23), seven
of its workload families, PyTorch 1.11.0+cu113. Each job ran in its own process for 30 s; speeds
are samples per second after warm-up, ``gpu_util_pct`` the mean of nvidia-smi's
``utilization.gpu`` over the steady state, memory the whole GPU's ``fb_memory_usage.used`` (the
mean for solo runs, the maximum of both processes together for pairs). The data is read from a
directory the caller gives (tests pass ``data/measured/lucid-rtx3090``); nothing of it is
packaged (S-Lab License 1.0, non-commercial).

The jobs (each family as the closest zoo workload with its script's surroundings, and what each
does not reproduce) are :mod:`gpucast.learn.lucid_jobs`; :data:`JOBS`, :class:`FamilyJob` and the constants used
from here (``LUCID_STACK``, ``HOST_SCALE_TO_REFERENCE``, ``LSTM_GPU_INDEX_SAMPLE_S``,
``STEP_TIME_NOT_COMPARABLE``) are importable from here too.

Memory: ``memory_used_mib`` is the GPU's whole used memory averaged over the run, what a
measured row's ``memory_mib`` (the process's peak as nvidia-smi shows it) is closest to for one
process alone on the GPU.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from gpucast.job import Job
from gpucast.learn.lucid_jobs import (HOST_SCALE_TO_REFERENCE, JOBS, LSTM_GPU_INDEX_SAMPLE_S,  # noqa: F401
                                      LUCID_STACK, SPEED_NOT_MEASURED, STEP_TIME_NOT_COMPARABLE, FamilyJob)
from gpucast.learn.rows import MeasuredRow, RowsError, from_records

__all__ = ["JOBS", "FamilyJob", "Single", "Pair", "singles", "pairs", "single_records", "single_rows",
           "family_of", "GPU", "SINGLES_FILE", "PAIRS_FILE", "RowsError"]

GPU = "rtx-3090"
SINGLES_FILE = "singles.csv"
PAIRS_FILE = "pairs.csv"

SINGLES_COLUMNS = ("model", "dataset", "batch_size", "amp", "speed_samples_per_s", "gpu_util_pct",
                   "memory_used_mib")
PAIRS_COLUMNS = ("model1", "dataset1", "batch_size1", "amp1", "speed1_vs_solo",
                 "model2", "dataset2", "batch_size2", "amp2", "speed2_vs_solo",
                 "gpu_util_pct", "memory_used_max_mib")

# The RTX 3090's board memory (24 GB GDDR6X = 24,576 MiB): no reading of used memory exceeds it.
RTX3090_MEMORY_MIB = 24_576
# A job cannot run twice as fast beside a neighbour as alone (time-slicing only takes time away);
# the set's largest ratio is ~1.1 (measurement noise).
MAX_SPEED_VS_SOLO = 2.0


def family_of(x) -> str:
    """The family held out together in evaluation: the ``model`` column (ResNet18, EfficientNet,
    ResNet50, LSTM, DCGAN, NeuMF, TD3). ``x``: a :class:`Single`, a measured row made by
    :func:`single_rows`, a family key ``(model, dataset)`` or a run key ``(model, dataset,
    batch_size, amp)``, or a model name."""
    if isinstance(x, Single):
        return x.model
    if isinstance(x, MeasuredRow):
        return x.group
    if isinstance(x, tuple) and x and isinstance(x[0], str):
        name = x[0]
    elif isinstance(x, str):
        name = x
    else:
        raise TypeError(f"family_of takes a Single, a MeasuredRow, a (model, dataset) key or a model name, "
                        f"got {type(x).__name__}")
    models = {m for m, _ in JOBS}
    if name not in models:
        raise KeyError(f"{name!r} is no Lucid family (known: {', '.join(sorted(models))})")
    return name


# ------------------------------------------------------------------------------ the rows

@dataclass(frozen=True)
class Single:
    """One solo run (a row of singles.csv)."""

    family: tuple[str, str]                 # (model, dataset)
    batch_size: int
    amp: bool
    speed_samples_per_s: float
    gpu_util_pct: float
    memory_used_mib: float
    row: int = 0                            # 1-based data row in singles.csv

    @property
    def model(self) -> str:
        return self.family[0]

    @property
    def key(self) -> tuple[str, str, int, bool]:
        return (*self.family, self.batch_size, self.amp)

    @property
    def step_time_s(self) -> float:
        """The solo step time as measured: batch_size / speed (for TD3 seconds per episode, see
        :data:`STEP_TIME_NOT_COMPARABLE`)."""
        return self.batch_size / self.speed_samples_per_s

    @property
    def step_time_comparable(self) -> bool:
        """Whether :attr:`step_time_s` is a training step as gpucast predicts one."""
        return self.family not in STEP_TIME_NOT_COMPARABLE

    def job(self) -> Job:
        return JOBS[self.family].job(self.batch_size, self.amp)

    @property
    def label(self) -> str:
        return (f"{self.family[0]} {self.family[1]} bs {self.batch_size} {'amp' if self.amp else 'fp32'} "
                f"({SINGLES_FILE} row {self.row})")


@dataclass(frozen=True)
class Pair:
    """Two jobs run together on the GPU (a row of pairs.csv), with each one's solo run."""

    family1: tuple[str, str]
    batch_size1: int
    amp1: bool
    speed1_vs_solo: float                   # its throughput together / alone
    family2: tuple[str, str]
    batch_size2: int
    amp2: bool
    speed2_vs_solo: float
    gpu_util_pct: float                     # the GPU's, while both ran
    memory_used_max_mib: float              # the GPU's, both processes
    solo1: Single
    solo2: Single
    row: int = 0                            # 1-based data row in pairs.csv

    @property
    def key1(self) -> tuple[str, str, int, bool]:
        return (*self.family1, self.batch_size1, self.amp1)

    @property
    def key2(self) -> tuple[str, str, int, bool]:
        return (*self.family2, self.batch_size2, self.amp2)

    def job1(self) -> Job:
        return self.solo1.job()

    def job2(self) -> Job:
        return self.solo2.job()

    @property
    def speed1_samples_per_s(self) -> float:
        return self.speed1_vs_solo * self.solo1.speed_samples_per_s

    @property
    def speed2_samples_per_s(self) -> float:
        return self.speed2_vs_solo * self.solo2.speed_samples_per_s


# ------------------------------------------------------------------------------ reading and checking

class _Reader:
    """One CSV file's rows as text cells, every failure one RowsError line (file, row, column)."""

    def __init__(self, path: Path, columns: tuple[str, ...]):
        self.path, self.columns = path, columns

    def fail(self, why: str, row: int | None = None, column: str | None = None):
        where = "".join((f": row {row}" if row is not None else "", f": column {column}" if column else ""))
        raise RowsError(f"{self.path}{where}: {why}")

    def rows(self) -> list[dict[str, str]]:
        if not self.path.is_file():
            self.fail("no such file")
        try:
            with open(self.path, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                if header is None:
                    self.fail("empty file (no header)")
                header = [h.strip() for h in header]
                for c in self.columns:
                    if c not in header:
                        self.fail("missing from the header", column=c)
                for c in header:
                    if c not in self.columns:
                        self.fail(f"unknown column (expected: {', '.join(self.columns)})", column=c or "''")
                if len(set(header)) != len(header):
                    dup = next(c for c in header if header.count(c) > 1)
                    self.fail("appears twice in the header", column=dup)
                out = []
                for i, cells in enumerate(reader, 1):
                    if not any(c.strip() for c in cells):
                        self.fail("empty row", row=i)
                    if len(cells) > len(header):
                        self.fail(f"{len(cells)} values for {len(header)} columns", row=i,
                                  column=f"#{len(header) + 1} (not in the header)")
                    rec = {}
                    for j, c in enumerate(header):
                        v = cells[j].strip() if j < len(cells) else ""
                        if v == "":
                            self.fail("missing value", row=i, column=c)
                        rec[c] = v
                    out.append(rec)
        except UnicodeDecodeError:
            self.fail("not UTF-8 text")
        except csv.Error as exc:
            self.fail(f"not valid CSV: {exc}")
        if not out:
            self.fail("no data rows")
        return out

    # -------------------------------------------------------------- cells
    def number(self, rec: dict, i: int, col: str) -> float:
        v = rec[col]
        try:
            x = float(v)
        except ValueError:
            self.fail(f"not a number: {v!r}", i, col)
        if not math.isfinite(x):
            self.fail(f"not a finite number: {v!r}", i, col)
        return x

    def positive(self, rec: dict, i: int, col: str, upper: float = math.inf, unit: str = "") -> float:
        x = self.number(rec, i, col)
        if not (0 < x <= upper):
            bound = f"> 0 and <= {upper:g}{unit}" if math.isfinite(upper) else "> 0"
            self.fail(f"out of range: {rec[col]!r} (must be {bound})", i, col)
        return x

    def pct(self, rec: dict, i: int, col: str) -> float:
        x = self.number(rec, i, col)
        if not (0 <= x <= 100):
            self.fail(f"out of range: {rec[col]!r} (a percentage, 0-100)", i, col)
        return x

    def batch_size(self, rec: dict, i: int, col: str) -> int:
        v = rec[col]
        try:
            b = int(v)
        except ValueError:
            self.fail(f"not an integer: {v!r}", i, col)
        if b < 1:
            self.fail(f"out of range: {v!r} (a batch size >= 1)", i, col)
        return b

    def amp(self, rec: dict, i: int, col: str) -> bool:
        v = rec[col]
        if v not in ("0", "1"):
            self.fail(f"must be 0 or 1, got {v!r}", i, col)
        return v == "1"

    def family(self, rec: dict, i: int, model_col: str, dataset_col: str) -> tuple[str, str]:
        model, dataset = rec[model_col], rec[dataset_col]
        datasets = {d for m, d in JOBS if m == model}
        if not datasets:
            self.fail(f"unknown family {model!r} (known: {', '.join(sorted({m for m, _ in JOBS}))})", i, model_col)
        if dataset not in datasets:
            self.fail(f"{model} was measured on {', '.join(sorted(datasets))}, not {dataset!r}", i, dataset_col)
        return (model, dataset)


def singles(root: str | Path) -> list[Single]:
    """The 35 solo runs of ``root``/singles.csv, checked (``root``: the lucid-rtx3090 folder)."""
    r = _Reader(Path(root) / SINGLES_FILE, SINGLES_COLUMNS)
    out: list[Single] = []
    seen: dict[tuple, int] = {}
    for i, rec in enumerate(r.rows(), 1):
        s = Single(family=r.family(rec, i, "model", "dataset"), batch_size=r.batch_size(rec, i, "batch_size"),
                   amp=r.amp(rec, i, "amp"), speed_samples_per_s=r.positive(rec, i, "speed_samples_per_s"),
                   gpu_util_pct=r.pct(rec, i, "gpu_util_pct"),
                   memory_used_mib=r.positive(rec, i, "memory_used_mib", RTX3090_MEMORY_MIB, " MiB, the board's"),
                   row=i)
        if s.key in seen:
            r.fail(f"the run {s.model} {s.family[1]} bs {s.batch_size} amp {int(s.amp)} repeats row {seen[s.key]}",
                   i, "model")
        seen[s.key] = i
        out.append(s)
    return out


def pairs(root: str | Path, solo: list[Single] | None = None) -> list[Pair]:
    """The 335 co-located pairs of ``root``/pairs.csv, each with its two solo runs (from
    ``solo``, else ``root``/singles.csv); a pair whose job has no solo run is an error."""
    solo = singles(root) if solo is None else solo
    by_key = {s.key: s for s in solo}
    r = _Reader(Path(root) / PAIRS_FILE, PAIRS_COLUMNS)
    out: list[Pair] = []
    for i, rec in enumerate(r.rows(), 1):
        sides = []
        for n in ("1", "2"):
            fam = r.family(rec, i, f"model{n}", f"dataset{n}")
            b, amp = r.batch_size(rec, i, f"batch_size{n}"), r.amp(rec, i, f"amp{n}")
            speed = r.positive(rec, i, f"speed{n}_vs_solo", MAX_SPEED_VS_SOLO)
            s = by_key.get((*fam, b, amp))
            if s is None:
                r.fail(f"no solo run of {fam[0]} {fam[1]} bs {b} amp {int(amp)} in {SINGLES_FILE}", i, f"model{n}")
            sides.append((fam, b, amp, speed, s))
        (f1, b1, a1, v1, s1), (f2, b2, a2, v2, s2) = sides
        out.append(Pair(family1=f1, batch_size1=b1, amp1=a1, speed1_vs_solo=v1,
                        family2=f2, batch_size2=b2, amp2=a2, speed2_vs_solo=v2,
                        gpu_util_pct=r.pct(rec, i, "gpu_util_pct"),
                        memory_used_max_mib=r.positive(rec, i, "memory_used_max_mib", RTX3090_MEMORY_MIB,
                                                       " MiB, the board's"),
                        solo1=s1, solo2=s2, row=i))
    return out


# ------------------------------------------------------------------------------ measured rows

def single_records(root: str | Path) -> list[dict]:
    """The solo runs as measured-row records (:func:`gpucast.learn.rows.from_records`): the job
    spec as JSON, util, memory and the step time (batch / speed; none for TD3, whose speed counts
    episodes). Group: the family (the model column)."""
    out = []
    for s in singles(root):
        rec = {"job": s.job().to_json(), "gpu": GPU, "group": family_of(s), "label": s.label,
               "util_pct": s.gpu_util_pct, "memory_mib": s.memory_used_mib}
        if s.step_time_comparable:
            rec["step_time_s"] = s.step_time_s
        out.append(rec)
    return out


def single_rows(root: str | Path) -> list[MeasuredRow]:
    """The solo runs as validated measured rows (``root``: the lucid-rtx3090 folder)."""
    return from_records(single_records(root), str(Path(root) / SINGLES_FILE))
