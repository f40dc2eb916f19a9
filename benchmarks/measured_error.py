"""gpucast's measured prediction error per quantity, for the simulator's truth model.

The simulator draws each job's true utilization, memory and step time as gpucast's prediction
times ``exp(sigma * z)`` (utilization: its logit plus ``sigma * z``); this script measures
``sigma`` for each quantity as the root mean square of ``log(predicted / measured)`` (of the
difference of logits for utilization) over measured runs the constants never saw:

* utilization and peak memory: the 2,978 measured MLP training runs of ``gpumemnet-mlp`` (A100),
* step time: Gavel's measured solo throughputs (26 job types on K80, P100 and V100),

each predicted with the base constants fitted *without* that set
(``gpucast.learn.evaluate.base_without``). Bias is included (an RMS, not a standard deviation):
a scheduler suffers a biased error too. It writes ``src/gpucast/data/measured_error.json`` (what
``gpucast simulate`` uses by default, with this provenance) and
``benchmarks/results/measured_error.md``.

    .venv/bin/python benchmarks/measured_error.py [--shared data/measured]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO_ROOT / "data" / "measured"
OUT_JSON = REPO_ROOT / "src" / "gpucast" / "data" / "measured_error.json"
OUT_MD = REPO_ROOT / "benchmarks" / "results" / "measured_error.md"


def _rms_log(pred, meas) -> tuple[float, int, float]:
    ok = np.isfinite(pred) & np.isfinite(meas) & (pred > 0) & (meas > 0)
    r = np.log(pred[ok] / meas[ok])
    return float(np.sqrt(np.mean(r ** 2))), int(ok.sum()), float(np.mean(r))


def _rms_logit(pred_pct, meas_pct) -> tuple[float, int, float]:
    ok = np.isfinite(pred_pct) & np.isfinite(meas_pct)
    p = np.clip(pred_pct[ok] / 100.0, UTIL_CLIP, 1 - UTIL_CLIP)
    m = np.clip(meas_pct[ok] / 100.0, UTIL_CLIP, 1 - UTIL_CLIP)
    r = np.log(p / (1 - p)) - np.log(m / (1 - m))
    return float(np.sqrt(np.mean(r ** 2))), int(ok.sum()), float(np.mean(r))


# Utilizations are clipped to [0.5 %, 99.5 %] before the logit (our choice: nvidia-smi reports whole
# percents, so 0 and 100 mean "under 0.5" and "over 99.5").
UTIL_CLIP = 0.005


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                    help="the folder of the measured sets (default: data/measured in the repository)")
    args = ap.parse_args(argv)
    from rich.progress import Progress

    import gpucast
    from gpucast.learn.evaluate import base_without
    from gpucast.learn.fit import Fitter
    from gpucast.learn.shared_sets import gavel_rows, mlp_rows

    mlp = args.shared / "gpumemnet-mlp" / "runs.csv"
    gav = args.shared / "gavel" / "simulation_throughputs.json"
    for p in (mlp, gav):
        if not p.exists():
            print(f"error: {p} not found (pass --shared)", file=sys.stderr)
            return 2
    with Progress() as bar:
        t = bar.add_task("capturing the MLP runs", total=None)
        fm = Fitter(mlp_rows(mlp), progress=lambda i, n: bar.update(t, completed=i, total=n))
        t2 = bar.add_task("capturing Gavel's jobs", total=None)
        fg = Fitter(gavel_rows(gav), progress=lambda i, n: bar.update(t2, completed=i, total=n))
    pm = fm.predict(base_without("gpumemnet-mlp"))
    pg = fg.predict(base_without("gavel"))
    util, n_u, bias_u = _rms_logit(pm.util_pct, fm.util)
    util_log, _n, _b = _rms_log(pm.util_pct, fm.util)
    mem, n_m, bias_m = _rms_log(pm.memory_mib, fm.memory)
    step, n_s, bias_s = _rms_log(pg.step_time_s, fg.step)
    doc = {
        "sigma": {"util": round(util, 4), "memory": round(mem, 4), "step": round(step, 4)},
        "bias": {"util": round(bias_u, 4), "memory": round(bias_m, 4), "step": round(bias_s, 4)},
        "space": {"util": "logit of the utilization share", "memory": "log", "step": "log"},
        "util_rms_log_ratio": round(util_log, 4),
        "rows": {"util": n_u, "memory": n_m, "step": n_s},
        "provenance": {
            "what": "root mean square of logit(predicted) - logit(measured) for utilization and of "
                    "log(predicted / measured) for memory and step time, on measured runs the base "
                    "constants never saw",
            "util_memory": "gpumemnet-mlp runs.csv (A100-40GB, measured), base_without('gpumemnet-mlp')",
            "step": "Gavel simulation_throughputs.json solo throughputs (K80/P100/V100, measured), "
                    "base_without('gavel')",
            "gpucast": gpucast.__version__,
            "command": "benchmarks/measured_error.py",
            "date": datetime.date.today().isoformat(),
        },
    }
    OUT_JSON.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    md = ["### Measured prediction error (the simulator's default truth error)", "",
          "`.venv/bin/python benchmarks/measured_error.py`: RMS of the error in log space (logit space for "
          "utilization, a share bounded by 0 and 1), base constants that never saw the set.", "",
          "| quantity | space | sigma (RMS) | mean (bias) | rows | measured on |",
          "| --- | --- | ---: | ---: | ---: | --- |",
          f"| utilization | logit | {util:.3f} | {bias_u:+.3f} | {n_u} | gpumemnet-mlp (A100-40GB) |",
          f"| peak memory | log | {mem:.3f} | {bias_m:+.3f} | {n_m} | gpumemnet-mlp (A100-40GB) |",
          f"| step time | log | {step:.3f} | {bias_s:+.3f} | {n_s} | Gavel solo throughputs (K80/P100/V100) |", "",
          f"(In log space the utilization error is {util_log:.3f}: dominated by the set's low-utilization runs.)", ""]
    OUT_MD.write_text("\n".join(md), encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
