"""gpucast's predicted step time against Gavel's measured solo training throughputs.

This is a check, not a target: nothing here tunes gpucast. It reads measured numbers, converts
them to step times without touching them, predicts the same jobs with ``gpucast.predict`` and
reports the error.

The measured data
-----------------
``simulation_throughputs.json`` from Gavel (Narayanan et al., "Heterogeneity-Aware Cluster
Scheduling Policies for Deep Learning Workloads", OSDI 2020; github.com/stanford-futuredata/gavel,
MIT licence, LICENSE beside the file). Structure, as Gavel's profiler writes it
(``scheduler/scripts/profiling/measure_throughput.py``)::

    {gpu: {"(job type, scale factor)": {"null": solo steps/s,
                                        "(other job type, sf)": [steps/s, other's steps/s], ...}}}

* ``gpu`` is ``k80``, ``p100``, ``v100`` (and ``*_unconsolidated`` variants, which differ only for
  multi-GPU scale factors; they are not used).
* The scale factor is the number of GPUs of a data-parallel job; we keep **1** only.
* ``"null"`` is the job measured alone (the profiler's partner is ``None``, which JSON writes as
  ``null``); every other entry is a co-located pair and is ignored.
* Units: the profiler stores ``num_steps / execution_time``, i.e. **training iterations per
  second** of wall clock, where a step is one ``next()`` of the job's data loader (one
  optimizer step; for A3C one 20-step rollout of worker 0). We convert with
  ``step_time_ms = 1000 / steps_per_s`` and nothing else.

Measured throughput is the wall clock of the whole training loop: real data loading, Python,
``loss.item()`` syncs, logging. Each job is given its script's loader and loop
(``gpucast.cluster.gavel.GAVEL_SURROUNDINGS``: workers, pinning, per-step ``.item()`` calls,
progress bars); the loader constants are the packaged defaults, whose Gavel-specific part was fit
on these same rows (``scripts/fit_environment.py``), so this table is in-sample for those
constants: the held-out figures are ``benchmarks/accuracy.py``'s.

The mapping (Gavel job type -> gpucast job)
-------------------------------------------
Evidence comes from Gavel's own code: ``scheduler/job_table.py`` (command lines, batch sizes)
and ``workloads/pytorch/*`` (models, optimizers, data). Each :class:`Mapping` states what is
established and what is not. Where gpucast's zoo cannot express Gavel's model (a different
architecture or vocabulary), the closest zoo entry is still the headline mapping, and
``--variants`` (on by default) adds a supplementary table with a module job
(``Job.from_module``, defined in ``benchmarks/gavel_variants.py``) that follows Gavel's
definition; variants are never mixed into the headline summary.

GPU names: Gavel ``k80`` -> ``k80`` (one GK210 die, which is what a CUDA device / one Gavel
worker GPU is), ``p100`` -> ``p100`` (the PCIe 16GB board; whether Gavel's P100s were PCIe or
SXM2 is not established here), ``v100`` -> ``v100-16gb`` (SXM2 16GB; AWS p3 instances carry those;
not verified beyond that).

    .venv/bin/python benchmarks/gavel_compare.py [--data PATH] [--json PATH] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT / "data" / "measured" / "gavel" / "simulation_throughputs.json"
GAVEL_GPUS = {"k80": "k80", "p100": "p100", "v100": "v100-16gb"}


class DataMissing(FileNotFoundError):
    """The measured data file is not where we were told to look."""


# ----------------------------------------------------------------------------- measurements

@dataclass(frozen=True)
class Measurement:
    """One solo, single-GPU measurement, exactly as the file has it."""

    job_type: str          # "ResNet-18", "A3C", ...
    batch_size: int | None  # from "(batch size N)"; None where the key has no batch size
    gavel_gpu: str          # "k80", "p100", "v100"
    steps_per_s: float      # the file's "null" value, untouched
    key: str                # the file's key, e.g. "('ResNet-18 (batch size 16)', 1)"

    @property
    def step_time_s(self) -> float:
        return 1.0 / self.steps_per_s


def load_measurements(path: str | Path = DEFAULT_DATA) -> list[Measurement]:
    """Every solo (``null`` partner), scale-factor-1 measurement on k80, p100 and v100.

    Entries whose solo throughput is not a positive finite number (a failed profiling run) are
    skipped; :func:`skipped_entries` lists them.
    """
    data = _read(path)
    out = []
    for gpu in GAVEL_GPUS:
        for key, entry in data.get(gpu, {}).items():
            parsed = _parse_key(key)
            if parsed is None or parsed[1] != 1 or not isinstance(entry, dict) or "null" not in entry:
                continue
            tput = entry["null"]
            if not isinstance(tput, (int, float)) or not math.isfinite(tput) or tput <= 0:
                continue
            name, batch = _split_job_type(parsed[0])
            out.append(Measurement(name, batch, gpu, float(tput), key))
    return out


def skipped_entries(path: str | Path = DEFAULT_DATA) -> list[str]:
    """Solo scale-factor-1 entries left out because their throughput is not positive."""
    data = _read(path)
    bad = []
    for gpu in GAVEL_GPUS:
        for key, entry in data.get(gpu, {}).items():
            parsed = _parse_key(key)
            if parsed and parsed[1] == 1 and isinstance(entry, dict) and "null" in entry:
                t = entry["null"]
                if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
                    bad.append(f"{gpu} {key}: {t!r}")
    return bad


def _read(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise DataMissing(f"measured data not found: {path} (Gavel's simulation_throughputs.json; "
                          f"pass --data PATH)")
    with open(path) as f:
        return json.load(f)


from gpucast.cluster.gavel import MAPPING, Mapping  # noqa: E402,F401
from gpucast.cluster.gavel import parse_key as _parse_key, split_job_type as _split_job_type  # noqa: E402
from gpucast.cluster.gavel import GAVEL_SURROUNDINGS  # noqa: E402


# ----------------------------------------------------------------------------- comparison

@dataclass
class Row:
    job_type: str
    batch_size: int | None
    gavel_gpu: str
    gpu: str
    key: str
    measured_steps_per_s: float
    measured_ms: float
    predicted_ms: float
    ratio: float          # predicted / measured
    abs_pct_error: float  # |pred - meas| / meas * 100
    log_error: float      # ln(pred / meas)
    model: str
    job: dict
    bottleneck: str
    gpu_util_pct: float
    fits_in_memory: bool
    variant: str = ""     # "" for the headline zoo mapping, else the variant's name


def _row(m: Measurement, job_fields: dict, pred, variant: str = "") -> Row:
    meas_ms = 1000.0 / m.steps_per_s
    pred_ms = pred.step_time_s * 1000.0
    return Row(
        job_type=m.job_type, batch_size=m.batch_size, gavel_gpu=m.gavel_gpu, gpu=pred.gpu, key=m.key,
        measured_steps_per_s=m.steps_per_s, measured_ms=meas_ms, predicted_ms=pred_ms,
        ratio=pred_ms / meas_ms, abs_pct_error=abs(pred_ms - meas_ms) / meas_ms * 100.0,
        log_error=math.log(pred_ms / meas_ms), model=job_fields.get("model", "?"),
        job={k: (list(v) if isinstance(v, tuple) else v) for k, v in job_fields.items()},
        bottleneck=pred.bottleneck, gpu_util_pct=pred.gpu_util_pct,
        fits_in_memory=pred.fits_in_memory, variant=variant)


def compare(measurements: list[Measurement], mapping: dict[str, Mapping] | None = None,
            select: Callable[[Measurement], bool] | None = None,
            progress: Callable[[str], None] | None = None) -> tuple[list[Row], list[str]]:
    """Predict every mapped measurement. Returns (rows, notes on measurements left out)."""
    import gpucast

    mapping = MAPPING if mapping is None else mapping
    rows, left_out = [], []
    for m in measurements:
        if select is not None and not select(m):
            continue
        mp = mapping.get(m.job_type)
        if mp is None:
            left_out.append(f"{m.gavel_gpu} {m.key}: no gpucast mapping for job type {m.job_type!r}")
            continue
        data, loop = GAVEL_SURROUNDINGS[m.job_type]
        fields = {**mp.job(m.batch_size), "data": data.to_dict(), "loop": loop.to_dict()}
        if progress:
            progress(f"{m.job_type} b{m.batch_size} on {GAVEL_GPUS[m.gavel_gpu]}")
        pred = gpucast.predict(gpucast.Job(**fields), GAVEL_GPUS[m.gavel_gpu])
        rows.append(_row(m, fields, pred))
    return rows, left_out


def summarize(rows: list[Row]) -> dict:
    """MdAPE, share within 2x and RMSLE, overall, per GPU and per job type.

    RMSLE here is sqrt(mean(ln(predicted / measured)^2)) on step times (natural log, no +1:
    step times are far below 1 s, where log1p would flatten the error).
    """
    def stats(rs: list[Row]) -> dict:
        if not rs:
            return {"n": 0}
        logs = [r.log_error for r in rs]
        return {
            "n": len(rs),
            "mdape_pct": statistics.median(r.abs_pct_error for r in rs),
            "within_2x": sum(0.5 <= r.ratio <= 2.0 for r in rs) / len(rs),
            "rmsle": math.sqrt(sum(x * x for x in logs) / len(logs)),
            "median_ratio": statistics.median(r.ratio for r in rs),
            "geomean_ratio": math.exp(sum(logs) / len(logs)),
            "min_ratio": min(r.ratio for r in rs),
            "max_ratio": max(r.ratio for r in rs),
        }

    return {
        "overall": stats(rows),
        "per_gpu": {g: stats([r for r in rows if r.gavel_gpu == g]) for g in GAVEL_GPUS
                    if any(r.gavel_gpu == g for r in rows)},
        "per_job_type": {j: stats([r for r in rows if r.job_type == j])
                         for j in dict.fromkeys(r.job_type for r in rows)},
    }


# ----------------------------------------------------------------------------- variants

# Module jobs that follow Gavel's definitions where the zoo cannot (supplementary only): defined in
# gavel_variants.py beside this script (found however this script is loaded: run, or imported by a test).
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))
from gavel_variants import VARIANTS, Variant  # noqa: E402,F401


def compare_variants(measurements: list[Measurement], variants=VARIANTS,
                     progress: Callable[[str], None] | None = None) -> list[Row]:
    import gpucast

    rows = []
    for v in variants:
        jobs: dict[int | None, object] = {}
        for m in measurements:
            if m.job_type != v.job_type:
                continue
            if m.batch_size not in jobs:
                data, loop = GAVEL_SURROUNDINGS[v.job_type]
                jobs[m.batch_size] = gpucast.Job.from_module(
                    v.model_fn, v.input_fn, batch_size=v.batch(m.batch_size), optimizer=v.optimizer,
                    loss_fn=v.loss_fn, name=f"gavel_compare:{v.name}", data=data, loop=loop)
            if progress:
                progress(f"variant {v.name} b{m.batch_size} on {GAVEL_GPUS[m.gavel_gpu]}")
            pred = gpucast.predict(jobs[m.batch_size], GAVEL_GPUS[m.gavel_gpu])
            fields = {"model": f"module:{v.name}", "batch_size": v.batch(m.batch_size),
                      "optimizer": v.optimizer}
            rows.append(_row(m, fields, pred, variant=v.name))
    return rows


# ----------------------------------------------------------------------------- reporting

def _fmt_batch(r: Row) -> str:
    return "-" if r.batch_size is None else str(r.batch_size)


def _stats_line(name: str, s: dict) -> str:
    if not s.get("n"):
        return f"| {name} | 0 | | | | | |"
    return (f"| {name} | {s['n']} | {s['mdape_pct']:.0f}% | {s['within_2x'] * 100:.0f}% "
            f"| {s['rmsle']:.2f} | {s['geomean_ratio']:.2f} | {s['min_ratio']:.2f} - {s['max_ratio']:.2f} |")


def markdown(rows: list[Row], summary: dict, source: str, variant_rows: list[Row] | None = None,
             left_out: list[str] | None = None, model_version: str = "?") -> str:
    out = [
        "## gpucast vs Gavel's measured solo throughputs",
        "",
        f"Measured: `{source}` — Gavel (Narayanan et al., OSDI 2020, MIT licence), "
        "solo (`null` partner), scale factor 1, steps/s as the file has them; measured ms = "
        "1000 / steps/s. Predicted: `gpucast.predict` "
        f"({model_version}, each job type with its script's loader and loop, fp32). ratio = predicted / measured.",
        "",
        "| job type | batch | GPU | gpucast job | measured steps/s | measured ms | predicted ms "
        "| ratio | bottleneck |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        extra = ", ".join(f"{k}={v}" for k, v in r.job.items() if k not in ("model", "batch_size", "data", "loop"))
        out.append(f"| {r.job_type} | {_fmt_batch(r)} | {r.gpu} | {r.model} b{r.job['batch_size']}"
                   f"{', ' + extra if extra else ''} | {r.measured_steps_per_s:.3f} | {r.measured_ms:.1f} "
                   f"| {r.predicted_ms:.1f} | {r.ratio:.2f} | {r.bottleneck} |")
    oom = [r for r in rows + (variant_rows or []) if not r.fits_in_memory]
    if oom:
        out += ["", "gpucast predicts out-of-memory where Gavel measured the job running (a memory "
                "over-prediction; the step time is still compared): " + "; ".join(
                    f"{r.variant or r.model} b{r.job['batch_size']} on {r.gpu}" for r in oom) + "."]
    out += ["", "### Summary (headline zoo mapping)", "",
            "MdAPE = median |pred - meas| / meas; within 2x = 0.5 <= ratio <= 2; RMSLE = "
            "sqrt(mean(ln(pred/meas)^2)); geo-mean ratio < 1 means gpucast predicts faster steps "
            "than measured.", "",
            "| slice | n | MdAPE | within 2x | RMSLE | geo-mean ratio | ratio range |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
            _stats_line("overall", summary["overall"])]
    out += [_stats_line(f"GPU {GAVEL_GPUS[g]}", s) for g, s in summary["per_gpu"].items()]
    out += [_stats_line(j, s) for j, s in summary["per_job_type"].items()]
    if variant_rows:
        vs = summarize(variant_rows)
        out += ["", "### Supplementary: module variants that follow Gavel's model definitions",
                "", "Not part of the headline numbers; each replaces a zoo entry whose architecture "
                "or vocabulary differs from Gavel's (see the mapping notes).", "",
                "| variant | batch | GPU | measured ms | predicted ms | ratio | zoo-mapping ratio |",
                "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
        zoo_ratio = {(r.job_type, r.batch_size, r.gavel_gpu): r.ratio for r in rows}
        for r in variant_rows:
            z = zoo_ratio.get((r.job_type, r.batch_size, r.gavel_gpu))
            out.append(f"| {r.variant} | {_fmt_batch(r)} | {r.gpu} | {r.measured_ms:.1f} "
                       f"| {r.predicted_ms:.1f} | {r.ratio:.2f} | {'' if z is None else f'{z:.2f}'} |")
        out += ["", "| slice | n | MdAPE | within 2x | RMSLE | geo-mean ratio | ratio range |",
                "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        out += [_stats_line(j, s) for j, s in vs["per_job_type"].items()]
        merged = _substitute(rows, variant_rows)
        ms = summarize(merged)
        out += ["", "With the variants substituted for their zoo rows (all job types):", "",
                "| slice | n | MdAPE | within 2x | RMSLE | geo-mean ratio | ratio range |",
                "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
                _stats_line("overall", ms["overall"])]
        out += [_stats_line(f"GPU {GAVEL_GPUS[g]}", s) for g, s in ms["per_gpu"].items()]
    out += ["", "### Mapping and its evidence", ""]
    for name, mp in MAPPING.items():
        out.append(f"- **{name}** -> `{mp.model}` ({mp.fields_note}). {mp.evidence} "
                   f"*Not established / differs:* {mp.unknown}")
    if left_out:
        out += ["", "Left out:"] + [f"- {x}" for x in left_out]
    return "\n".join(out)


def _substitute(rows: list[Row], variant_rows: list[Row]) -> list[Row]:
    by_key = {(r.job_type, r.batch_size, r.gavel_gpu): r for r in variant_rows}
    return [by_key.get((r.job_type, r.batch_size, r.gavel_gpu), r) for r in rows]


def _shown(path) -> str:
    """``path`` as the report records it: relative to the repository root when inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else str(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DEFAULT_DATA),
                   help="Gavel's simulation_throughputs.json (default: data/measured/gavel/ in the repository)")
    p.add_argument("--json", metavar="PATH", help="write rows, summary and mapping as JSON")
    p.add_argument("--markdown", metavar="PATH", help="write the markdown report to a file")
    p.add_argument("--no-variants", dest="variants", action="store_false",
                   help="skip the supplementary module variants")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)

    try:
        measurements = load_measurements(args.data)
    except DataMissing as exc:
        print(f"gavel_compare: {exc}", file=sys.stderr)
        return 2
    import gpucast.api

    progress = None if args.quiet else (lambda s: print(f"  predicting {s}", file=sys.stderr))
    rows, left_out = compare(measurements, progress=progress)
    left_out += [f"{x} (not a positive throughput)" for x in skipped_entries(args.data)]
    variant_rows = compare_variants(measurements, progress=progress) if args.variants else []
    summary = summarize(rows)
    text = markdown(rows, summary, _shown(args.data), variant_rows, left_out, gpucast.api.MODEL_VERSION)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        doc = {
            "source": {"path": _shown(args.data), "what": "Gavel simulation_throughputs.json, solo "
                       "('null') entries at scale factor 1; steps per second as measured",
                       "licence": "MIT (Stanford Future Data Systems, 2020)"},
            "model_version": gpucast.api.MODEL_VERSION,
            "gpu_map": GAVEL_GPUS,
            "rows": [asdict(r) for r in rows],
            "summary": summary,
            "variant_rows": [asdict(r) for r in variant_rows],
            "variant_summary": summarize(variant_rows) if variant_rows else None,
            "summary_with_variants": summarize(_substitute(rows, variant_rows)) if variant_rows else None,
            "mapping": {k: {"model": v.model, "evidence": v.evidence, "unknown": v.unknown}
                        for k, v in MAPPING.items()},
            "left_out": left_out,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
