"""Fit the Environment's default constants to the measured sets of data/measured and write them
to src/gpucast/data/environment_fit.json (values and provenance; Environment.default() lays them
over the priors).

The procedure is gpucast.learn.set_fit.fit_sets, two stages, each a fit with the published priors
(gpucast.learn.fit):
1. the MLP set (GPUMemNet, A100-40GB, 2,978 rows: utilization and nvidia-smi memory) moves the
   constants of in-memory loaders, copies, the loop's habits, idle kernels, the CUDA context and
   NVML's tick;
2. Gavel's solo throughputs (K80/P100/V100, 78 rows: step time, PyTorch 1.4) and Lucid's solo runs
   (RTX 3090, 35 rows: utilization, memory, step time, PyTorch 1.11), starting from stage 1, move
   the constants of the loaders the MLP set has no rows for, the PyTorch-1.x stack factors, the
   tick and the eager CUDA 11 context, jointly on step time and utilization, each set with a host
   factor of its own (recorded in the stage's per_set; the packaged host stays the reference).
Its held-out evaluation: benchmarks/leave_one_set_out.py (a whole set left out) and
benchmarks/accuracy.py (a group within a set left out).

    .venv/bin/python scripts/fit_environment.py [--shared data/measured] [--out PATH] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "src" / "gpucast" / "data" / "environment_fit.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO_ROOT / "data" / "measured",
                   help="the folder of the measured sets (default: data/measured in the repository)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    args = p.parse_args(argv)
    from gpucast.learn.set_fit import SETS, rows_of

    needed = {"mlp": "gpumemnet-mlp/runs.csv", "gavel": "gavel/simulation_throughputs.json",
              "lucid": "lucid-rtx3090/singles.csv"}
    for sub in needed.values():
        if not (args.shared / sub).is_file():
            print(f"fit_environment: {args.shared / sub} not found (pass --shared)", file=sys.stderr)
            return 2
    from rich.progress import Progress

    from gpucast.learn.fit import Fitter
    from gpucast.learn.set_fit import fit_sets

    with Progress(transient=True) as bar:
        fitters = {}
        for name in SETS:
            t = bar.add_task(f"capturing {name}", total=None)
            fitters[name] = Fitter(rows_of(name, args.shared),
                                   progress=lambda i, n, t=t: bar.update(t, completed=i, total=n))
        t = bar.add_task("fitting", total=None)
        env, info = fit_sets(fitters, say=lambda s: bar.update(t, description=s))
    values = info["values"]
    today = datetime.date.today().isoformat()
    rows = {k: len(f.rows) for k, f in fitters.items()}
    record = {
        "provenance": (f"fit by scripts/fit_environment.py on {today}: MLP-set constants on GPUMemNet's "
                       f"{rows['mlp']} MLP runs (A100-40GB, data/measured/gpumemnet-mlp); loader, PyTorch-1.x "
                       f"stack (with a host factor per set), NVML-tick and CUDA-11-context constants on Gavel's {rows['gavel']} solo throughputs (K80/P100/V100, "
                       f"data/measured/gavel) and Lucid's {rows['lucid']} solo runs (RTX 3090, "
                       f"data/measured/lucid-rtx3090), with the published priors of gpucast.estimate.environment"),
        "date": today,
        "stages": info["stages"],
        "values": values,
    }
    text = json.dumps(record, indent=2, default=float) + "\n"
    print(text)
    if not args.dry_run:
        tmp = args.out.with_name(f".{args.out.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
