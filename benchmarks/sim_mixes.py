"""What gpucast's predictions buy a cluster, on workload mixes that look like real clusters, with
gpucast's measured error, next to the reference work's published gains.

For each co-location world (``--colocation``: ``measured-pairs``, the model fitted on current-GPU
pairs of real scripts; ``data-center``, the same with exclusive time slices on data-center GPUs, as
gpucast predicts them, its policies predicting so too; and ``gavel``, fitted on Gavel's
K80/P100/V100 pairs, a sensitivity run),
each trace (``gavel``, ``philly-mix``, ``pai-mix``) on 128 x v100-16gb (16 nodes of 8), at the
trace's own load and at a queue-keeping load (arrivals compressed to offer ``--heavy`` times the
cluster's capacity), every policy: cluster GPU utilization as NVML reads it (over the busy period,
as the reference work measures a loaded cluster; over all time from 0 to the last finish; and of
the allocated GPUs), makespan, mean and p99 JCT, mean queueing delay, OOM failures. ``slot`` is
FIFO with EASY backfilling (Slurm's default), ``slot-fifo`` strict FIFO. Then the error sweep (in
the first world): the truth's error scaled from 0 to 2x the measured one, for ``slot``,
``gpucast`` and ``oracle`` on both mixes at the queue-keeping load. Then out-of-memory failures over
seeds (``--oom-seeds``, in the first world): ``slot`` and ``gpucast`` on both mixes at both loads
for each seed (the seed draws the truth's errors), and ``gpucast`` with its memory bound at the
told 80 % interval's upper end (``memory_risk`` = 1 - Phi(1.2816), the rule before issue 25) for
comparison. Also the mixes' utilization distributions against their targets (statistics and an
HTML plot).

Writes ``benchmarks/results/sim_mixes.{md,json}`` and ``sim_mixes.html`` (gitignored: plotly is
inlined).

    .venv/bin/python benchmarks/sim_mixes.py [--heavy 3] [--gpus 128] [--policies ...] [--oom-seeds 0,1,2,3,4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results"
POLICIES = ("slot", "slot-fifo", "profiling", "horus", "packing", "gpucast", "oracle")
WORLDS = ("measured-pairs", "data-center", "gavel")
TRACES = ("gavel", "philly-mix", "pai-mix")
SWEEP = (0.0, 0.5, 1.0, 2.0)
OOM_SEEDS = "0,1,2,3,4"
# The reference work's published gains (figures as quoted in issue 12 of this project: Yeung et
# al.'s utilization-prediction scheduler): utilization over slot and over 1-minute profiling,
# makespan, job wait. Our runs are not theirs: shown for comparison, not reproduced.
REFERENCE = {"util_vs_slot": "+61.5 % (up to)", "util_vs_profiling": "+47.1 %",
             "makespan": "-23.7 to -30.7 %", "wait": "-68.3 %"}


def _h(s):
    return "-" if s is None else f"{s / 3600:.0f}"


def _pct(a, b):
    return None if a is None or not b else 100.0 * (a / b - 1.0)


def _f(x, fmt="{:+.1f}%"):
    return "-" if x is None else fmt.format(x)


class _Null:
    """A stand-in for the progress bar when nothing is simulated."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *a, **k):
        return 0

    def advance(self, *a, **k):
        pass


def run_table(trace, n_gpus, policies, errors, progress, world=None, seed=0, params=None):
    """One summary per policy; ``params``: policy name -> its parameters (a name may carry a
    suffix after ``@`` to run one policy twice with different parameters)."""
    from gpucast import cluster
    from gpucast.cluster import metrics

    out = []
    for p in policies:
        t = time.time()
        res = cluster.simulate(trace, n_gpus, p.split("@")[0], seed=seed, error_sigma=errors, colocation=world,
                               **(params or {}).get(p, {}))
        s = metrics.summarize(res)
        s["policy"] = p
        s["wall_s"] = time.time() - t
        out.append(s)
        progress()
    return out


