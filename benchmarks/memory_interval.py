"""How wide the peak-memory interval must be to hold the measured peak, from held-out residuals.

A scheduler packs by the upper end of ``Prediction.memory_interval``: a run whose measured peak lies
above it could be an OOM in someone else's job. This script takes every measured set with peak
memory (our H200 steps, Lucid's RTX 3090 solo runs, GPUMemNet's MLP runs on an A100-40GB: the
records of ``benchmarks/gate_sets.py``, predicted with the constants in force), the residual
``r = ln(measured / predicted)`` of each run, and, one-sided split-conformal (Lei et al., JASA 2018;
``gpucast.learn.intervals``), the factor ``exp(q)`` where ``q`` is the ``ceil((n + 1) a)``-th smallest
residual, so that ``predicted x factor`` holds the measured peak with probability >= ``a`` for a run
exchangeable with these. Held out by group (a workload family, a model, an architecture): each
group's runs are checked against the factor from the other groups' runs only, the honest coverage
for a family never seen. The runs are pooled; the MLP set is sampled (80 runs, even per
architecture), so that 2,978 near-identical MLP runs do not decide the interval. The lower end is the same
at ``1 - a`` from below.

    .venv/bin/python benchmarks/memory_interval.py [--level 0.95] [--out benchmarks/results]

It prints the factors (what ``EstimatorConfig.memory_range`` should hold) and per set the held-out
coverage of the upper end at those factors and at the constants in force.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = Path(__file__).resolve().parent / "results"
SETS = ("h200-runs", "lucid-solo", "gpumemnet-mlp")


def residuals(progress=None) -> dict[str, list[tuple[str, float, float]]]:
    """Per set: (group, ln(measured / predicted), measured / interval top) of every run with memory."""
    import gate_sets

    out = {}
    for name in SETS:
        fn = gate_sets.SETS[name][0]
        recs = fn(progress=progress) if name != "gpumemnet-mlp" else fn(sample=80, progress=progress)
        out[name] = [(r["group"], math.log(r["memory"][1] / r["memory"][0]), r["memory"][1] / r["memory_hi"])
                     for r in recs if r.get("memory") and r["memory"][0] > 0 and r["memory"][1] > 0]
    return out


def upper(r: np.ndarray, level: float) -> float | None:
    """One-sided split-conformal bound: the ceil((n + 1) level)-th smallest residual."""
    r = np.sort(r)
    k = math.ceil((len(r) + 1) * level)
    return None if k > len(r) or not len(r) else float(r[k - 1])


def held_out(res: dict, level: float) -> dict[str, dict]:
    """Per set: coverage of each group's runs by the bound from every other group's runs (all sets)."""
    everything = [(s, g, r) for s, rows in res.items() for g, r, _ in rows]
    out = {}
    for s, rows in res.items():
        hits = []
        for g in sorted({g for g, _, _ in rows}):
            rest = np.array([r for s2, g2, r in everything if not (s2 == s and g2 == g)])
            q = upper(rest, level)
            hits += [r <= q for g2, r, _ in rows if g2 == g]
        in_force = [x <= 1.0 for _, _, x in rows]
        out[s] = {"runs": len(rows), "held_out_cover": float(np.mean(hits)), "in_force_cover": float(np.mean(in_force)),
                  "median_ratio": float(np.exp(-np.median([r for _, r, _ in rows]))),
                  "under": float(np.mean([r > 0 for _, r, _ in rows]))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    if not 0.5 < a.level < 1:
        print("error: --level must be between 0.5 and 1", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    res = residuals()
    pooled = np.array([r for rows in res.values() for _, r, _ in rows])
    hi = math.exp(upper(pooled, a.level))
    lo = math.exp(-upper(-pooled, a.level))
    per = held_out(res, a.level)
    lines = ["# Peak-memory interval from held-out residuals", "",
             f"`.venv/bin/python benchmarks/memory_interval.py --level {a.level}`: one-sided split-conformal "
             f"bounds of ln(measured / predicted) over {len(pooled)} runs ({', '.join(f'{s} {len(v)}' for s, v in res.items())}).",
             "", f"Factors at level {a.level}: lower **{lo:.3f}**, upper **{hi:.3f}** x the predicted peak.", "",
             "| set | runs | median pred / meas | share under-predicted | upper end holds the run: in force | "
             "held out by group, at the bound of the other groups |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for s, v in per.items():
        lines.append(f"| {s} | {v['runs']} | {v['median_ratio']:.2f} | {100 * v['under']:.0f} % | "
                     f"{100 * v['in_force_cover']:.0f} % | {100 * v['held_out_cover']:.0f} % |")
    text = "\n".join(lines) + "\n"
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "memory_interval.md").write_text(text)
    (a.out / "memory_interval.json").write_text(json.dumps({"level": a.level, "lower": lo, "upper": hi,
                                                            "sets": per}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
