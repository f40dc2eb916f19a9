"""Co-located pairs measured on an H200 against the co-location model (issue 40's heavy end on a
data-center GPU of today).

Reads the co-located groups of ``data/measurements/*.parquet`` (suite h200-v1: two jobs started
together on one H200, default time-slicing, each job's step time together and alone) and predicts
each job's speed (throughput together / alone) with :mod:`gpucast.cluster.timeshare` under its
packaged constants (``CURRENT``: fitted on Lucid's RTX 3090 pairs from predictions, resolved for the
H200 as gpucast predicts it, with exclusive time slices, and beside it as fitted, without; ``FITTED``:
Gavel's), from two kinds of timelines (:mod:`gpucast.cluster.timeshare.pairs`):

* **predicted**: gpucast's predictions alone, each job as the harness ran it
  (:func:`gpucast.profile.spec.as_run`) on the measuring VM's host (``stack.cpu_speed`` as
  ``benchmarks/h200_runs.py`` fitted it: read from ``benchmarks/results/h200_runs.json``, so run
  that first);
* **anchored**: the simulated step matched to the job's measured solo run.

Baseline: a constant, each job predicted at the mean measured speed of the other pairs' jobs.
Nothing is fitted here: 12 pairs are evidence, not a training set. Each pair's sharing decision
(share where the two speeds sum above 1) is scored against the measured sum.

    .venv/bin/python benchmarks/h200_colocation.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data" / "measurements"
RESULTS = REPO_ROOT / "benchmarks" / "results"


def load(data: Path):
    """(solos by job key, pairs, the host speed they are predicted at) from the measured rows."""
    from gpucast.cluster.timeshare.pairs import Pair, Solo
    from gpucast.job import Job
    from gpucast.profile.spec import as_run
    from gpucast.profile.suite_store import read_rows

    cpu_speed = json.loads((RESULTS / "h200_runs.json").read_text())["cpu_speed"]
    if not isinstance(cpu_speed, dict):  # an older results file: one speed for every collection
        cpu_speed = {}
    files = sorted(data.glob("*.parquet")) if data.is_dir() else [data]
    rows = [dict(r, collection=f.stem) for f in files for r in read_rows([f]) if r["status"] == "ok"]
    solo_rows = {r["job_key"]: r for r in rows if r["kind"] == "solo"}
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["kind"] == "colocated":
            groups.setdefault(r["group_id"], []).append(r)
    solos, pairs = {}, []
    for gid, members in sorted(groups.items()):
        if len(members) != 2:
            continue
        ends = []
        for r in sorted(members, key=lambda r: r["slot"]):
            s = solo_rows.get(r["job_key"])
            if s is None:
                break
            job = as_run(Job.from_dict(json.loads(r["job_json"])), cpu_speed.get(r["collection"]))
            key = f"{r['model']} b{r['batch_size']} {r['precision']}"
            solos[key] = Solo(key, r["model"], job, r["gpu_name"], s["step_time_mean_s"], s["util_mean_pct"])
            ends.append((solos[key], s["step_time_mean_s"] / r["step_time_mean_s"]))
        if len(ends) == 2:
            util = members[0]["combined_util_mean_pct"]
            pairs.append(Pair(ends[0][0], ends[1][0], ends[0][1], ends[1][1], util))
    return list(solos.values()), pairs, cpu_speed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--data", type=Path, default=DATA)
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    from gpucast.cluster import timeshare
    from gpucast.cluster.timeshare.pairs import predict, predicted_timelines, timelines

    solos, pairs, cpu_speed = load(a.data)
    if not pairs:
        print(f"error: no measured co-located pairs under {a.data}", file=sys.stderr)
        return 2
    tls = {"predicted": predicted_timelines(solos), "anchored": timelines(solos)}
    measured = [s for p in pairs for s in (p.speed_a, p.speed_b)]
    out = {"pairs": [], "summary": {}}
    preds = {}
    for tl_name, tl in tls.items():
        for c_name, c in (("CURRENT", timeshare.CURRENT.on("h200")), ("CURRENT, no cap", timeshare.CURRENT.on(None)),
                          ("FITTED", timeshare.FITTED)):
            sp, util = predict(pairs, tl, c)
            preds[(tl_name, c_name)] = (sp, util)
            flat = [float(sp[i, k]) for k in range(len(pairs)) for i in range(2)]
            out["summary"][f"{tl_name}/{c_name}"] = {
                "speed_mae": statistics.mean(abs(x - y) for x, y in zip(flat, measured)),
                "mean_predicted": statistics.mean(flat),
                "util_mae": statistics.mean(abs(float(util[k]) - (p.util_pct or 0)) for k, p in enumerate(pairs)),
                # sharing decisions (share where the summed speed is above 1) that come out as measured
                "decisions_right": statistics.mean(float((sp[0, k] + sp[1, k] > 1.0) == (p.speed_a + p.speed_b > 1.0))
                                                   for k, p in enumerate(pairs))}
    const = []
    for k in range(len(pairs)):
        others = [s for j, p in enumerate(pairs) if j != k for s in (p.speed_a, p.speed_b)]
        m = statistics.mean(others)
        const += [abs(m - pairs[k].speed_a), abs(m - pairs[k].speed_b)]
    out["summary"]["constant (other pairs' mean)"] = {"speed_mae": statistics.mean(const),
                                                      "mean_predicted": None, "util_mae": None,
                                                      "decisions_right": None}
    sp_main = preds[("predicted", "CURRENT")][0]
    lines = ["# Co-located pairs measured on an H200 vs the co-location model", "",
             "`.venv/bin/python benchmarks/h200_colocation.py` over the co-located groups of "
             "`data/measurements/*.parquet` (suite h200-v1; 2 jobs on one H200, default time-slicing). "
             "Speed = throughput together / alone. Predicted from gpucast's predictions alone (jobs as the "
             f"harness ran them, host speed per collection: " + ", ".join(f"{c} {v:.2f}" for c, v in sorted(cpu_speed.items())) + ") or anchored on the measured solo runs; constants CURRENT "
             "(Lucid RTX 3090 fit, as gpucast predicts an H200: exclusive time slices, `Constants.exclusive`; "
             "\"no cap\": as fitted on the GeForce card) and FITTED (Gavel's). The per-pair columns are "
             "predicted/CURRENT.", "",
             "| job A | job B | measured A | measured B | predicted A | predicted B |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for k, p in enumerate(pairs):
        lines.append(f"| {p.a.key} | {p.b.key} | {p.speed_a:.2f} | {p.speed_b:.2f} | {sp_main[0, k]:.2f} | "
                     f"{sp_main[1, k]:.2f} |")
        out["pairs"].append({"a": p.a.key, "b": p.b.key, "measured": [p.speed_a, p.speed_b],
                             "combined_util_pct": p.util_pct,
                             "predicted": {f"{t}/{c}": [float(v[0][0, k]), float(v[0][1, k])]
                                           for (t, c), v in preds.items()}})
    lines += ["", f"Measured mean speed {statistics.mean(measured):.2f} over {len(measured)} jobs.", "",
              "| timelines / constants | per-job speed MAE | mean predicted speed | combined util MAE (pts) | "
              "sharing decisions right |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for name, s in out["summary"].items():
        mp = "-" if s["mean_predicted"] is None else f"{s['mean_predicted']:.2f}"
        um = "-" if s["util_mae"] is None else f"{s['util_mae']:.1f}"
        dr = "-" if s["decisions_right"] is None else f"{100 * s['decisions_right']:.0f}%"
        lines.append(f"| {name} | {s['speed_mae']:.3f} | {mp} | {um} | {dr} |")
    text = "\n".join(lines) + "\n"
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "h200_colocation.json").write_text(json.dumps(out, indent=1) + "\n")
    (a.out / "h200_colocation.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