def table_md(rows):
    base = next(r for r in rows if r["policy"] == "slot")
    prof = next((r for r in rows if r["policy"] == "profiling"), None)
    orc = next((r for r in rows if r["policy"] == "oracle"), None)

    def vs(r, other, key):
        return _f(_pct(r[key], other[key])) if other else "-"

    md = ["| policy | util % (busy period) | vs slot | vs profiling | vs oracle | util % (queued period) | vs slot | "
          "vs profiling | util % (all time) | util % (allocated GPUs) | makespan h | vs slot | JCT mean h | vs slot | "
          "JCT p99 h | queue mean h | vs slot | OOM |",
          "| --- |" + " ---: |" * 17]
    for r in rows:
        q = r.get("gpu_util_queued_pct")
        md.append(f"| {r['policy']} | {r['gpu_util_busy_pct']:.1f} | {vs(r, base, 'gpu_util_busy_pct')} | "
                  f"{vs(r, prof, 'gpu_util_busy_pct')} | {vs(r, orc, 'gpu_util_busy_pct')} | "
                  f"{_f(q, '{:.1f}')} | {vs(r, base, 'gpu_util_queued_pct') if q is not None else '-'} | "
                  f"{vs(r, prof, 'gpu_util_queued_pct') if q is not None else '-'} | {r['gpu_util_pct']:.1f} | "
                  f"{r['gpu_util_allocated_pct']:.1f} | {_h(r['makespan_s'])} | {vs(r, base, 'makespan_s')} | "
                  f"{_h(r['jct_mean_s'])} | {vs(r, base, 'jct_mean_s')} | {_h(r['jct_p99_s'])} | "
                  f"{_h(r['queue_delay_mean_s'])} | {vs(r, base, 'queue_delay_mean_s')} | {r['oom_failures']} |")
    md.append(f"| reference work (published) | | {REFERENCE['util_vs_slot']} | {REFERENCE['util_vs_profiling']} | | | | | | | | "
              f"{REFERENCE['makespan']} | | | | | {REFERENCE['wait']} | |")
    return md


def mix_stats(traces):
    from gpucast.cluster import mixes
    from gpucast.cluster.truth import Profile, Truth, predict_cached

    truth = Truth()
    out = {}
    for name, tr in traces.items():
        if name not in mixes.MIX_NAMES:
            continue
        gpu = mixes.load(name).gpu
        out[name] = {"predicted": mixes.statistics(tr, lambda j: predict_cached(Profile.from_trace_job(j), gpu).util_pct),
                     "truth": mixes.statistics(tr, lambda j: truth.behaviour(Profile.from_trace_job(j), gpu).util_pct),
                     "utils_truth": [truth.behaviour(Profile.from_trace_job(j), gpu).util_pct for j in tr.jobs]}
    return out


