"""Which GPU type is cheapest per epoch for each of Gavel's job types: gpucast advise against measurement.

For every Gavel job type (model and batch size) measured alone on one K80, P100 and V100
(``data/measured/gavel/simulation_throughputs.json``), the measured cheapest GPU per epoch is
``argmin price / throughput`` with the prices Gavel's cost policies used (the packaged
``gavel-2020`` table: $0.45, $1.46, $2.48 per GPU-hour). gpucast's pick is what ``gpucast.advise``
recommends with no constraint (the cheapest per epoch) over those three GPUs, at the job type's own
batch size, fp32, one GPU, no sharing, with the job as Gavel's scripts run it
(:mod:`gpucast.cluster.gavel`: loaders, loops, PyTorch 1.4).

Three environments (the benchmark says which made each figure):

* ``packaged``: the environment gpucast ships, fitted on all three shared sets (Gavel's solo step
  times among them: in-sample for the step times, not for the choice);
* ``without-gavel``: the same fit with Gavel's set left out (``learn.set_fit.fit_sets(without=
  "gavel")``): a cluster gpucast has never seen;
* ``calibrated-other-families``: for each job family (ResNet-18, LM, ...), the packaged environment
  calibrated (``gpucast.learn.calibrate``, per-GPU kernel factors included) on Gavel's measured step
  times of the *other* families only: a cluster that has measured a few other jobs on each GPU
  type, advising on a family it has never run;
* ``calibrated-all-families``: calibrated on every Gavel job type's step times, those advised on
  included (in-sample: an upper bound on what calibration gives, not a held-out figure).

Also printed: the agreement of two rules that need no prediction (always the cheapest GPU-hour,
always the fastest GPU), so the figure can be read against them; and, per job type, the measured
and predicted cost ratios.

Run (from the repository root)::

    .venv/bin/python benchmarks/advise_gavel.py [--shared data/measured] [--envs packaged,without-gavel,calibrated-other-families,calibrated-all-families]
        [--out benchmarks/results/advise_gavel.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO_ROOT / "data" / "measured"
RESULTS = Path(__file__).resolve().parent / "results"
GPUS = ("k80", "p100", "v100-16gb")


def measured(shared: Path) -> dict[str, dict[str, float]]:
    """``{job type: {gpu: steps/s}}`` for single-GPU job types measured on all three GPUs."""
    from gpucast.cluster.gavel import MAPPING, solo_throughputs, split_job_type

    out: dict[str, dict[str, float]] = {}
    for (job_type, scale, gpu), tput in solo_throughputs(shared / "gavel" / "simulation_throughputs.json").items():
        if scale == 1 and split_job_type(job_type)[0] in MAPPING:
            out.setdefault(job_type, {})[gpu] = tput
    return {k: v for k, v in sorted(out.items()) if set(v) == set(GPUS)}


def environments(names: list[str], shared: Path, say) -> dict:
    envs = {}
    for name in names:
        if name == "calibrated-all-families":
            from gpucast.learn.calibrate import calibrate
            from gpucast.learn.fit import Fitter
            from gpucast.learn.set_fit import rows_of

            say("capturing Gavel's job types")
            envs[name] = calibrate(Fitter(rows_of("gavel", shared)), cross_validate=False, label="gavel").env
        elif name == "calibrated-other-families":
            import numpy as np

            from gpucast.learn.calibrate import calibrate
            from gpucast.learn.fit import Fitter
            from gpucast.learn.set_fit import rows_of

            say("capturing Gavel's job types")
            f = Fitter(rows_of("gavel", shared))
            per = {}
            for fam in dict.fromkeys(f.groups):
                say(f"calibrating without {fam}")
                per[str(fam)] = calibrate(f, np.flatnonzero(f.groups != fam), cross_validate=False,
                                          label=f"gavel-without-{fam}").env
            envs[name] = per
        elif name == "packaged":
            envs[name] = None
        elif name == "without-gavel":
            from gpucast.learn.fit import Fitter
            from gpucast.learn.set_fit import fit_sets, rows_of

            fitters = {}
            for s in ("mlp", "lucid"):
                say(f"capturing the {s} set")
                fitters[s] = Fitter(rows_of(s, shared))
            say("fitting without Gavel")
            envs[name] = fit_sets(fitters, without="gavel")[0]
        else:
            raise SystemExit(f"advise_gavel: unknown environment {name!r} (packaged, without-gavel, "
                             f"calibrated-other-families, calibrated-all-families)")
    return envs


def run(shared: Path, env_names: list[str], say=lambda s: None) -> str:
    import gpucast
    from gpucast import Job
    from gpucast.advisor.prices import load
    from gpucast.cluster.gavel import job_fields, split_job_type

    prices = load("gavel-2020")
    usd = {g: prices.price(g).usd_per_gpu_hour for g in GPUS}
    meas = measured(shared)
    truth = {jt: min(GPUS, key=lambda g: usd[g] / t[g]) for jt, t in meas.items()}
    envs = environments(env_names, shared, say)
    picks: dict[str, dict[str, str]] = {}
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    for name, env in envs.items():
        picks[name], ratios[name] = {}, {}
        for i, jt in enumerate(meas, 1):
            say(f"{name}: advising {jt} ({i}/{len(meas)})")
            job = Job(**job_fields(jt))
            e = env[split_job_type(jt)[0]] if isinstance(env, dict) else env
            a = gpucast.advise(job, list(GPUS), counts=[1], batches=[job.batch_size], precisions=["fp32"],
                               share=False, prices=prices, samples_per_epoch=100_000, env=e)
            picks[name][jt] = a.best.gpu if a.best is not None else "none"
            cost = {o.gpu: o.cost_per_epoch for o in a.options}
            ratios[name][jt] = {g: cost[g] / cost["v100-16gb"] for g in GPUS if g in cost}
    n = len(meas)
    cheapest_hour = min(GPUS, key=usd.get)
    rules = {"always the cheapest GPU-hour (K80)": {jt: cheapest_hour for jt in meas},
             "always the fastest GPU (V100)": {jt: "v100-16gb" for jt in meas}}
    lines = [f"Gavel job types measured on K80, P100 and V100: {n}; prices gavel-2020 "
             f"(K80 ${usd['k80']}, P100 ${usd['p100']}, V100 ${usd['v100-16gb']} per GPU-hour).", "",
             "| who picks the cheapest GPU per epoch | agrees with the measurement |", "| --- | ---: |"]
    for name in envs:
        ok = sum(picks[name][jt] == truth[jt] for jt in meas)
        lines.append(f"| gpucast advise, environment `{name}` | {ok}/{n} ({ok / n:.0%}) |")
    for rule, p in rules.items():
        ok = sum(p[jt] == truth[jt] for jt in meas)
        lines.append(f"| {rule} | {ok}/{n} ({ok / n:.0%}) |")
    lines += ["", "Cost per epoch relative to the V100's (K80 / P100), measured and predicted:", "",
              "| job type | measured cheapest | " + " | ".join(f"{e} pick" for e in envs) + " | measured K80/P100 | "
              + " | ".join(f"{e} K80/P100" for e in envs) + " |",
              "| --- | --- | " + " | ".join("---" for _ in envs) + " | ---: | " + " | ".join("---:" for _ in envs) + " |"]
    for jt, t in meas.items():
        m = {g: (usd[g] / t[g]) / (usd["v100-16gb"] / t["v100-16gb"]) for g in GPUS}
        pred = [f"{ratios[e][jt].get('k80', float('nan')):.2f} / {ratios[e][jt].get('p100', float('nan')):.2f}"
                for e in envs]
        marks = [picks[e][jt] + ("" if picks[e][jt] == truth[jt] else " (x)") for e in envs]
        lines.append(f"| {jt} | {truth[jt]} | " + " | ".join(marks) + f" | {m['k80']:.2f} / {m['p100']:.2f} | "
                     + " | ".join(pred) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                   help="the folder of the measured sets (default: data/measured in the repository)")
    p.add_argument("--envs", default="packaged,without-gavel,calibrated-other-families,calibrated-all-families")
    p.add_argument("--out", type=Path, default=RESULTS / "advise_gavel.md")
    args = p.parse_args(argv)
    if not (args.shared / "gavel" / "simulation_throughputs.json").is_file():
        print(f"advise_gavel: {args.shared}/gavel/simulation_throughputs.json not found (pass --shared)",
              file=sys.stderr)
        return 2
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("advise_gavel") as status:
        text = run(args.shared, [e.strip() for e in args.envs.split(",") if e.strip()], status.update)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
