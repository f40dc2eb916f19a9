"""Per Gavel job type: gpucast's predicted step time against Gavel's measured solo throughputs,
with the packaged environment (no fit).

Every single-GPU solo row of Gavel's ``simulation_throughputs.json`` (K80/P100/V100) becomes a job
through :func:`gpucast.learn.shared_sets.gavel_rows` (the mapping and surroundings of
:mod:`gpucast.cluster.gavel`) and is predicted once with
``Fitter(rows).predict(Environment.default())``: the packaged constants, nothing refitted. Prints,
per job type, every row (measured and predicted step time, ratio), the MdAPE and the geometric
mean of predicted/measured step time, and the same with Gavel's hosts as the packaged fit found
them (the second stage's per-set ``host_time_factor`` for Gavel, what ``stack.cpu_speed`` or
``probe-host`` would tell gpucast about those hosts). This is a check of the job definitions, not a fit: nothing
here feeds back into a constant.

Run (from the repository root)::

    .venv/bin/python benchmarks/gavel_types.py [--shared data/measured] [--out benchmarks/results/gavel_types.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO_ROOT / "data" / "measured"


def table(shared: Path) -> str:
    from gpucast.estimate.environment import Environment, fit_record
    from gpucast.learn import metrics
    from gpucast.learn.fit import Fitter
    from gpucast.learn.shared_sets import gavel_rows

    rows = gavel_rows(shared / "gavel" / "simulation_throughputs.json")
    f = Fitter(rows)
    pred = f.predict(Environment.default()).step_time_s
    host = next((st["per_set"]["gavel"]["host_time_factor"] for st in fit_record().get("stages", [])
                 if "gavel" in st.get("per_set", {})), None)
    hosted = f.predict(Environment.default().replace(host_time_factor=host)).step_time_s if host else None
    head = "| job type | rows | MdAPE | geo-mean ratio pred/meas | worst ratio |"
    rule = "| --- | ---: | ---: | ---: | ---: |"
    if hosted is not None:
        head += f" with Gavel's hosts (x{host:.2f}): MdAPE | geo-mean ratio |"
        rule += " ---: | ---: |"
    lines = [head, rule]

    def hosted_cols(s) -> str:
        if hosted is None:
            return ""
        return (f" {100 * metrics.mdape(hosted[s], f.step[s]):.0f} % | "
                f"{np.exp(np.mean(np.log(hosted[s] / f.step[s]))):.2f} |")
    detail = ["", "| row | measured ms | predicted ms | ratio |", "| --- | ---: | ---: | ---: |"]
    for g in dict.fromkeys(f.groups):
        s = f.groups == g
        r = pred[s] / f.step[s]
        lines.append(f"| {g} | {int(s.sum())} | {100 * metrics.mdape(pred[s], f.step[s]):.0f} % "
                     f"| {np.exp(np.mean(np.log(r))):.2f} | {metrics.worst_ratio(pred[s], f.step[s]):.1f}x |" + hosted_cols(s))
        for i in np.flatnonzero(s):
            detail.append(f"| {rows[i].label} | {1e3 * f.step[i]:.2f} | {1e3 * pred[i]:.2f} "
                          f"| {pred[i] / f.step[i]:.2f} |")
    r = pred / f.step
    lines.append(f"| all | {len(rows)} | {100 * metrics.mdape(pred, f.step):.0f} % | {np.exp(np.mean(np.log(r))):.2f} "
                 f"| {metrics.worst_ratio(pred, f.step):.1f}x |" + hosted_cols(np.ones(len(rows), bool)))
    return "\n".join(["# Gavel job types, packaged environment (no fit)", "",
                      "`.venv/bin/python benchmarks/gavel_types.py` (module docstring says what it does).", "",
                      *lines, *detail, ""])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                   help="the folder of the measured sets (default: data/measured in the repository)")
    p.add_argument("--out", type=Path, default=None, help="also write the tables to this Markdown file")
    args = p.parse_args(argv)
    text = table(args.shared)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