def write_html(stats, path):
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    from scipy.stats import beta

    from gpucast.cluster import mixes

    fig = make_subplots(rows=1, cols=len(stats), subplot_titles=list(stats))
    for k, (name, s) in enumerate(stats.items(), 1):
        fig.add_trace(go.Histogram(x=s["utils_truth"], xbins=dict(start=0, end=100, size=5), histnorm="probability density",
                                   name=f"{name}: jobs (simulated truth)"), row=1, col=k)
        a, b = mixes.load(name).beta()
        x = np.linspace(0.5, 99.5, 200)
        fig.add_trace(go.Scatter(x=x, y=beta.pdf(x / 100, a, b) / 100, name=f"{name}: target Beta({a:.2f}, {b:.2f})"),
                      row=1, col=k)
        fig.update_xaxes(title_text="GPU utilization %", row=1, col=k)
    fig.update_layout(title="Workload mixes: per-job utilization against the target", height=450)
    fig.write_html(path, include_plotlyjs=True, full_html=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--heavy", type=float, default=3.0, help="queue-keeping offered load (x cluster capacity)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--oom-seeds", default=OOM_SEEDS,
                    help="seeds of the out-of-memory table (comma-separated; empty: no table)")
    ap.add_argument("--memory-risk", type=float, default=None,
                    help="gpucast's memory_risk (default: the policy's own, "
                         "gpucast.cluster.policies.gpucast.DEFAULT_MEMORY_RISK)")
    ap.add_argument("--colocation", default=",".join(WORLDS), help="co-location worlds, comma-separated")
    ap.add_argument("--host-contention", type=float, default=None,
                    help="sensitivity run: the co-location model's host constant set to this (0: every job "
                         "has CPU cores of its own) instead of the one fitted on Gavel's servers")
    ap.add_argument("--out-name", default="sim_mixes", help="results file stem under benchmarks/results")
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite the markdown from the results JSON of an earlier run (no simulation)")
    args = ap.parse_args(argv)
    from rich.progress import Progress

    from statistics import NormalDist

    from gpucast.cluster import errors, timeshare, traces as tr_mod
    from gpucast.cluster.policies import gpucast as gpucast_policy

    if args.host_contention is not None:
        timeshare.set_constants(timeshare.CURRENT.with_(host=args.host_contention))

    policies = args.policies.split(",")
    names = args.traces.split(",")
    measured = errors.measured()
    worlds = [w for w in args.colocation.split(",") if w]
    risk = args.memory_risk if args.memory_risk is not None else gpucast_policy.DEFAULT_MEMORY_RISK
    old_risk = 1.0 - NormalDist().cdf(gpucast_policy.TOLD_Z)     # the told 80 % interval's upper end
    params = {"gpucast": {"memory_risk": risk}, "gpucast@80": {"memory_risk": old_risk}}
    seeds = [int(x) for x in args.oom_seeds.split(",") if x.strip()]
    mixes_run = [n for n in ("philly-mix", "pai-mix") if n in names]
    doc = {"gpus": args.gpus, "heavy_load": args.heavy, "errors": measured.as_dict(), "tables": {}, "sweep": {},
           "reference": REFERENCE, "worlds": worlds, "memory_risk": risk, "oom_seeds": {}}
    t0 = time.time()
    n_sweep = 0 if args.no_sweep else 2 * len(SWEEP) * 3
    n_seeds = len(seeds) * len(mixes_run) * 2 * 3
    if args.render_only:
        doc = json.loads((RESULTS / f"{args.out_name}.json").read_text(encoding="utf-8"))
        stats = doc.get("mixes", {})
    with (Progress() if not args.render_only else _Null()) as bar:
        task = bar.add_task("simulating", total=len(worlds) * len(names) * 2 * len(policies) + n_sweep + n_seeds)
        step = lambda: bar.advance(task)  # noqa: E731
        loaded = {} if args.render_only else {n: tr_mod.load_trace(n, gpus=args.gpus) for n in names}
        for w in worlds if not args.render_only else ():
            for n in names:
                own = tr_mod.offered_load(loaded[n], args.gpus)
                for label, trace in ((f"own load {own:.2f}", loaded[n]),
                                     (f"queue-keeping load {args.heavy:g}",
                                      tr_mod.at_load(loaded[n], args.gpus, args.heavy))):
                    doc["tables"].setdefault(w, {}).setdefault(n, {})[label] = run_table(
                        trace, args.gpus, policies, measured, step, w, params=params)
        if not args.no_sweep and not args.render_only:
            for n in ("philly-mix", "pai-mix"):
                if n not in loaded:
                    continue
                heavy = tr_mod.at_load(loaded[n], args.gpus, args.heavy)
                for f in SWEEP:
                    rows = run_table(heavy, args.gpus, ["slot", "gpucast", "oracle"], measured.scaled(f), step,
                                     worlds[0], params=params)
                    doc["sweep"].setdefault(n, []).append({"factor": f, "rows": rows})
        if not args.render_only:
            for n in mixes_run:
                own = tr_mod.offered_load(loaded[n], args.gpus)
                for label, trace in ((f"own load {own:.2f}", loaded[n]),
                                     (f"queue-keeping load {args.heavy:g}",
                                      tr_mod.at_load(loaded[n], args.gpus, args.heavy))):
                    for sd in seeds:
                        rows = run_table(trace, args.gpus, ["slot", "gpucast", "gpucast@80"], measured, step,
                                         worlds[0], seed=sd, params=params)
                        doc["oom_seeds"].setdefault(n, {}).setdefault(label, []).append({"seed": sd, "rows": rows})
    if not args.render_only:
        stats = mix_stats(loaded)
        doc["mixes"] = {k: {q: v for q, v in s.items() if q != "utils_truth"} for k, s in stats.items()}
    command = doc.get("command") if args.render_only else None
    if not command:
        command = f".venv/bin/python benchmarks/sim_mixes.py {' '.join(argv if argv is not None else sys.argv[1:])}".strip()
        doc["command"] = command
    hc = ("" if args.host_contention is None else
          f", co-location host contention {args.host_contention:g} instead of the fitted {timeshare.CURRENT.host:.3g}")
    md = [f"### Scheduling on workload mixes ({args.gpus} x v100-16gb, measured error{hc})", "",
          f"`{command}`" + " (seed 0; error: " + measured.label()
          + f"; `gpucast` memory_risk {doc.get('memory_risk', risk):g}). "
          "Utilization is what NVML would read, averaged over all GPUs: over the busy period (from the first "
          "arrival to the last finish, stretches with no job queued or running left out: the reference work's "
          "measure for a loaded cluster), over the queued period (while some job waits to start: the cluster "
          "holding more work than it runs), over all time (from 0 to the last finish), and over the GPUs holding "
          "a job. `slot` is FIFO with EASY backfilling (exact time limits), `slot-fifo` strict FIFO. The reference "
          "row is the published gains of the reference work, not a run of ours.", ""]
    for w, by_trace in doc["tables"].items():
        md += [f"### Co-location world: {w}", ""]
        for n, by_load in by_trace.items():
            for label, rows in by_load.items():
                md += [f"#### {n}, {label} ({w})", ""] + table_md(rows) + [""]
    if doc["sweep"]:
        md += ["#### How the gain falls as prediction error grows (queue-keeping load)", "",
               "| mix | error (x measured) | gpucast util (busy) vs slot | oracle util (busy) vs slot | "
               "gpucast util (queued) vs slot | oracle util (queued) vs slot | "
               "gpucast allocated util vs slot | gpucast JCT mean vs slot | gpucast OOM |",
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for n, pts in doc["sweep"].items():
            for p in pts:
                r = {x["policy"]: x for x in p["rows"]}
                s, g, o = r["slot"], r["gpucast"], r["oracle"]
                md.append(f"| {n} | {p['factor']:g} | {_f(_pct(g['gpu_util_busy_pct'], s['gpu_util_busy_pct']))} | "
                          f"{_f(_pct(o['gpu_util_busy_pct'], s['gpu_util_busy_pct']))} | "
                          f"{_f(_pct(g['gpu_util_queued_pct'], s['gpu_util_queued_pct']))} | "
                          f"{_f(_pct(o['gpu_util_queued_pct'], s['gpu_util_queued_pct']))} | "
                          f"{_f(_pct(g['gpu_util_allocated_pct'], s['gpu_util_allocated_pct']))} | "
                          f"{_f(_pct(g['jct_mean_s'], s['jct_mean_s']))} | {g['oom_failures']} |")
        md.append("")
    if doc.get("oom_seeds"):
        r0 = doc.get("memory_risk", risk)
        md += [f"#### Out-of-memory failures over seeds ({worlds[0] if worlds else '?'})", "",
               f"`gpucast` with its memory bound at `memory_risk` {r0:g} (the chance, under the error the told "
               "memory interval carries, that a job's true peak exceeds what the policy reserves for it), and with "
               "the told 80 % interval's upper end as the bound (`memory_risk` 1 - Phi(1.2816) = 0.09999, the rule before "
               "issue 25): OOM failures "
               "per seed (the seed draws the truth's errors), and `gpucast`'s change from `slot` at that seed.", "",
               "| mix | load | seed | gpucast OOM | gpucast (80 % upper end) OOM | gpucast util (queued) vs slot | "
               "gpucast (80 % upper end) util (queued) vs slot | gpucast JCT mean vs slot | gpucast queue mean vs slot |",
               "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for n, by_load in doc["oom_seeds"].items():
            for label, pts in by_load.items():
                tot = [0, 0]
                for p in pts:
                    r = {x["policy"]: x for x in p["rows"]}
                    s, g, g80 = r["slot"], r["gpucast"], r["gpucast@80"]
                    tot[0] += g["oom_failures"]
                    tot[1] += g80["oom_failures"]
                    md.append(f"| {n} | {label} | {p['seed']} | {g['oom_failures']} | {g80['oom_failures']} | "
                              f"{_f(_pct(g['gpu_util_queued_pct'], s['gpu_util_queued_pct']))} | "
                              f"{_f(_pct(g80['gpu_util_queued_pct'], s['gpu_util_queued_pct']))} | "
                              f"{_f(_pct(g['jct_mean_s'], s['jct_mean_s']))} | "
                              f"{_f(_pct(g['queue_delay_mean_s'], s['queue_delay_mean_s']))} |")
                md.append(f"| {n} | {label} | all {len(pts)} | **{tot[0]}** | **{tot[1]}** | | | | |")
        md.append("")
    if stats:
        md += ["#### The mixes' utilization (per job, and weighted by GPU-hours)", "",
               "| mix | target | predicted mean | predicted median | predicted GPU-hour mean | simulated-truth mean | "
               "truth median | truth GPU-hour mean | jobs under 100 % |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        from gpucast.cluster import mixes

        for n, s in stats.items():
            m = mixes.load(n)
            tgt = f"mean {m.mean:.0%}" if m.mean is not None else f"median {m.median:.0%}"
            p, t = s["predicted"], s["truth"]
            md.append(f"| {n} | {tgt} ({m.source.split(':')[0]}) | {p['mean_pct']:.1f} | {p['median_pct']:.1f} | "
                      f"{p['gpu_hour_mean_pct']:.1f} | {t['mean_pct']:.1f} | {t['median_pct']:.1f} | "
                      f"{t['gpu_hour_mean_pct']:.1f} | {t['share_under_100_pct']:.1f}% |")
        md.append("")
        if not args.render_only:
            write_html(stats, RESULTS / f"{args.out_name}.html")
    md.append(f"Wall time {doc['wall_s']:.0f} s." if args.render_only else f"Wall time {time.time() - t0:.0f} s.")
    doc.setdefault("wall_s", time.time() - t0)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out_name}.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (RESULTS / f"{args.out_name}.json").write_text(json.dumps(doc, indent=1, default=float) + "\n", encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
