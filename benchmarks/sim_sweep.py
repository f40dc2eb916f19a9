"""How much faster is a simulator sweep on two local worker processes than one after another?

A 48-run sweep (:mod:`gpucast.cluster.sweep`, what ``gpucast simulate --sweep`` runs): 3 traces
(``philly-mix``, ``pai-mix``, ``gavel``) x 4 offered loads (1, 2, 3, 4) x 4 seeds (0-3), under
the ``gpucast`` policy, the first ``--limit`` jobs of each trace on ``--gpus`` v100-16gb GPUs.
Equivalent command line::

    gpucast simulate --gpus 64 --limit 2000 --policies gpucast --sweep trace=philly-mix,pai-mix,gavel \\
        --sweep load=1,2,3,4 --sweep seed=0,1,2,3 --workers 2

The traces and the predictions of their job profiles are prepared once (:func:`sweep.prepare`,
timed apart: ``prepare_s``), then the same sweep runs sequentially (``workers=1``, in this
process) and on 2 local worker processes (``ProcessPoolExecutor`` with ``spawn``: the workers'
start-up, imports included, counts in the parallel time). The script **asserts** that the two
tables are equal, row for row and float for float, and prints the speed-up; target from the
issue: at least 1.7x on 2 workers.

Nothing else is asserted (benchmarks are not tests); the machine line records ``nproc``, the CPU
model and the load average before and after each phase, since other work on a small box moves the
numbers (a busy machine gives the parallel sweep less than two free cores).

    .venv/bin/python benchmarks/sim_sweep.py [--gpus 64] [--limit 2000] [--workers 2] \\
        [--markdown benchmarks/results/sim_sweep.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MD = REPO_ROOT / "benchmarks" / "results" / "sim_sweep.md"
TARGET_SPEEDUP = 1.7
AXES = {"trace": ["philly-mix", "pai-mix", "gavel"], "load": [1.0, 2.0, 3.0, 4.0], "seed": [0, 1, 2, 3]}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _burn(seconds: float) -> float:
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        pass
    return time.process_time() - c0


def _free_cores(n: int, seconds: float = 3.0) -> float:
    """How many cores ``n`` CPU-bound processes get right now (their CPU time over the wall time):
    the most an ``n``-worker sweep could have got then, whatever else runs on the machine."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(n) as pool:
        return sum(pool.map(_burn, [seconds] * n)) / seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--markdown", type=Path, default=DEFAULT_MD)
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpucast.cluster import sweep
    from gpucast.fileio import reserve_output

    out = reserve_output(args.markdown, "--markdown")      # an unwritable file fails now, not after the runs
    err = Console(stderr=True)
    base = sweep.Base(trace="gavel", gpus=args.gpus, limit=args.limit, policies=("gpucast",))
    pts = sweep.points(base, AXES)
    loads = {"start": _load()}

    with Progress(TextColumn("{task.description:>22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        tasks: dict = {}

        def progress(label):
            def tick(done, total, what):
                key = f"{label}: {what}"
                if key not in tasks:
                    tasks[key] = bar.add_task(key, total=total)
                bar.update(tasks[key], completed=done, total=total)
            return tick

        t0 = time.perf_counter()
        shared = sweep.prepare(base, pts, progress=progress("prepare"))
        prepare_s = time.perf_counter() - t0
        loads["after prepare"] = _load()
        seq = sweep.run(base, AXES, workers=1, shared=shared, progress=progress("sequential"))
        loads["after sequential"] = _load()
        free = [_free_cores(args.workers)]
        par = sweep.run(base, AXES, workers=args.workers, shared=shared, progress=progress(f"{args.workers} workers"))
        loads["after parallel"] = _load()
        free.append(_free_cores(args.workers))

    assert len(seq.rows) == len(pts) == 48, len(seq.rows)
    assert par.rows == seq.rows, "the parallel sweep's table differs from the sequential one"
    speedup = seq.wall_s / par.wall_s
    cmd = "python benchmarks/sim_sweep.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    verdict = "meets" if speedup >= TARGET_SPEEDUP else "misses"
    inflation = sum(par.point_cpu_s) / max(sum(seq.point_cpu_s), 1e-9)
    ceiling = args.workers / inflation
    lines = [
        "## Simulator sweep: 48 runs, sequential vs local worker processes",
        "",
        f"Command: `{cmd.strip()}` (equivalent CLI: `gpucast simulate --gpus {args.gpus} --limit {args.limit} "
        f"--policies gpucast --sweep trace=philly-mix,pai-mix,gavel --sweep load=1,2,3,4 --sweep seed=0,1,2,3 "
        f"--workers {args.workers}`)",
        "",
        f"Machine: {os.cpu_count()} CPUs ({_cpu()}), Python {platform.python_version()}; load average (1/5/15 min) "
        + "; ".join(f"{k} {v}" for k, v in loads.items()) + ". Other work on the machine takes cores from the "
        "parallel sweep: read the speed-up with the load average.",
        "",
        f"Sweep: 3 traces x 4 loads x 4 seeds = {len(pts)} runs of the `gpucast` policy, the first {args.limit} jobs "
        f"of each trace on {args.gpus} x v100-16gb. Preparing the traces and predicting their "
        f"{len(shared.table.table)} distinct (job profile, GPU type) pairs, once, before the fan-out: "
        f"{prepare_s:.1f} s (not in the times below).",
        "",
        "| executor | workers | wall s | sum of run times s | sum of run CPU times s | speed-up |",
        "|---|---|---|---|---|---|",
        f"| sequential | 1 | {seq.wall_s:.1f} | {sum(seq.point_wall_s):.1f} | {sum(seq.point_cpu_s):.1f} | 1.00x |",
        f"| local processes (spawn) | {par.workers} | {par.wall_s:.1f} | {sum(par.point_wall_s):.1f} | "
        f"{sum(par.point_cpu_s):.1f} | {speedup:.2f}x |",
        "",
        "A run is the same work in either executor, yet its CPU time grows when both cores are busy "
        f"(sum {sum(par.point_cpu_s):.1f} s beside {sum(seq.point_cpu_s):.1f} s, x{inflation:.2f}: the cores "
        "share caches and memory bandwidth, or are two threads of one core); that bounds the speed-up here at "
        f"{args.workers}/{inflation:.2f} = {ceiling:.2f}x before any start-up or tail. A run's wall time above "
        "its CPU time is time it waited for a core (other processes, or the other worker). Cores the sweep got (CPU time of its "
        f"runs over its wall time): sequential {sum(seq.point_cpu_s) / seq.wall_s:.2f}, "
        f"{par.workers} workers {sum(par.point_cpu_s) / par.wall_s:.2f} (at most {par.workers}: the rest of the "
        "wall time went to the workers' start-up and to other processes). Cores free for "
        f"{args.workers} processes (as many CPU-bound processes run for 3 s, just before and just after the "
        f"parallel sweep): {free[0]:.2f} and {free[1]:.2f} of {args.workers}; below {args.workers}, other work "
        "held the rest and the speed-up says as much about the machine as about the sweep.",
        "",
        f"Tables identical (asserted): {len(seq.rows)} rows, every metric equal float for float. Target "
        f">= {TARGET_SPEEDUP}x on 2 workers: {verdict} it ({speedup:.2f}x).",
        "",
    ]
    text = "\n".join(lines)
    out.write_text(text)
    print(text)
    print(f"wrote {args.markdown}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
