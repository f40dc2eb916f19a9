"""Fit the Environment's default constants to the measured sets of ../shared/data and write them
to src/gpucast/data/environment_fit.json (values and provenance; Environment.default() lays them
over the priors).

Two stages, each a fit with the published priors (gpucast.learn.fit):
1. the MLP set (GPUMemNet, A100-40GB, 2,978 rows: utilization and nvidia-smi memory) moves the
   constants of in-memory loaders, copies, the loop's habits, idle kernels and the CUDA context;
2. Gavel's solo throughputs (K80/P100/V100, 78 rows: step time), starting from stage 1, move the
   constants of the loaders the MLP set has no rows for (images, small images, tokens, RL
   environments, workers).
The held-out evaluation of this procedure is benchmarks/accuracy.py.

    .venv/bin/python scripts/fit_environment.py [--shared ../shared/data] [--out PATH] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "src" / "gpucast" / "data" / "environment_fit.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=(REPO_ROOT / ".." / "shared" / "data").resolve())
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    args = p.parse_args(argv)
    mlp_csv = args.shared / "gpumemnet-mlp" / "runs.csv"
    gavel_json = args.shared / "gavel" / "simulation_throughputs.json"
    for f in (mlp_csv, gavel_json):
        if not f.is_file():
            print(f"fit_environment: {f} not found (pass --shared)", file=sys.stderr)
            return 2
    from rich.progress import Progress

    from gpucast.learn.fit import GAVEL_PARAMS, MLP_PARAMS, Fitter
    from gpucast.learn.shared_sets import gavel_rows, mlp_rows

    with Progress(transient=True) as bar:
        t = bar.add_task("capturing the MLP runs", total=None)
        mlp = Fitter(mlp_rows(mlp_csv), progress=lambda i, n: bar.update(t, completed=i, total=n))
        t2 = bar.add_task("capturing Gavel's jobs", total=None)
        gavel = Fitter(gavel_rows(gavel_json), progress=lambda i, n: bar.update(t2, completed=i, total=n))
        bar.add_task("fitting", total=None)
        env1, info1 = mlp.fit(np.arange(len(mlp.rows)), MLP_PARAMS)
        env2, info2 = gavel.fit(np.arange(len(gavel.rows)), GAVEL_PARAMS, priors=env1)
    values = {**info1["values"], **info2["values"]}
    today = datetime.date.today().isoformat()
    record = {
        "provenance": (f"fit by scripts/fit_environment.py on {today}: MLP-set constants on GPUMemNet's "
                       f"{info1['rows']} MLP runs (A100-40GB, ../shared/data/gpumemnet-mlp), loader constants on "
                       f"Gavel's {info2['rows']} solo throughputs (K80/P100/V100, ../shared/data/gavel), with "
                       f"the published priors of gpucast.estimate.environment"),
        "date": today,
        "stages": [{"data": "gpumemnet-mlp", "params": list(MLP_PARAMS), **info1},
                   {"data": "gavel", "params": list(GAVEL_PARAMS), **info2}],
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
