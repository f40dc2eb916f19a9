"""The co-location model (gpucast.cluster.timeshare) against Gavel's measured co-located pairs.

Fits the model's constants and per-job timeline corrections on every measured pair (K80, P100,
V100) and packages them (``src/gpucast/data/gavel/timeshare_fit.json``: what the simulator uses),
then reports held-out error two ways, each against a constant (the training pairs' mean slowdown)
and the utilization-only model refitted on the same pairs:

* held-out pairs: 5 random folds of the unordered pairs; a test pair was never measured, its
  two job types were (with other partners): the case of a cluster that measured some pairs;
* held-out families: one job family at a time, no pair with a job of that family measured: the
  case of a job type never seen.

    .venv/bin/python benchmarks/colocation.py   # ~10 min on a 2-core machine
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results"


def main() -> int:
    from rich.progress import Progress

    import gpucast
    from gpucast.cluster import timeshare
    from gpucast.cluster.timeshare import fit as tf

    t0 = time.time()
    # the model's starting constants, the relief of a light neighbour off its bound at 0 (where a
    # finite-difference step cannot leave it)
    start = timeshare.Constants(relief=1.0)
    with Progress() as bar:
        task = bar.add_task("fitting on every pair", total=1)
        c, corr, ins = tf.fit_all(start=start)
        bar.update(task, completed=1)
        reports = {}
        for kind in ("pairs", "families"):
            task = bar.add_task(f"held-out {kind}", total=None)
            reports[kind] = tf.holdout_report(kind, start=start,
                                              progress=lambda i, n, task=task: bar.update(task, completed=i, total=n))
    doc = {"constants": c.as_dict(), "start": start.as_dict(), "in_sample": ins,
           "corrections": [{"gpu": g, "job_type": jt, "busy_logit": round(a, 5), "log_gaps": round(b, 5)}
                           for (g, jt), (a, b) in sorted(corr.items())],
           "provenance": {"data": "Gavel simulation_throughputs.json (MIT), measured co-located pairs on K80/P100/V100",
                          "command": "benchmarks/colocation.py", "gpucast": gpucast.__version__,
                          "date": datetime.date.today().isoformat()}}
    out = REPO_ROOT / "src" / "gpucast" / "data" / "gavel" / "timeshare_fit.json"
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    md = ["### Co-location model vs Gavel's measured pairs", "",
          "`.venv/bin/python benchmarks/colocation.py` (slowdown = solo / co-located throughput, fitted on speeds; "
          f"{ins['n_observations']} observations: both jobs of each measured pair on K80, P100, V100).", "",
          "| held out | observations | co-location model RMSE | constant RMSE | utilization-only RMSE | "
          "model vs constant |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind, label in (("pairs", "pairs (5 folds)"), ("families", "job families (7 folds)")):
        r = reports[kind]
        md.append(f"| {label} | {r['n_observations']} | {r['rmse']:.3f} | {r['constant_rmse']:.3f} | "
                  f"{r['util_model_rmse']:.3f} | {-100 * r['reduction_vs_constant']:+.1f}% |")
    md += ["", "Per GPU type, held out by pair (the fits' residuals are speeds, 1 / slowdown): per-job speed MAE "
           "against a constant (the mean speed of the fold's training pairs on that GPU), mean speeds, and the "
           "pairs whose sharing decision (summed speed above 1) comes out right: of all pairs, of the pairs whose "
           f"measured sum is more than {tf.CLEAR_MARGIN:g} from 1 (`timeshare.fit.CLEAR_MARGIN`: nearer, a "
           "decision cannot be told from measurement noise), and sharing every pair; and the decisions' worth "
           "(measured gain of the pairs shared over the oracle's).", "",
           "| GPU | speeds | speed MAE | constant | mean speed measured / predicted | decisions right | "
           "clear pairs: n, right | sharing every pair: right | decisions' worth |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for g, v in reports["pairs"]["by_gpu"].items():
        md.append(f"| {g} | {v['speeds']} | {v['mae']:.3f} | {v['constant_mae']:.3f} | {v['mean_speed']:.3f} / "
                  f"{v['predicted_mean_speed']:.3f} | {100 * v['decisions_right']:.0f}% | {v['clear_pairs']}, "
                  f"{100 * v['decisions_right_clear']:.0f}% | {100 * v['always_share_right']:.0f}% | "
                  f"{100 * v['worth']:.0f}% |")
    bg = reports["pairs"]["by_gpu"].values()
    pooled = lambda key, n="speeds": sum(v[key] * v[n] for v in bg) / sum(v[n] for v in bg)  # noqa: E731
    md += ["", f"Sharing decisions right over every held-out pair: {100 * pooled('decisions_right'):.0f}% (sharing "
           f"every pair: {100 * pooled('always_share_right'):.0f}%); over the clear pairs: "
           f"{100 * pooled('decisions_right_clear', 'clear_pairs'):.0f}%.", "",
           f"In-sample (every pair): RMSE {ins['rmse']:.3f} against {ins['constant_rmse']:.3f} for a constant.", "",
           "Fitted constants: " + ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in c.as_dict().items()) + ".", "",
           "Per held-out family: " + "; ".join(f"{f['held_out']} {f['rmse']:.2f} vs {f['constant_rmse']:.2f}"
                                              for f in reports["families"]["folds"]) + ".", "",
           f"Wall time {time.time() - t0:.0f} s.", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "colocation.md").write_text("\n".join(md), encoding="utf-8")
    (RESULTS / "colocation.json").write_text(json.dumps({"reports": reports, "fit": doc}, indent=1) + "\n",
                                             encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
