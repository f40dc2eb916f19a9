"""Measured rows: the one table format gpucast learns from, and its readers.

A row is one run of one job on one GPU type, with whatever was measured of it. Files are CSV,
Parquet or JSON Lines (one object per line); column names are the same in all three:

============================  =========  ===========================================================
column                        required   meaning
============================  =========  ===========================================================
``gpu``                       yes        gpucast catalog name (``gpucast gpus``), e.g. ``a100-40gb``
``job``                       one of     the job spec as JSON (``Job.to_json()``; zoo, ``hf:``, ``onnx:``)
``model``                     these two  or the job's fields flat: ``model`` and any of ``batch_size``,
                                         ``seq_len``, ``input_shape`` (``3,224,224``), ``precision``,
                                         ``mode``, ``optimizer``, ``gpus``, ``input_pipeline_s``,
                                         ``data.<field>``, ``loop.<field>``, ``stack.<field>``,
                                         ``serve.<field>``, ``parallel.<field>``
``util_pct``                  at least   mean ``utilization.gpu`` over the steady state, 0-100
``memory_mib``                one of     peak memory of the process as nvidia-smi shows it (MiB)
``memory_bytes``              these      the same in bytes
``step_time_s``                          mean step time (seconds)
``latency_s``                            a ``mode: serve`` job's measured serving figures: a static
``ttft_s``, ``tpot_s``                   batch's wall time, mean time to first token, mean time per
``output_tokens_per_s``                  output token, generated tokens per second (the job's
                                         ``serve`` group says engine, lengths and load)
``group``                     no         the unit held out together in cross-validation (default:
                                         the model name): an architecture, a job type
``label``                     no         free text that names the run in messages
============================  =========  ===========================================================

A ``model`` of the form ``mlp:<inputs>:<w1>;<w2>;...`` is a plain MLP: ``nn.Sequential`` of
``Linear`` layers of those widths with ReLU between them, trained with cross-entropy (the form
GPUMemNet's runs are written in); it needs no module code in the file.

Readers for other shapes of the same facts go through the same validation (:func:`from_records`):

* gpucast's own dataset (``gpucast profile``: a Parquet file or folder with ``job_json``,
  ``gpu_name``, ``status``...): its ``ok`` solo runs;
* the measured sets of ``data/measured`` in the repository (:mod:`gpucast.learn.shared_records`):
  GPUMemNet's ``runs.csv`` and Gavel's ``simulation_throughputs.json``, recognised by their columns
  and name.

A malformed row is a :class:`RowsError` naming the file, the row (1-based, data rows) and the
column. Nothing here predicts or fits.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from gpucast.job import Job, JobError

JOB_COLUMNS = ("model", "batch_size", "seq_len", "input_shape", "precision", "mode", "optimizer", "gpus",
               "input_pipeline_s")
SURROUNDING_GROUPS = ("data", "loop", "stack", "serve", "parallel")
MEASURED_COLUMNS = ("util_pct", "memory_mib", "memory_bytes", "step_time_s")
# What a serving run measures (gpucast.learn.serving_fit fits an engine's host time on them).
SERVING_COLUMNS = ("latency_s", "ttft_s", "tpot_s", "output_tokens_per_s")
OTHER_COLUMNS = ("gpu", "job", "group", "label")
COLUMNS = OTHER_COLUMNS + JOB_COLUMNS + MEASURED_COLUMNS + SERVING_COLUMNS
FORMATS = (".csv", ".parquet", ".jsonl")


class RowsError(ValueError):
    """A measured-row file or row is malformed; one line naming file, row and column."""


@dataclass(frozen=True)
class MeasuredRow:
    job: Job
    gpu: str
    group: str                      # held-out unit: architecture / job type
    label: str
    util_pct: float | None = None
    memory_mib: float | None = None
    step_time_s: float | None = None
    source: str = ""                # the file it came from
    serving: tuple = ()             # (column, value) of SERVING_COLUMNS a serving run measured


# ------------------------------------------------------------------------------ reading files

def read_rows(paths: Iterable[str | Path]) -> list[MeasuredRow]:
    """Every row of every file (CSV/Parquet/JSONL, a gpucast dataset, or a shared set)."""
    out: list[MeasuredRow] = []
    for p in paths:
        out.extend(read_file(p))
    return out


def read_file(path: str | Path) -> list[MeasuredRow]:
    path = Path(path)
    if not path.exists():
        raise RowsError(f"{path}: no such file")
    from gpucast.learn import shared_records

    if path.name == "simulation_throughputs.json":
        return from_records(shared_records.gavel_records(path), str(path))
    if path.is_dir() or path.suffix.lower() == ".parquet":
        records = _read_parquet(path)
        if records and "job_json" in records[0]:
            return from_records(_profile_records(records), str(path))
        return from_records(records, str(path))
    suffix = path.suffix.lower()
    if suffix == ".csv":
        records = _read_csv(path)
        if records and "linear_widths" in records[0]:
            return from_records(shared_records.mlp_records_of(records), str(path))
        return from_records(records, str(path))
    if suffix in (".jsonl", ".ndjson"):
        return from_records(_read_jsonl(path), str(path))
    raise RowsError(f"{path}: unknown row file format {suffix or '(none)'!r} (use {', '.join(FORMATS)})")


def _read_csv(path: Path) -> list[dict]:
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = []
            for r in reader:
                if None in r:
                    raise RowsError(f"{path}: row {len(rows) + 1}: more values than the header has columns")
                rows.append({k.strip(): _parse_text(v) for k, v in r.items() if k is not None})
            return rows
    except UnicodeDecodeError:
        raise RowsError(f"{path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise RowsError(f"{path}: not valid CSV: {exc}") from None


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RowsError(f"{path}: row {i}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise RowsError(f"{path}: row {i}: must be a JSON object, got {type(obj).__name__}")
            rows.append(obj)
    return rows


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow.ArrowInvalid and friends
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RowsError(f"{path}: not a readable Parquet file or dataset: {first}") from None
    return table.to_pylist()


def _profile_records(records: list[dict]) -> list[dict]:
    """gpucast's own dataset (profile/schema.py): the ok solo runs, with the process's memory."""
    out = []
    for r in records:
        if r.get("status") != "ok" or r.get("kind", "solo") != "solo":
            continue
        mem = r.get("proc_mem_max_bytes") or r.get("mem_used_max_bytes")
        out.append({"job": r.get("job_json"), "gpu": r.get("gpu_name"), "util_pct": r.get("util_mean_pct"),
                    "memory_bytes": mem, "step_time_s": r.get("step_time_mean_s"), "group": r.get("model"),
                    "label": f"run {r.get('run_id')}"})
    return out


def _parse_text(v):
    """A CSV cell as the value it spells: empty -> None, true/false, integers, floats, else text."""
    if v is None:
        return None
    v = v.strip()
    if v == "":
        return None
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


# ------------------------------------------------------------------------------ records -> rows

def from_records(records: Iterable[dict], source: str = "rows") -> list[MeasuredRow]:
    """Validated rows from mappings of the columns above (every reader ends here)."""
    out = []
    for i, rec in enumerate(records, 1):
        out.append(_row(rec, i, source))
    if not out:
        raise RowsError(f"{source}: no measured rows")
    return out


def _fail(source: str, i: int, column: str, why: str):
    raise RowsError(f"{source}: row {i} column {column!r}: {why}")


def _row(rec: dict, i: int, source: str) -> MeasuredRow:
    from gpucast.hardware import get_gpu

    rec = {k: v for k, v in rec.items() if not _missing(v)}
    known = set(COLUMNS)
    for k in rec:
        if k not in known and k.split(".", 1)[0] not in SURROUNDING_GROUPS:
            _fail(source, i, k, f"unknown column (known: {', '.join(COLUMNS)}, "
                                f"{'/'.join(g + '.' for g in SURROUNDING_GROUPS)}<field>)")
    gpu = rec.get("gpu")
    if not isinstance(gpu, str):
        _fail(source, i, "gpu", "required: a gpucast GPU name" if gpu is None else f"must be a GPU name, got {gpu!r}")
    try:
        gpu = get_gpu(gpu).name
    except (KeyError, ValueError) as exc:
        _fail(source, i, "gpu", str(exc).strip("'\""))
    job = _job(rec, i, source)
    measured = {}
    for col, lo, hi in (("util_pct", 0.0, 100.0), ("memory_mib", 0.0, math.inf), ("memory_bytes", 0.0, math.inf),
                        ("step_time_s", 0.0, math.inf)):
        if col not in rec:
            continue
        v = rec[col]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            _fail(source, i, col, f"must be a number, got {v!r}")
        if not (lo <= v <= hi) or (col != "util_pct" and v <= 0):
            _fail(source, i, col, f"out of range: {v!r}" + (" (0-100)" if col == "util_pct" else " (> 0)"))
        measured[col] = float(v)
    if "memory_bytes" in measured:
        if "memory_mib" in measured:
            _fail(source, i, "memory_bytes", "give memory_mib or memory_bytes, not both")
        measured["memory_mib"] = measured.pop("memory_bytes") / 2**20
    serving = []
    for col in SERVING_COLUMNS:
        if col not in rec:
            continue
        v = rec[col]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            _fail(source, i, col, f"must be a positive number, got {v!r}")
        serving.append((col, float(v)))
    if job.mode == "serve":
        if measured:
            _fail(source, i, next(iter(measured)), "a serve job's row measures the serving run: "
                                                   f"{', '.join(SERVING_COLUMNS)}")
        if not serving:
            _fail(source, i, "latency_s", f"a serve job's row needs one of {', '.join(SERVING_COLUMNS)}")
    elif serving:
        _fail(source, i, serving[0][0], "serving figures need a job of mode 'serve'")
    if not measured and not serving:
        _fail(source, i, "util_pct", "a row needs at least one measurement (util_pct, memory_mib or "
                                     "memory_bytes, step_time_s; a serve job's latency_s, ttft_s, tpot_s, "
                                     "output_tokens_per_s)")
    group = rec.get("group")
    if group is None:  # the model: a module job's name without its "module:" prefix
        group = job.model.removeprefix("module:")
    return MeasuredRow(job=job, gpu=gpu, group=str(group), label=str(rec.get("label", f"row {i}")), source=source,
                       util_pct=measured.get("util_pct"), memory_mib=measured.get("memory_mib"),
                       step_time_s=measured.get("step_time_s"), serving=tuple(serving))


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _job(rec: dict, i: int, source: str) -> Job:
    if "job" in rec:
        if any(k in rec for k in JOB_COLUMNS) or any("." in k for k in rec):
            _fail(source, i, "job", "give the job as 'job' JSON or as flat job columns, not both")
        spec = rec["job"]
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except json.JSONDecodeError as exc:
                _fail(source, i, "job", f"not valid JSON ({exc.msg})")
        try:
            return Job.from_dict(spec)
        except (JobError, TypeError) as exc:
            _fail(source, i, "job", str(exc))
    if "model" not in rec:
        _fail(source, i, "model", "required (or a 'job' column with the spec as JSON)")
    fields_: dict = {}
    for k, v in rec.items():
        if k in JOB_COLUMNS:
            fields_[k] = v
        elif "." in k:
            group, name = k.split(".", 1)
            fields_.setdefault(group, {})[name] = v
    if isinstance(fields_.get("input_shape"), str):
        try:
            fields_["input_shape"] = tuple(int(x) for x in fields_["input_shape"].replace("x", ",").split(","))
        except ValueError:
            _fail(source, i, "input_shape", f"must be integers separated by commas, got {rec['input_shape']!r}")
    model = str(fields_.pop("model"))
    try:
        if model.startswith("mlp:"):
            return _mlp_job(model, fields_)
        return Job(model=model, **fields_)
    except JobError as exc:
        msg = str(exc)
        col = msg.split("'")[1] if msg.startswith("field '") else "model"
        _fail(source, i, col, msg)
    except (TypeError, ValueError) as exc:
        _fail(source, i, "model", str(exc))


def _mlp_job(model: str, fields_: dict) -> Job:
    """``mlp:<inputs>:<w1>;<w2>;...`` as a module job (the MLP, its random inputs, cross-entropy)."""
    try:
        _, inputs, widths = model.split(":", 2)
        n_in = int(inputs)
        ws = tuple(int(w) for w in widths.replace(",", ";").split(";"))
        if n_in <= 0 or not ws or min(ws) <= 0:
            raise ValueError
    except ValueError:
        raise JobError(f"field 'model': {model!r} is not mlp:<inputs>:<w1>;<w2>;... with positive integers") from None
    extra = {k: v for k, v in fields_.items() if k not in ("batch_size",)}
    unknown = set(extra) - {"optimizer", "precision", "mode", "input_pipeline_s", "gpus", "data", "loop", "stack"}
    if unknown:
        raise JobError(f"field {sorted(unknown)[0]!r} is not a field of an mlp: job")
    model_fn, input_fn = _mlp_factories(n_in, ws)
    return Job.from_module(model_fn, input_fn, batch_size=int(fields_.get("batch_size", 32)), loss_fn=_ce_loss,
                           name=model, **{"optimizer": "adam", **extra})


def _mlp_factories(input_size: int, widths: tuple[int, ...]):
    def model_fn():
        import torch.nn as nn

        layers, prev = [], input_size
        for i, w in enumerate(widths):
            layers.append(nn.Linear(prev, w))
            if i < len(widths) - 1:
                layers.append(nn.ReLU())
            prev = w
        return nn.Sequential(*layers)

    def input_fn(batch_size: int):
        import torch

        return (torch.randn(batch_size, input_size),)

    return model_fn, input_fn


def _ce_loss(output, inputs):
    import torch
    import torch.nn.functional as F

    return F.cross_entropy(output, torch.randint(0, output.shape[-1], output.shape[:1], device=output.device))
