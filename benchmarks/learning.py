"""Learning from measurements, on the measured sets of data/measured: few-shot calibration, every
method under one group-held-out split, and the coverage of the 80 % intervals.

1. Few-shot (the operator's case). MLP set: for each architecture held out, ``k`` runs drawn at
   random from the other three calibrate an environment (``gpucast.learn.calibrate``, with its
   cross-validated split-conformal intervals); the held-out architecture's runs are predicted;
   ``--draws`` draws per architecture. Gavel: every pair of job types calibrates (all their
   rows, K80/P100/V100), the other five types are predicted. The base constants never saw the set
   (``gpucast.learn.evaluate.base_without``: the packaged fit was made on these sets).
2. Methods side by side (``gpucast.learn.evaluate.compare``): one group held out at a time; the
   floor, the reference-style LightGBM on graph features, physics with the base constants, physics
   calibrated on (up to 300 of) the other groups' rows, and the hybrid residual model.
3. Coverage: the 80 % split-conformal intervals of (2)'s calibrated physics, each group's half-width
   from the other groups' residuals only; and (1)'s k = 10 calibrations' own intervals on the
   held-out architecture.

    .venv/bin/python benchmarks/learning.py [--shared data/measured] [--mlp-per-group N] [--draws 5]
        [--markdown benchmarks/results/learning.md] [--json ...] [--html ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO_ROOT / "data" / "measured"
RESULTS = REPO_ROOT / "benchmarks" / "results"
KS = (0, 3, 5, 10, 30)


def _mlp_fitter(args, progress):
    from gpucast.learn.fit import Fitter
    from gpucast.learn.shared_sets import mlp_rows

    rows = mlp_rows(args.shared / "gpumemnet-mlp" / "runs.csv")
    if args.mlp_per_group:
        by: dict[str, list] = {}
        for r in rows:
            by.setdefault(r.group, []).append(r)
        rows = [r for g in sorted(by) for r in by[g][:args.mlp_per_group]]
    return Fitter(rows, progress=lambda i, n: progress("capturing the MLP runs", i, n))


def _gavel_fitter(args, progress):
    from gpucast.learn.fit import Fitter
    from gpucast.learn.shared_sets import gavel_rows

    return Fitter(gavel_rows(args.shared / "gavel" / "simulation_throughputs.json"),
                  progress=lambda i, n: progress("capturing Gavel's jobs", i, n))


def gavel_pairs(f, base, progress) -> dict:
    """Calibrate on every pair of job types, predict the others."""
    from gpucast.learn import metrics
    from gpucast.learn.calibrate import calibrate

    types = list(dict.fromkeys(f.groups))
    pred_all, meas_all, per_pair = [], [], []
    before_all = []
    inside = total = 0
    for a, b in itertools.combinations(types, 2):
        progress(f"gavel: calibrating on {a} + {b}", None, None)
        train = np.flatnonzero(np.isin(f.groups, [a, b]))
        test = np.flatnonzero(~np.isin(f.groups, [a, b]))
        cal = calibrate(f, train, base=base, cross_validate=True, label=f"{a}+{b}")
        p = f.predict(cal.env, test).step_time_s
        p0 = f.predict(base, test).step_time_s
        pred_all.append(p)
        before_all.append(p0)
        meas_all.append(f.step[test])
        conf = {c[0]: c[2] for c in cal.env.conformal}
        if "step_time_s" in conf:
            r = np.abs(np.log(p / f.step[test]))
            inside += int(np.sum(r <= conf["step_time_s"]))
            total += len(r)
        per_pair.append({"pair": f"{a} + {b}", "mdape": metrics.mdape(p, f.step[test]),
                         "before_mdape": metrics.mdape(p0, f.step[test])})
    p, m, p0 = np.concatenate(pred_all), np.concatenate(meas_all), np.concatenate(before_all)
    r = p / m
    return {"mdape": metrics.mdape(p, m), "before_mdape": metrics.mdape(p0, m),
            "within_2x": float(np.mean((r >= 0.5) & (r <= 2))),
            "median_pair_mdape": float(np.median([x["mdape"] for x in per_pair])),
            "pairs_improved": int(sum(x["mdape"] < x["before_mdape"] for x in per_pair)), "pairs": len(per_pair),
            "coverage": inside / total if total else None, "per_pair": per_pair}


def run(args, progress) -> tuple[str, dict]:
    from gpucast.learn import evaluate as ev

    doc: dict = {"params": {"draws": args.draws, "mlp_per_group": args.mlp_per_group, "ks": list(KS)}}
    lines: list[str] = []
    if "mlp" in args.sets:
        f = _mlp_fitter(args, progress)
        base = ev.base_without("gpumemnet-mlp")
        fs = ev.few_shot(f, KS, base, draws=args.draws, progress=lambda s: progress(f"mlp few-shot: {s}", None, None))
        doc["mlp_few_shot"] = {str(k): v for k, v in fs.items()}
        cmp = ev.compare(f, ("util_pct", "memory_mib"), base, progress=lambda s: progress(f"mlp: {s}", None, None))
        doc["mlp_methods"] = {m: {"util": ev.score(f, "util_pct", cmp[m]["util_pct"]),
                                  "memory": ev.score(f, "memory_mib", cmp[m]["memory_mib"])} for m in ev.METHODS}
        doc["mlp_coverage"] = {q: ev.coverage(f, q, cmp["physics+calibration"][q]) for q in ("util_pct", "memory_mib")}
        doc["mlp_rows"] = len(f.rows)
        doc["mlp_groups"] = sorted(set(f.groups))
    if "gavel" in args.sets:
        g = _gavel_fitter(args, progress)
        base = ev.base_without("gavel")
        doc["gavel_pairs"] = gavel_pairs(g, base, progress)
        cmp = ev.compare(g, ("step_time_s",), base, progress=lambda s: progress(f"gavel: {s}", None, None))
        doc["gavel_methods"] = {m: {"step": ev.score(g, "step_time_s", cmp[m]["step_time_s"])} for m in ev.METHODS}
        doc["gavel_coverage"] = {"step_time_s": ev.coverage(g, "step_time_s", cmp["physics+calibration"]["step_time_s"])}
        doc["gavel_rows"] = len(g.rows)
    lines += _tables(doc)
    return "\n".join(lines), doc


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f} %"


def _tables(doc) -> list[str]:
    out = []
    if "mlp_few_shot" in doc:
        out += [f"### Few-shot calibration, MLP set (A100-40GB, {doc['mlp_rows']} runs, 4 architectures)", "",
                f"k runs drawn from three architectures calibrate; the fourth is predicted "
                f"({doc['params']['draws']} draws per architecture; k = 0: the base constants, which never saw the set).",
                "", "| k runs | util MAE (points) | util RMSLE | memory MAPE | 80 % interval coverage (util / memory) |",
                "| ---: | ---: | ---: | ---: | ---: |"]
        for k, v in doc["mlp_few_shot"].items():
            c = v.get("coverage", {})
            out.append(f"| {k} | {v['util']['mae']:.1f} | {v['util']['rmsle']:.3f} | {100 * v['memory']['mape']:.1f} % "
                       f"| {_pct(c.get('util'))} / {_pct(c.get('memory'))} |")
    if "gavel_pairs" in doc:
        gp = doc["gavel_pairs"]
        out += ["", f"### Few-shot calibration, Gavel (K80/P100/V100, {doc['gavel_rows']} rows, 7 job types)", "",
                "| calibrated on | step-time MdAPE on the other 5 types | within 2x | pairs improved | 80 % coverage |",
                "| --- | ---: | ---: | ---: | ---: |",
                f"| nothing (base constants) | {100 * gp['before_mdape']:.0f} % | - | - | - |",
                f"| each of the {gp['pairs']} pairs of job types | {100 * gp['mdape']:.0f} % (median pair "
                f"{100 * gp['median_pair_mdape']:.0f} %) | {100 * gp['within_2x']:.0f} % | {gp['pairs_improved']} of "
                f"{gp['pairs']} | {_pct(gp['coverage'])} |"]
    if "mlp_methods" in doc or "gavel_methods" in doc:
        out += ["", "### Every method, one group held out at a time", "",
                "| method | MLP util MAE | MLP util RMSLE | MLP memory MAPE | Gavel step MdAPE | Gavel within 2x |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        names = {"floor": "predict the mean (floor)", "reference": "reference-style: LightGBM on graph features",
                 "physics": "gpucast physics, base constants", "physics+calibration": "gpucast physics, calibrated on the other groups",
                 "hybrid": "hybrid: calibrated physics + LightGBM residual"}
        for m, label in names.items():
            mm = doc.get("mlp_methods", {}).get(m)
            gm = doc.get("gavel_methods", {}).get(m)
            out.append(f"| {label} | {mm['util']['mae']:.1f} | {mm['util']['rmsle']:.3f} | {100 * mm['memory']['mape']:.1f} % "
                       if mm else f"| {label} | - | - | - ")
            out[-1] += (f"| {100 * gm['step']['mdape']:.0f} % | {100 * gm['step']['within_2x']:.0f} % |" if gm else "| - | - |")
    cov = []
    for key, name in (("mlp_coverage", "MLP"), ("gavel_coverage", "Gavel")):
        for q, c in doc.get(key, {}).items():
            cov.append(f"| {name} | {q} | {100 * c['coverage']:.0f} % | {c['rows']} |")
    if cov:
        out += ["", "### 80 % split-conformal intervals of the calibrated physics, coverage on held-out groups", "",
                "| set | quantity | coverage | rows |", "| --- | --- | ---: | ---: |"] + cov
    return out


def write_html(doc, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from gpucast.fileio import atomic_write_text

    figs = []
    if "mlp_few_shot" in doc:
        ks = [int(k) for k in doc["mlp_few_shot"]]
        fs = doc["mlp_few_shot"]
        fig = make_subplots(rows=1, cols=2, subplot_titles=("utilization MAE (points)", "memory MAPE (%)"))
        fig.add_trace(go.Scatter(x=ks, y=[fs[str(k)]["util"]["mae"] for k in ks], mode="lines+markers", name="util MAE"), 1, 1)
        fig.add_trace(go.Scatter(x=ks, y=[100 * fs[str(k)]["memory"]["mape"] for k in ks], mode="lines+markers",
                                 name="memory MAPE"), 1, 2)
        fig.update_xaxes(title_text="runs calibrated on (k)")
        fig.update_layout(title="MLP set: error on a held-out architecture against calibration runs", height=420)
        figs.append(fig)
    if "gavel_pairs" in doc:
        pp = doc["gavel_pairs"]["per_pair"]
        fig = go.Figure([go.Bar(x=[p["pair"] for p in pp], y=[100 * p["before_mdape"] for p in pp], name="base constants"),
                         go.Bar(x=[p["pair"] for p in pp], y=[100 * p["mdape"] for p in pp], name="calibrated on the pair")])
        fig.update_layout(title="Gavel: step-time MdAPE (%) on the other five job types, per calibration pair",
                          barmode="group", height=480)
        figs.append(fig)
    body = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
                   for i, f in enumerate(figs))
    atomic_write_text(path, f"<!doctype html><html><head><meta charset='utf-8'><title>gpucast learning</title></head>"
                            f"<body><h1>gpucast: learning from measurements</h1>{body}</body></html>\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                   help="the folder of the measured sets (default: data/measured in the repository)")
    p.add_argument("--sets", nargs="+", default=["mlp", "gavel"], choices=["mlp", "gavel"])
    p.add_argument("--mlp-per-group", type=int, default=None, help="only the first N runs of each architecture")
    p.add_argument("--draws", type=int, default=5, help="random draws of k runs per held-out architecture")
    p.add_argument("--markdown", type=Path, default=RESULTS / "learning.md")
    p.add_argument("--json", type=Path, default=RESULTS / "learning.json")
    p.add_argument("--html", type=Path, default=RESULTS / "learning.html")
    args = p.parse_args(argv)
    for sub in ("gpumemnet-mlp/runs.csv", "gavel/simulation_throughputs.json"):
        if not (args.shared / sub).is_file():
            print(f"learning: {args.shared / sub} not found (pass --shared)", file=sys.stderr)
            return 2
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    t0 = time.time()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("starting", total=None)

        def progress(what, i, n):
            bar.update(task, description=what, completed=i or 0, total=n)

        text, doc = run(args, progress)
    from gpucast.api import MODEL_VERSION

    text = (f"## Learning from measurements ({MODEL_VERSION}; `python benchmarks/learning.py"
            f"{' --mlp-per-group %d' % args.mlp_per_group if args.mlp_per_group else ''}`, "
            f"{time.time() - t0:.0f} s on this machine)\n\n" + text)
    print(text)
    args.markdown.write_text(text + "\n")
    args.json.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    write_html(doc, args.html)
    return 0


if __name__ == "__main__":
    sys.exit(main())
