"""Held-out accuracy of gpucast on the measured sets of data/measured, next to the 'predict the
mean' floor and the model before real-script surroundings (benchmark-style jobs, 500 MiB context).

Each set's rows are expressed as jobs with the loaders and loops their scripts had
(``gpucast.learn.shared_sets``). The Environment is fitted with its priors
(``gpucast.learn.fit``) on all groups but one and evaluated on the held-out group (MLP set: by
architecture; Gavel: by job type); every row is predicted once, from a fit that never saw its
group. Gavel's fits start from the constants fitted on all MLP rows (another data set) and move
only the loader constants the MLP set has no rows for and the PyTorch-1.x stack factors
(gpucast.learn.set_fit's stages; a whole set left out: benchmarks/leave_one_set_out.py). The floor predicts the mean of the fitting rows (geometric mean for step times).

    .venv/bin/python benchmarks/accuracy.py [--shared data/measured] [--mlp-limit N] [--markdown PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO_ROOT / "data" / "measured"


def _fitters(args, progress):
    from gpucast.learn.fit import Fitter, legacy_job
    from gpucast.learn.shared_sets import gavel_rows, mlp_rows

    out = {}
    sets = {"mlp": lambda: mlp_rows(args.shared / "gpumemnet-mlp" / "runs.csv", args.mlp_limit),
            "gavel": lambda: gavel_rows(args.shared / "gavel" / "simulation_throughputs.json")}
    for name, load in sets.items():
        if name not in args.sets:
            continue
        rows = load()
        f = Fitter(rows, progress=lambda i, n, name=name: progress(f"capturing {name}", i, n))
        old = Fitter(rows, traces=f.traces, jobs=[legacy_job(r.job) for r in rows])
        out[name] = (f, old)
    return out


def _util_line(name, pred, meas):
    from gpucast.learn import metrics

    u = metrics.util_metrics(pred, meas)
    return f"| {name} | {u['rmsle']:.3f} | {u['mae']:.1f} | {u['spearman']:.2f} |"


def evaluate(args, progress) -> tuple[str, dict]:
    fitters = _fitters(args, progress)
    doc: dict = {}
    lines = []
    if "mlp" in fitters:
        _mlp_tables(fitters["mlp"], lines, doc, progress)
    if "gavel" in fitters:
        _gavel_tables(fitters["gavel"], lines, doc, progress)
    return "\n".join(lines), doc


def _mlp_tables(fitters, lines, doc, progress) -> None:
    from gpucast.learn import metrics
    from gpucast.learn.fit import group_cv, legacy_env
    from gpucast.learn.set_fit import STAGE1_PARAMS as MLP_PARAMS

    f, old = fitters
    held, floor = group_cv(f, MLP_PARAMS, progress=lambda s: progress(f"mlp: {s}", None, None))
    # Gavel's fits start from the MLP set's constants, fitted on all its rows (another data set).
    doc["mlp_env"], _ = f.fit(np.arange(len(f.rows)), MLP_PARAMS)
    today = old.predict(legacy_env())
    lines += [f"### GPUMemNet MLP runs (A100-40GB, {len(f.rows)} rows, 4 architectures held out one at a time)", "",
              "| predictor | util RMSLE | util MAE (points) | util rank corr. | memory MAPE |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for name, u, m in (("gpucast, held-out fit", held.util_pct, held.memory_mib),
                       ("predict the mean (floor)", floor["util_pct"], floor["memory_mib"]),
                       ("gpucast before (benchmark-style jobs, 500 MiB context)", today.util_pct, today.memory_mib)):
        lines.append(_util_line(name, u, f.util) + f" {100 * metrics.mape(m, f.memory):.1f} % |")
    lines += ["", "| held-out architecture | rows | util MAE | util RMSLE | memory MAPE |",
              "| --- | ---: | ---: | ---: | ---: |"]
    per = {}
    for g in dict.fromkeys(f.groups):
        s = f.groups == g
        u = metrics.util_metrics(held.util_pct[s], f.util[s])
        per[g] = {**u, "memory_mape": metrics.mape(held.memory_mib[s], f.memory[s])}
        lines.append(f"| {g} | {int(s.sum())} | {u['mae']:.1f} | {u['rmsle']:.3f} | {100 * per[g]['memory_mape']:.1f} % |")
    doc["mlp_rows"] = [{"label": r.label, "group": r.group, "util_pct": float(u), "held_out_util_pct": float(hu),
                        "memory_mib": float(m), "held_out_memory_mib": float(hm)}
                       for r, u, hu, m, hm in zip(f.rows, f.util, held.util_pct, f.memory, held.memory_mib)]
    doc["mlp"] = {"held_out": {**metrics.util_metrics(held.util_pct, f.util),
                               "memory_mape": metrics.mape(held.memory_mib, f.memory)},
                  "floor": {**metrics.util_metrics(floor["util_pct"], f.util),
                            "memory_mape": metrics.mape(floor["memory_mib"], f.memory)},
                  "before": {**metrics.util_metrics(today.util_pct, f.util),
                             "memory_mape": metrics.mape(today.memory_mib, f.memory)},
                  "per_group": per}


def _gavel_tables(fitters, lines, doc, progress) -> None:
    from gpucast.learn import metrics
    from gpucast.learn.fit import group_cv, legacy_env
    from gpucast.learn.set_fit import STAGE2_PARAMS as GAVEL_PARAMS

    f, old = fitters
    held, floor = group_cv(f, GAVEL_PARAMS, progress=lambda s: progress(f"gavel: {s}", None, None),
                           priors=doc.get("mlp_env"))
    today = old.predict(legacy_env())
    lines += ["", f"### Gavel solo throughputs (K80/P100/V100, {len(f.rows)} rows, 7 job types held out one at a time)", "",
              "| predictor | step-time MdAPE | within 2x | RMSLE | geo-mean ratio | worst ratio |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, st in (("gpucast, held-out fit", held.step_time_s), ("predict the mean (floor)", floor["step_time_s"]),
                     ("gpucast before (benchmark-style jobs)", today.step_time_s)):
        r = st / f.step
        lines.append(f"| {name} | {100 * metrics.mdape(st, f.step):.0f} % | {100 * np.mean((r >= 0.5) & (r <= 2)):.0f} % "
                     f"| {np.sqrt(np.mean(np.log(r) ** 2)):.2f} | {np.exp(np.mean(np.log(r))):.2f} "
                     f"| {metrics.worst_ratio(st, f.step):.1f}x |")
    lines += ["", "| held-out job type | rows | MdAPE | geo-mean ratio pred/meas | worst ratio | before: geo-mean ratio |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    per = {}
    for g in dict.fromkeys(f.groups):
        s = f.groups == g
        gm = float(np.exp(np.mean(np.log(held.step_time_s[s] / f.step[s]))))
        gb = float(np.exp(np.mean(np.log(today.step_time_s[s] / f.step[s]))))
        per[g] = {"mdape": metrics.mdape(held.step_time_s[s], f.step[s]), "geomean_ratio": gm,
                  "worst_ratio": metrics.worst_ratio(held.step_time_s[s], f.step[s]), "before_geomean_ratio": gb}
        lines.append(f"| {g} | {int(s.sum())} | {100 * per[g]['mdape']:.0f} % | {gm:.2f} | {per[g]['worst_ratio']:.1f}x | {gb:.2f} |")
    doc["gavel_rows"] = [{"label": r.label, "group": r.group, "measured_s": float(m), "held_out_s": float(h),
                          "before_s": float(b)} for r, m, h, b in zip(f.rows, f.step, held.step_time_s, today.step_time_s)]
    doc["gavel"] = {"held_out_mdape": metrics.mdape(held.step_time_s, f.step),
                    "floor_mdape": metrics.mdape(floor["step_time_s"], f.step),
                    "before_mdape": metrics.mdape(today.step_time_s, f.step), "per_group": per}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                   help="the folder of the measured sets (default: data/measured in the repository)")
    p.add_argument("--mlp-limit", type=int, default=None, help="only the first N MLP rows (default: all)")
    p.add_argument("--sets", nargs="+", default=["mlp", "gavel"], choices=["mlp", "gavel"], help="which sets")
    p.add_argument("--markdown", type=Path, help="write the tables to this file")
    p.add_argument("--json", type=Path, help="write the numbers as JSON")
    args = p.parse_args(argv)
    for sub in ("gpumemnet-mlp/runs.csv", "gavel/simulation_throughputs.json"):
        if not (args.shared / sub).is_file():
            print(f"accuracy: {args.shared / sub} not found (pass --shared)", file=sys.stderr)
            return 2
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    t0 = time.time()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True, console=__import__("rich.console").console.Console(stderr=True)) as bar:
        task = bar.add_task("starting", total=None)

        def progress(what, i, n):
            bar.update(task, description=what, completed=i or 0, total=n)

        text, doc = evaluate(args, progress)
    from gpucast.api import MODEL_VERSION

    text = (f"## Held-out accuracy ({MODEL_VERSION}; `python benchmarks/accuracy.py`, "
            f"{time.time() - t0:.0f} s on this machine)\n\n" + text)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        doc.pop("mlp_env", None)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
