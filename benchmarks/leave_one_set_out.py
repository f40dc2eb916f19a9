"""A cluster gpucast has never seen: the packaged fit's procedure (gpucast.learn.set_fit) run on
all shared sets but one, scored on the one left out; then few-shot calibration on Lucid's RTX 3090
runs (3 families measured, the others predicted).

Sets (data/measured): gpumemnet-mlp (A100-40GB, PyTorch 2.x), gavel (K80/P100/V100, PyTorch 1.4),
lucid-rtx3090 singles (RTX 3090, PyTorch 1.11). Each row is a job with its script's loader, loop
and stack. "A constant" predicts the held-out set's own mean (an optimistic constant: it knows
the set's mean; the geometric mean for step times). GPU-bound runs: measured utilization >= 80 %.

Few-shot: choices of 3 of Lucid's 7 families (--draws of the 35, spread evenly); `gpucast
calibrate` (gpucast.learn.calibrate with its defaults: cross-validation by family chooses how hard
the priors hold, or no fit) on their runs, starting from the environment fitted without Lucid,
predicts the other families' runs.

    .venv/bin/python benchmarks/leave_one_set_out.py [--shared data/measured] [--mlp-limit N] [--draws N]
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
SET_LABELS = {"mlp": "gpumemnet-mlp (A100-40GB, torch 2.x)", "gavel": "gavel (K80/P100/V100, torch 1.4)",
              "lucid": "lucid-rtx3090 singles (RTX 3090, torch 1.11)"}


def scores(f, pred, mask=None) -> dict:
    """Utilization, memory and step-time errors of predictions ``pred`` on fitter ``f``'s rows (those
    in ``mask``, all by default)."""
    from gpucast.learn import metrics
    from gpucast.learn.set_fit import GPU_BOUND_UTIL_PCT

    m = np.ones(len(f.rows), bool) if mask is None else mask
    util, memory, step = f.util[m], f.memory[m], f.step[m]
    p_util, p_memory, p_step = pred.util_pct[m], pred.memory_mib[m], pred.step_time_s[m]
    out: dict = {}
    ok = ~np.isnan(util)
    if ok.any():
        out.update(metrics.util_metrics(p_util[ok], util[ok]))
    ok = ~np.isnan(memory)
    if ok.any():
        out["memory_mape"] = metrics.mape(p_memory[ok], memory[ok])
    ok = ~np.isnan(step)
    if ok.any():
        r = p_step[ok] / step[ok]
        out["step_mdape"] = metrics.mdape(p_step[ok], step[ok])
        out["step_geomean_ratio"] = float(np.exp(np.mean(np.log(r))))
        has_util = ~np.isnan(util)
        gb = ok & (util >= GPU_BOUND_UTIL_PCT) if has_util.any() else ok
        if gb.any():
            out["gpu_bound_rows"] = int(gb.sum())
            out["gpu_bound_step_mdape"] = metrics.mdape(p_step[gb], step[gb])
            if has_util[gb].all():
                out["gpu_bound_util_rmsle"] = metrics.util_metrics(p_util[gb], util[gb])["rmsle"]
    return out


def constant(f):
    """The set's own mean as every row's prediction (geometric mean for step times)."""
    from gpucast.learn.fit import Predicted

    n = len(f.rows)

    def mean(a, geo=False):
        v = a[~np.isnan(a)]
        if not len(v):
            return np.full(n, np.nan)
        return np.full(n, float(np.exp(np.mean(np.log(v)))) if geo else float(np.mean(v)))

    return Predicted(mean(f.util), mean(f.memory), mean(f.step, geo=True))


def _fmt(s: dict, key: str, pct=False, digits=1) -> str:
    v = s.get(key)
    if v is None or v != v:
        return "–"
    return f"{100 * v:.0f} %" if pct else f"{v:.{digits}f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                   help="the folder of the measured sets (default: data/measured in the repository)")
    p.add_argument("--mlp-limit", type=int, default=None, help="only the first N MLP rows (default: all)")
    p.add_argument("--draws", type=int, default=12, help="few-shot draws of 3 Lucid families, spread over the 35")
    p.add_argument("--markdown", type=Path, default=RESULTS / "leave_one_set_out.md")
    p.add_argument("--json", type=Path, default=RESULTS / "leave_one_set_out.json")
    args = p.parse_args(argv)
    for sub in ("gpumemnet-mlp/runs.csv", "gavel/simulation_throughputs.json", "lucid-rtx3090/singles.csv"):
        if not (args.shared / sub).is_file():
            print(f"leave_one_set_out: {args.shared / sub} not found (pass --shared)", file=sys.stderr)
            return 2
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpucast.api import MODEL_VERSION
    from gpucast.learn.calibrate import calibrate
    from gpucast.learn.fit import Fitter, Predicted
    from gpucast.learn.set_fit import SETS, fit_sets, rows_of

    t0 = time.time()
    doc: dict = {"sets": {}, "few_shot": {}}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("capturing", total=None)
        fitters = {}
        for name in SETS:
            rows = rows_of(name, args.shared, args.mlp_limit)
            fitters[name] = Fitter(rows, progress=lambda i, n, name=name: bar.update(
                task, description=f"capturing {name}", completed=i, total=n))
        envs = {}
        for name in SETS:
            bar.update(task, description=f"fitting without {name}", completed=0, total=None)
            env, info = fit_sets(fitters, without=name)
            envs[name] = env
            f = fitters[name]
            doc["sets"][name] = {"rows": len(f.rows), "held_out": scores(f, f.predict(env)),
                                 "constant": scores(f, constant(f)), "fitted_values": info["values"]}
        # Lucid per family, from the fit that never saw Lucid.
        f = fitters["lucid"]
        held = f.predict(envs["lucid"])
        per = {}
        for g in dict.fromkeys(f.groups):
            s = f.groups == g
            per[g] = scores(f, held, s)
        doc["lucid_families"] = per
        # Lucid leave-one-family-out: the packaged procedure on every set, Lucid's other families
        # included (its host and the 1.11 stack seen), each family predicted by the fit without it.
        bar.update(task, description="fitting the MLP stage once", completed=0, total=None)
        mlp_env, mlp_info = fit_sets({"mlp": fitters["mlp"]})
        first_stage = (mlp_env, mlp_info["stages"][0])
        lofo = Predicted(np.empty(len(f.rows)), np.empty(len(f.rows)), np.empty(len(f.rows)))
        fams = list(dict.fromkeys(f.groups))
        task3 = bar.add_task("Lucid families held out", total=len(fams))
        fam_values = {}
        for g in fams:
            env_g, info_g = fit_sets(fitters, without_group=("lucid", g), first_stage=first_stage)
            test = np.flatnonzero(f.groups == g)
            pg = f.predict(env_g, test)
            lofo.util_pct[test], lofo.memory_mib[test], lofo.step_time_s[test] = pg.util_pct, pg.memory_mib, pg.step_time_s
            fam_values[g] = {k: info_g["values"][k] for k in ("torch1_host_factor", "torch1_kernel_factor")}
            bar.update(task3, advance=1)
        doc["lucid_lofo"] = {"all": scores(f, lofo), "constant": scores(f, constant(f)),
                             "families": {g: scores(f, lofo, f.groups == g) for g in fams},
                             "fitted_stack": fam_values}
        # Few-shot on Lucid.
        fams = list(dict.fromkeys(f.groups))
        every = list(itertools.combinations(fams, 3))
        step = max(1, len(every) // max(1, args.draws))
        draws = every[::step][:args.draws]  # spread over all 35 choices
        task2 = bar.add_task("few-shot draws", total=len(draws))
        results = []
        for d in draws:
            train = np.flatnonzero(np.isin(f.groups, d))
            test = np.flatnonzero(~np.isin(f.groups, d))
            cal = calibrate(f, train, base=envs["lucid"], label="few-shot")  # gpucast calibrate's defaults
            pr = f.predict(cal.env)
            mask = np.zeros(len(f.rows), bool)
            mask[test] = True
            s = scores(f, pr, mask)
            results.append({"calibrated_on": list(d), **s})
            bar.update(task2, advance=1)
        doc["few_shot"] = {"draws": results}
    doc["seconds"] = time.time() - t0
    doc["model_version"] = MODEL_VERSION
    md = render(doc, args)
    print(md)
    args.markdown.write_text(md + "\n")
    args.json.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return 0


def render(doc: dict, args) -> str:
    lines = [f"## A cluster never seen: leave one shared set out ({doc['model_version']}; "
             f"`python benchmarks/leave_one_set_out.py`, {doc['seconds']:.0f} s on this machine)", "",
             "Each set is predicted by the environment fitted (scripts/fit_environment.py's procedure, "
             "gpucast.learn.set_fit) on the other sets only. A constant: the held-out set's own mean. "
             "GPU-bound: measured utilization >= 80 %.", "",
             "| held-out set | rows | util MAE (pts) | util RMSLE | Spearman | memory MAPE | step MdAPE | "
             "GPU-bound step MdAPE | constant: util MAE | constant: util RMSLE | constant: step MdAPE |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, d in doc["sets"].items():
        h, c = d["held_out"], d["constant"]
        lines.append(f"| {SET_LABELS[name]} | {d['rows']} | {_fmt(h, 'mae')} | {_fmt(h, 'rmsle', digits=3)} | "
                     f"{_fmt(h, 'spearman', digits=2)} | {_fmt(h, 'memory_mape', pct=True)} | "
                     f"{_fmt(h, 'step_mdape', pct=True)} | {_fmt(h, 'gpu_bound_step_mdape', pct=True)} | "
                     f"{_fmt(c, 'mae')} | {_fmt(c, 'rmsle', digits=3)} | {_fmt(c, 'step_mdape', pct=True)} |")
    lines += ["", "Lucid's families, predicted by the fit that never saw Lucid:", "",
              "| family | runs | util MAE | memory MAPE | step MdAPE | step ratio (geo) |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for g, s in doc["lucid_families"].items():
        lines.append(f"| {g} | {s.get('n', '–')} | {_fmt(s, 'mae')} | {_fmt(s, 'memory_mape', pct=True)} | "
                     f"{_fmt(s, 'step_mdape', pct=True)} | {_fmt(s, 'step_geomean_ratio', digits=2)} |")
    lo = doc.get("lucid_lofo")
    if lo:
        a, c = lo["all"], lo["constant"]
        lines += ["", "Lucid, one family held out at a time: the packaged fit's procedure on every set, Lucid's other "
                      "families included (its cluster's host and PyTorch 1.11 seen, the family never):", "",
                  "| held-out family | runs | util MAE (pts) | memory MAPE | step MdAPE | GPU-bound step MdAPE | "
                  "step ratio (geo) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for g, s in lo["families"].items():
            lines.append(f"| {g} | {s.get('n', '–')} | {_fmt(s, 'mae')} | {_fmt(s, 'memory_mape', pct=True)} | "
                         f"{_fmt(s, 'step_mdape', pct=True)} | {_fmt(s, 'gpu_bound_step_mdape', pct=True)} | "
                         f"{_fmt(s, 'step_geomean_ratio', digits=2)} |")
        lines.append(f"| **all** | {a.get('n', '–')} | **{_fmt(a, 'mae')}** | **{_fmt(a, 'memory_mape', pct=True)}** | "
                     f"{_fmt(a, 'step_mdape', pct=True)} | **{_fmt(a, 'gpu_bound_step_mdape', pct=True)}** "
                     f"({a.get('gpu_bound_rows', 0)} runs) | {_fmt(a, 'step_geomean_ratio', digits=2)} |")
        lines.append(f"| a constant (Lucid's mean) | | {_fmt(c, 'mae')} | {_fmt(c, 'memory_mape', pct=True)} | "
                     f"{_fmt(c, 'step_mdape', pct=True)} | {_fmt(c, 'gpu_bound_step_mdape', pct=True)} | |")
    draws = doc["few_shot"]["draws"]
    if draws:
        maes = np.array([d["mae"] for d in draws])
        gb = np.array([d.get("gpu_bound_util_rmsle", np.nan) for d in draws])
        mem = np.array([d.get("memory_mape", np.nan) for d in draws])
        st = np.array([d.get("step_mdape", np.nan) for d in draws])
        worst = draws[int(np.argmax(maes))]
        lines += ["", f"Few-shot on Lucid: `gpucast calibrate` on 3 families' runs (from the environment "
                      f"fitted without Lucid), the other 4 families predicted; {len(draws)} draws of the 35:", "",
                  "| held-out families' metric | best draw | median | worst draw |", "| --- | ---: | ---: | ---: |",
                  f"| util MAE (pts) | {maes.min():.1f} | {np.median(maes):.1f} | {maes.max():.1f} |",
                  f"| GPU-bound util RMSLE | {np.nanmin(gb):.3f} | {np.nanmedian(gb):.3f} | {np.nanmax(gb):.3f} |",
                  f"| memory MAPE | {100 * np.nanmin(mem):.0f} % | {100 * np.nanmedian(mem):.0f} % | "
                  f"{100 * np.nanmax(mem):.0f} % |",
                  f"| step MdAPE | {100 * np.nanmin(st):.0f} % | {100 * np.nanmedian(st):.0f} % | "
                  f"{100 * np.nanmax(st):.0f} % |", "",
                  f"Worst draw: calibrated on {', '.join(worst['calibrated_on'])} (util MAE {worst['mae']:.1f}).", "",
                  "| calibrated on | held-out util MAE | memory MAPE | step MdAPE |", "| --- | ---: | ---: | ---: |"]
        for d in draws:
            lines.append(f"| {', '.join(d['calibrated_on'])} | {d['mae']:.1f} | {_fmt(d, 'memory_mape', pct=True)} | "
                         f"{_fmt(d, 'step_mdape', pct=True)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
