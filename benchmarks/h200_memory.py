"""Peak memory on our H200 runs, term by term: where nvidia-smi's figure and gpucast's part.

Every solo ``ok`` row of ``data/measurements/*.parquet`` (read as :mod:`benchmarks.h200_runs` reads
them) carries three measured figures beside the job: NVML's process memory (``proc_mem_max_bytes``,
what nvidia-smi shows), torch's ``max_memory_reserved`` and ``max_memory_allocated``. Their
differences split the measured peak into terms that gpucast predicts separately
(:mod:`gpucast.estimate.memory`):

* **outside the allocator** = NVML - reserved: the CUDA context with the kernel images the process
  loaded, and the libraries' own device memory (cuBLAS and cuDNN handles). In PyTorch >= 1.13 the
  cuBLAS workspaces (and from 2.x cuBLASLt's) are allocated through the caching allocator
  (``aten/src/ATen/cuda/CublasHandlePool.cpp``: ``getNewWorkspace`` calls
  ``CUDACachingAllocator::get()->allocate``; pytorch/pytorch#83461), so they are in ``reserved``,
  not here; cuDNN's workspaces always were (``Conv_v7.cpp``/``Conv_v8.cpp`` allocate them from it);
* **reserved**: the allocator's segments at their peak: tensors, the cuBLAS/cuBLASLt workspaces,
  cuDNN workspaces, rounding and fragmentation;
* **allocated**: the live blocks at the peak (tensors + cuBLAS workspaces + a workspace in use).

Each job is predicted once (host speed does not enter memory) with the stack the rows were
measured on (the row's ``torch_version`` and ``cuda_version``: 2.11 / 13.0), and once as
``benchmarks/h200_runs.py`` predicts it (the job as stored, gpucast's default stack), whose total
is the figure that benchmark reports.

The outside-the-allocator constants (``Environment.cuda_context_lazy_hopper_bytes``,
``cublas_handle_bytes``, ``cudnn_handle_bytes``) are fitted here, by least squares over the runs that
opened their worker process (:func:`mark_fresh`), and checked held out by family: each family's rows
predicted with the three refitted on the other families' runs.

    .venv/bin/python benchmarks/h200_memory.py [--out benchmarks/results]   (~2 minutes)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data" / "measurements"
RESULTS = REPO_ROOT / "benchmarks" / "results"
MIB = 2**20
WORST = 10
# Breakdown keys of gpucast.estimate.memory that NVML sees and the caching allocator does not.
OUTSIDE_ALLOCATOR = ("cuda_context", "cublas_handles", "cudnn_handles")
# Keys inside the allocator that the trace's own reserved/allocated peaks leave out.
LIBRARY_WORKSPACES = ("cublas_workspaces", "cudnn_workspaces", "workspaces")


def _h200_runs():
    spec = importlib.util.spec_from_file_location("h200_runs", Path(__file__).with_name("h200_runs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row_stack(row: dict):
    """The stack a row was measured on: its torch release (without the local build tag) and CUDA."""
    from gpucast.surroundings import Stack

    return Stack(torch=str(row["torch_version"]).split("+")[0], cuda=str(row["cuda_version"]))


def predict_row(row: dict, env=None) -> dict:
    """Measured and predicted terms of one row (bytes)."""
    from dataclasses import replace

    from gpucast import zoo
    from gpucast.api import explain
    from gpucast.job import Job
    from gpucast.profile.spec import as_run

    stored = as_run(Job.from_dict(json.loads(row["job_json"])))
    job = replace(stored, stack=row_stack(row) if stored.stack is None else stored.stack)
    ex = explain(job, row["gpu_name"], env=env)
    mem = ex.estimate.memory
    b = mem.breakdown
    outside = sum(b.get(k, 0) for k in OUTSIDE_ALLOCATOR)
    work = sum(b.get(k, 0) for k in LIBRARY_WORKSPACES)
    cublas_ws = b.get("cublas_workspaces")
    if cublas_ws is None:  # the breakdown before the terms were named: cuBLAS's part of "workspaces"
        from gpucast.estimate import memory as em

        cats = {o.category for o in ex.trace.ops}
        cublas_ws = em.cublas_workspace_bytes(ex.gpu, ex.estimate.prepared.cfg, job.mode) \
            if cats & {"matmul", "attention", "rnn"} else 0
    default_total = explain(stored, row["gpu_name"], env=env).prediction.memory_peak_bytes
    from gpucast.estimate.memory_context import GEMM_CATEGORIES, handles, uses_cudnn_op

    n_blas = handles(ex.trace, lambda o: o.category in GEMM_CATEGORIES)
    n_dnn = handles(ex.trace, uses_cudnn_op)
    return {
        "collection": row.get("collection"), "model": row["model"], "family": zoo.get(row["model"]).family,
        "batch_size": row["batch_size"], "precision": row["precision"], "mode": row["mode"],
        "started_at": row["started_at"],
        "measured_nvml": row["proc_mem_max_bytes"], "measured_reserved": row["torch_max_reserved_bytes"],
        "measured_allocated": row["torch_max_allocated_bytes"],
        "measured_outside": row["proc_mem_max_bytes"] - row["torch_max_reserved_bytes"],
        "predicted_total": mem.total_bytes, "predicted_total_default_stack": default_total,
        "predicted_outside": outside,
        "predicted_reserved": mem.total_bytes - outside,
        # the allocator replay's peak holds the cuBLAS workspaces; the older estimate's did not
        "predicted_allocated": mem.allocated_peak_bytes + (0 if "cublas_workspaces" in b else cublas_ws),
        "predicted_interval_high": ex.prediction.memory_interval[1],
        "predicted_trace_reserved": mem.reserved_peak_bytes, "predicted_workspaces": work,
        "cublas_handles": n_blas, "cudnn_handles": n_dnn,
        "breakdown": {k: int(v) for k, v in b.items()},
    }


def _mdape(pairs) -> float | None:
    e = [abs(p / m - 1) for p, m in pairs if m]
    return statistics.median(e) if e else None


def _ratio(pairs) -> float | None:
    e = [p / m for p, m in pairs if m]
    return statistics.median(e) if e else None


def summarise(recs: list[dict]) -> dict:
    tot = [(r["predicted_total"], r["measured_nvml"]) for r in recs]
    dflt = [(r["predicted_total_default_stack"], r["measured_nvml"]) for r in recs]
    return {
        "n": len(recs),
        "outside_measured_mib": statistics.median(r["measured_outside"] for r in recs) / MIB,
        "outside_predicted_mib": statistics.median(r["predicted_outside"] for r in recs) / MIB,
        "outside_error_mib": statistics.median(r["predicted_outside"] - r["measured_outside"] for r in recs) / MIB,
        "reserved_mdape": _mdape((r["predicted_reserved"], r["measured_reserved"]) for r in recs),
        "reserved_ratio": _ratio((r["predicted_reserved"], r["measured_reserved"]) for r in recs),
        "allocated_mdape": _mdape((r["predicted_allocated"], r["measured_allocated"]) for r in recs),
        "allocated_ratio": _ratio((r["predicted_allocated"], r["measured_allocated"]) for r in recs),
        "frag_measured": statistics.median(r["measured_reserved"] / r["measured_allocated"] for r in recs),
        "frag_predicted": statistics.median(r["predicted_reserved"] / max(r["predicted_allocated"], 1) for r in recs),
        "total_mdape": _mdape(tot), "total_ratio": _ratio(tot),
        "under_share": sum(p < m for p, m in tot) / len(tot),
        "interval_cover": sum(r["measured_nvml"] <= r["predicted_interval_high"] for r in recs) / len(recs),
        "total_mdape_default_stack": _mdape(dflt), "total_ratio_default_stack": _ratio(dflt),
    }


def _group(recs, key):
    out: dict = {}
    for r in recs:
        out.setdefault(key(r), []).append(r)
    return dict(sorted(out.items()))


def _prec(r) -> str:
    return r["precision"]


def render(recs: list[dict], holdout: dict | None) -> str:
    def pct(v):
        return "-" if v is None else f"{v:.0%}"

    def line(label, prec, s):
        return (f"| {label} | {prec} | {s['n']} | {s['outside_measured_mib']:.0f} | {s['outside_predicted_mib']:.0f} | "
                f"{pct(s['allocated_mdape'])} ({s['allocated_ratio']:.2f}) | {pct(s['reserved_mdape'])} "
                f"({s['reserved_ratio']:.2f}) | {s['frag_measured']:.2f} / {s['frag_predicted']:.2f} | "
                f"**{pct(s['total_mdape'])}** ({s['total_ratio']:.2f}) | {pct(s['under_share'])} | "
                f"{pct(s['interval_cover'])} | "
                f"{pct(s['total_mdape_default_stack'])} ({s['total_ratio_default_stack']:.2f}) |")

    lines = ["# Peak memory on an H200, term by term",
             "",
             "`.venv/bin/python benchmarks/h200_memory.py`: every solo run of `data/measurements/*.parquet` (h200-v1, "
             "torch 2.11.0+cu130, driver 580.159.04), predicted with the rows' stack (torch 2.11, CUDA 13.0). "
             "*Outside* = NVML process memory - torch's max reserved (context, kernel images, the libraries' own "
             "memory); *allocated* and *reserved* compare torch's peaks with the trace's plus the library "
             "workspaces PyTorch allocates through its caching allocator (cuBLAS/cuBLASLt, cuDNN). Cells: MdAPE "
             "(median predicted / measured). *Default stack*: the total as `benchmarks/h200_runs.py` predicts it "
             "(the job as stored, gpucast's default stack).",
             "",
             "| family | precision | runs | outside meas. (MiB, median) | outside pred. | allocated | reserved | "
             "reserved / allocated meas. / pred. | **total** | under-predicted | under the interval's top | "
             "total, default stack |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (fam, prec), rs in _group(recs, lambda r: (r["family"], _prec(r))).items():
        lines.append(line(fam, prec, summarise(rs)))
    for fam, rs in _group(recs, lambda r: r["family"]).items():
        lines.append(line(f"**{fam}**", "all", summarise(rs)))
    lines.append(line("**all**", "", summarise(recs)))
    fresh = [r["measured_outside"] / MIB for r in recs if r.get("fresh")]
    later = [r["measured_outside"] / MIB for r in recs if not r.get("fresh")]
    a = summarise(recs)
    lines += ["", "What the terms say:", "",
              f"* *Outside the allocator* is flat: {min(fresh):.0f}-{max(fresh):.0f} MiB in a fresh worker process "
              f"(630 MiB for the convolutional GANs, which run no cuBLAS), {min(later):.0f}-{max(later):.0f} MiB in "
              "later runs of a worker, which keeps the kernel images of the jobs before (a few MiB a run, "
              "`gpucast.profile.worker`); gpucast predicts a fresh process, so it reads a few tens of MiB low "
              f"there (median error {a['outside_error_mib']:.0f} MiB). The cuBLAS workspaces are not here: "
              "PyTorch >= 1.13 allocates them through its caching allocator (a 2-layer MLP's "
              "`max_memory_allocated` is 65-71 MiB, 2 x 32 MiB of them).",
              f"* *Allocated* (torch's peak) is the trace's timeline plus the cuBLAS workspaces: MdAPE "
              f"{a['allocated_mdape']:.1%}. *Reserved* is the caching allocator replayed over the step's "
              f"allocations (`gpucast.graph.allocator`): MdAPE {a['reserved_mdape']:.1%}; measured reserved / "
              f"allocated {a['frag_measured']:.2f} at the median, predicted {a['frag_predicted']:.2f} (up to "
              "1.85x for ResNet-18/VGG at large batches: blocks freed in one segment that a larger later request "
              "cannot use).",
              "* The largest errors left are in the trace's tensors, not in these terms: T5 (allocated 0.65-0.8x, "
              "cause not isolated), Llama-1B in fp32 (allocated 0.71x: the ~14 GiB missing is about what 16 "
              "layers' fp32 attention matrices would hold, as if SDPA ran its math kernel for grouped-query "
              "attention in fp32; not verified), the LSTM seq2seq (1.25x); and CNN inference (3 runs, 1.4-2.3x), "
              "where a convolution workspace of `cudnn_heuristic_workspace_ratio` (1.0, best for the training "
              "runs) over-states what the heuristics' bf16 algorithms take at inference.", ""]
    worst = sorted(recs, key=lambda r: abs(r["predicted_total"] / r["measured_nvml"] - 1), reverse=True)[:WORST]
    lines += [f"The {WORST} largest errors, term by term (MiB, measured / predicted):", "",
              "| run | total | outside | reserved | allocated |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in worst:
        lines.append(f"| {r['model']} b{r['batch_size']} {r['precision']} {r['mode']} | "
                     f"{r['predicted_total'] / r['measured_nvml']:.2f}x | {r['measured_outside'] / MIB:.0f} / "
                     f"{r['predicted_outside'] / MIB:.0f} | {r['measured_reserved'] / MIB:.0f} / "
                     f"{r['predicted_reserved'] / MIB:.0f} | {r['measured_allocated'] / MIB:.0f} / "
                     f"{r['predicted_allocated'] / MIB:.0f} |")
    if holdout:
        c, bl, dn = holdout["fit_all_mib"]
        lines += ["", f"Outside the allocator, fitted on the {holdout['fresh_runs']} runs that opened their worker "
                  f"process (least squares: context + cuBLAS handles x h_blas + cuDNN handles x h_dnn): context "
                  f"**{c:.1f} MiB**, h_blas **{bl:.1f} MiB**, h_dnn **{dn:.1f} MiB** (the Environment's "
                  "`cuda_context_lazy_hopper_bytes`, `cublas_handle_bytes`, `cudnn_handle_bytes`). Held out by "
                  "family (the three refitted without the family's rows, its rows predicted with them):", "",
                  "| family | runs | context / h_blas / h_dnn without it (MiB) | total MdAPE held out | "
                  "median pred / meas | under-predicted |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for fam, h in holdout["families"].items():
            lines.append(f"| {fam} | {h['n']} | {h['context_mib']:.0f} / {h['cublas_mib']:.0f} / "
                         f"{h['cudnn_mib']:.0f} | {h['mdape']:.1%} | {h['ratio']:.3f} | {h['under_share']:.0%} |")
        a = holdout["all"]
        lines.append(f"| **all** | {a['n']} | | **{a['mdape']:.1%}** | {a['ratio']:.3f} | {a['under_share']:.0%} |")
    return "\n".join(lines) + "\n"


FRESH_GAP_S = 4.0


def mark_fresh(rows: list[dict]) -> None:
    """Flag the runs that opened their worker process (``fresh``): the first of a collection, or one
    that started more than FRESH_GAP_S after the previous run ended (a worker takes ~10 s to start:
    provenance/*.suite.log, 'solo worker: ... from start to ready'). Later runs of a worker hold the
    kernel images its earlier runs loaded (gpucast.profile.worker), a fresh process does not."""
    from datetime import datetime

    def ts(r):
        return datetime.fromisoformat(r["started_at"].replace("Z", "+00:00")).timestamp()

    prev = None
    for r in sorted(rows, key=lambda r: (r["collection"], r["started_at"])):
        r["fresh"] = (prev is None or prev["collection"] != r["collection"]
                      or ts(r) - (ts(prev) + (prev["duration_s"] or 0)) > FRESH_GAP_S)
        prev = r


# Priors of the outside-the-allocator fit, each with its source: they decide only what the runs leave
# unidentified (held out without the CNNs, no fresh run holds both cuBLAS and cuDNN handles).
PRIOR_CONTEXT = 500 * MIB   # Environment.cuda_context_lazy_bytes (CUDA Programming Guide, 'Lazy Loading')
PRIOR_CUBLAS = 60e6         # ~60 MB per cuBLAS handle on GH200 (pika-org/pika#1234)
PRIOR_CUDNN = 0.0
PRIOR_WEIGHT = 1e-5         # per run, on (value - prior)^2 beside the runs' squared residuals: 100 MiB off a
                            # prior costs as much as 0.3 MiB of residual on every run (negligible where the runs decide)


def fit_outside(recs: list[dict]) -> tuple[float, float, float]:
    """Least squares over the fresh-process runs: measured NVML - reserved = context + cuBLAS handles
    x per-handle bytes + cuDNN handles x per-handle bytes, with a faint pull to the priors above.
    Returns (context, cuBLAS, cuDNN) bytes."""
    import numpy as np

    fresh = [r for r in recs if r["fresh"]]
    a = np.array([[1.0, r["cublas_handles"], r["cudnn_handles"]] for r in fresh])
    y = np.array([r["measured_outside"] for r in fresh], dtype=float)
    w = (PRIOR_WEIGHT * len(fresh)) ** 0.5
    a = np.vstack([a, w * np.eye(3)])
    y = np.concatenate([y, w * np.array([PRIOR_CONTEXT, PRIOR_CUBLAS, PRIOR_CUDNN])])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return tuple(float(c) for c in coef)


def holdout_by_family(recs: list[dict]) -> dict:
    """The outside-the-allocator terms refitted without each family (:func:`fit_outside`), that
    family's rows predicted with them: its totals move by the refit's outside term less the one in
    force."""
    full = fit_outside(recs)
    fams: dict = {}
    pooled = []
    for fam, rs in _group(recs, lambda r: r["family"]).items():
        fit = fit_outside([r for r in recs if r["family"] != fam])
        pairs = [(r["predicted_total"] - r["predicted_outside"] + fit[0] + r["cublas_handles"] * fit[1]
                  + r["cudnn_handles"] * fit[2], r["measured_nvml"]) for r in rs]
        pooled += pairs
        fams[fam] = {"n": len(rs), "context_mib": fit[0] / MIB, "cublas_mib": fit[1] / MIB, "cudnn_mib": fit[2] / MIB,
                     "mdape": _mdape(pairs), "ratio": _ratio(pairs),
                     "under_share": sum(p < m for p, m in pairs) / len(pairs)}
    return {"fit_all_mib": [v / MIB for v in full], "fresh_runs": sum(r["fresh"] for r in recs), "families": fams,
            "all": {"n": len(pooled), "mdape": _mdape(pooled), "ratio": _ratio(pooled),
                    "under_share": sum(p < m for p, m in pooled) / len(pooled)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--no-holdout", action="store_true", help="skip the held-out refit of the fitted context")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    rows = _h200_runs().load(a.data)
    rows = [r for r in rows if r.get("proc_mem_max_bytes") and r.get("torch_max_reserved_bytes")]
    if not rows:
        print(f"error: no measured solo runs with memory under {a.data}", file=sys.stderr)
        return 2
    mark_fresh(rows)
    recs = [dict(predict_row(r), fresh=r["fresh"]) for r in rows]
    holdout = None if a.no_holdout else holdout_by_family(recs)
    text = render(recs, holdout)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "h200_memory.json").write_text(json.dumps(
        {"summary": summarise(recs),
         "by_family": {f: summarise(rs) for f, rs in _group(recs, lambda r: r["family"]).items()},
         "holdout": holdout, "records": recs}, indent=1) + "\n")
    (a.out / "h200_memory.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
