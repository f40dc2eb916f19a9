"""The device suite's time-boxed loop: which configuration runs next, in which worker, within the budget.

The plan (``configs()``, the suite ``h200-v1``: spread, sweep, co-located groups, most informative
first) is :mod:`gpucast.profile.suite_plan`; the rows' reading and writing
:mod:`gpucast.profile.suite_store`. Their public names are importable from here too.

``run_suite()`` measures configurations one at a time, solo runs in a persistent isolated worker
(:class:`gpucast.profile.worker.WorkerPool`: one process that imports torch, torchvision and
transformers and creates its CUDA context once, then runs spec after spec; a fresh one after any
run that is not ``ok`` and every 40 runs), groups in fresh processes through
:func:`gpucast.profile.colocate.run_group` (the solo worker is ended before each group so that its
CUDA context is not on the GPU during the group's measurement), and appends each row to a
:class:`~gpucast.profile.dataset.Dataset` the moment it exists, then rewrites one compacted
``measurements.parquet`` (atomically): a crash, a kill or the machine being taken away loses no
finished row. Time box: before each run it compares the budget left with the run's expected wall
time (the median wall time of the runs of that kind so far in this call, or a first guess; plus
the median start-up of a solo worker when the run needs a fresh one) and
stops starting new work when less is left; each run's own timeout is capped at what is left, and
a run cut by that cap is not recorded (it measured nothing about the job). Solo configurations
run first; once ``1 - colocated_share`` of the budget is spent the co-located groups run (each
needs its members' solo step times, from this call or from the dataset and ``prior``), then the
remaining solo configurations if time is left. Resume skips every configuration whose
``config_id`` already has an ``ok`` or ``oom`` row in the dataset or in ``prior`` files.

Time per call (reasoned, not yet measured on the device). A solo run in the warm worker costs
its build (model construction on the GPU: 0.2 s, ~1 s for the 1-billion-parameter models), 5
warm-up steps (plus ~0.3 s of first-step kernel loading and library heuristics), the window
(1.5 s, or 500 steps when they take less: a quarter of the suite's jobs step in under 3 ms) and
~0.35 s of NVML set-up, clean-up and appending the row: ~2.7 s on average over the first 200
solo configurations (step times from gpucast's own H200 prediction; median step 12 ms). A
worker's start-up (interpreter, the imports, CUDA context: 3.5-5 s) is paid once per worker, so
~4 times a call (the first start, every 40 runs, after the groups, after each rare failure),
where the one-process-per-run worker paid it every run (~7.5 s a run: ~50 solo configurations
in a call's solo share). In a 510 s call: ~135 solo configurations in the 75 % solo share plus
~12 co-located groups (~10 s each: 2-3 fresh processes start in parallel) in the rest; ~180 if
the whole budget went to solo runs. 150+ solo configurations and 20+ groups take two calls
(each resumes where the last one stopped). The 1.5 s window holds ~9 of NVML's utilization
sample periods on an H200 (1/6 s) and ~75 sampler readings.

Entry point: ``python -m gpucast.profile.suite --out DIR --budget 540`` (``--list`` prints the
suite without a GPU). No GPU: one ``error:`` line, exit 2.

This module imports no torch: the suite's own process never touches CUDA (a CUDA context in the
parent would hold GPU memory during every measurement).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from gpucast.job import Job
from gpucast.profile.suite_plan import (FAMILY_OPTIMIZER, GROUPS, PHASES, REGIMES, SPREAD, SUITE_NAME,  # noqa: F401
                                        SWEEPS, Config, Sweep, configs, groups, job_label, spread, sweep)
from gpucast.profile.suite_store import Compacted, done_ids, read_rows, solo_step_times

__all__ = ["Config", "SuiteResult", "REGIMES", "PHASES", "SUITE_NAME", "configs", "spread", "sweep", "groups",
           "run_suite", "read_rows", "main"]

# Method of every run (RunSpec): 5 warm-up steps, then a 1.5 s steady window (5 to 500 steps).
WARMUP_STEPS = 5
WINDOW_S = 1.5
RUN_TIMEOUT_S = 90.0      # one solo run, a fresh worker's start-up (imports, CUDA context) included
GROUP_TIMEOUT_S = 120.0   # one co-located group
FIRST_SOLO_S = 8.0        # expected wall time of a solo run before any has been timed in this call
                          # (the first one starts the worker: ~4.5 s; warm runs take ~3 s)
FIRST_GROUP_S = 14.0      # likewise for a group
COLOCATED_SHARE = 0.25    # share of the budget kept for co-located groups


# ----------------------------------------------------------------------------------- the loop
@dataclass
class SuiteResult:
    """What one call of :func:`run_suite` did."""

    out_dir: Path
    parquet: Path | None
    total: int                 # configurations in the suite
    skipped: int               # already done (resume)
    measured: int = 0          # configurations run in this call
    rows: int = 0              # rows appended in this call
    statuses: dict = field(default_factory=dict)
    unrunnable: int = 0        # groups with a member lacking a solo step time
    worker_starts: int = 0     # persistent solo worker processes started (WorkerPool)
    worker_start_s: list = field(default_factory=list)  # per solo worker: seconds from start to ready
    stopped: str = "done"      # done | budget
    elapsed_s: float = 0.0


class _Clock:
    """Budget bookkeeping: median wall time per kind of run, first guesses before any."""

    def __init__(self, budget_s: float, first: dict[str, float]):
        self.clock = time.monotonic
        self.t0 = self.clock()
        self.budget_s = float(budget_s)
        self.first = dict(first)
        self.seen: dict[str, list[float]] = {"solo": [], "colocated": []}

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def expected(self, kind: str) -> float:
        seen = self.seen[kind]
        return statistics.median(seen) if seen else self.first[kind]

    def record(self, kind: str, seconds: float) -> None:
        self.seen[kind].append(seconds)


def _summary(row: dict) -> str:
    status = row.get("status")
    if status != "ok":
        return f"{status}: {row.get('error') or ''}".strip()
    parts = [f"ok {row['step_time_mean_s'] * 1e3:.2f} ms/step"]
    if row.get("util_mean_pct") is not None:
        parts.append(f"util {row['util_mean_pct']:.0f}%")
    mem = row.get("proc_mem_max_bytes") or row.get("torch_max_reserved_bytes")
    if mem:
        parts.append(f"{mem / 2**30:.2f} GiB")
    if row.get("slowdown"):
        parts.append(f"slowdown {row['slowdown']:.2f}x")
    return ", ".join(parts)


def _order(todo: list[Config], clock: _Clock, colocated_share: float):
    """Yield configs: solo until ``1 - colocated_share`` of the budget is spent, then the
    groups, then the solo configs left."""
    solo = [c for c in todo if c.kind == "solo"]
    grouped = [c for c in todo if c.kind == "colocated"]
    i = 0
    while i < len(solo) and (not grouped or clock.elapsed() < clock.budget_s * (1 - colocated_share)):
        yield solo[i]
        i += 1
    yield from grouped
    yield from solo[i:]


def run_suite(out_dir, budget_s: float = 540.0, suite: str = SUITE_NAME, dataset=None, resume: bool = True,
              progress: bool = True, *, plan: Sequence[Config] | None = None, prior: Iterable = (),
              parquet=None, backend=None, device: str = "cuda", warmup_steps: int = WARMUP_STEPS,
              window_s: float = WINDOW_S, run_timeout_s: float = RUN_TIMEOUT_S,
              group_timeout_s: float = GROUP_TIMEOUT_S, first_guess_s: tuple[float, float] = (FIRST_SOLO_S,
                                                                                                FIRST_GROUP_S),
              colocated_share: float = COLOCATED_SHARE, env: dict | None = None) -> SuiteResult:
    """Measure the suite into ``out_dir`` within ``budget_s`` seconds of wall time.

    ``dataset``: the :class:`~gpucast.profile.dataset.Dataset` (or its directory) rows are
    appended to; default ``out_dir/dataset``. ``parquet``: where the compacted copy of that
    dataset is rewritten after every row; default ``out_dir/measurements.parquet``.
    ``plan``: the configurations (default :func:`configs` for the device's memory).
    ``prior``: Parquet files or directories of earlier collections: their ``ok``/``oom``
    configurations are skipped too (with ``resume``) and their solo step times serve the groups.
    ``backend``: the NVML backend of the device (default: open the real one; no GPU raises
    :class:`~gpucast.profile.nvml.GpuUnavailable`); its device name keys the config ids.
    ``device``, ``warmup_steps``, ``window_s``: the :class:`~gpucast.profile.runner.RunSpec` of
    every run. ``env``: extra variables for the workers. Solo runs share one persistent worker
    (:class:`~gpucast.profile.worker.WorkerPool`), replaced after any run that is not ``ok``
    and every ``MAX_RUNS_PER_WORKER`` runs; each replacement is logged.
    """
    from gpucast.profile.colocate import run_group
    from gpucast.profile.dataset import Dataset
    from gpucast.profile.nvml import open_backend
    from gpucast.profile.pool import WorkerPool
    from gpucast.profile.spec import RunSpec

    clock = _Clock(budget_s, {"solo": first_guess_s[0], "colocated": first_guess_s[1]})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset if dataset is not None else out / "dataset")
    parquet = Path(parquet) if parquet is not None else out / "measurements.parquet"
    own_backend = backend is None
    if own_backend:
        backend = open_backend()
    try:
        gpu_model = backend.device_name()
        memory_total = int(backend.memory_total())
    finally:
        if own_backend:
            backend.close()  # the workers and run_group open their own
    plan = list(plan) if plan is not None else configs(memory_total)

    compacted = Compacted(ds, parquet)
    known = compacted.rows() + read_rows(prior)
    done = done_ids(known) if resume else set()
    solo_times = solo_step_times(known, gpu_model)
    todo = [c for c in plan if not set(c.config_ids(gpu_model)) <= done]
    result = SuiteResult(out, None, total=len(plan), skipped=len(plan) - len(todo))

    console = None
    if progress:
        from rich.console import Console

        console = Console(stderr=True, highlight=False)
        console.print(f"suite {suite} on {gpu_model}: {len(plan)} configurations, {result.skipped} already done, "
                      f"budget {budget_s:.0f} s", markup=False)
    bar = _Progress(console, total=len(plan), done=result.skipped) if console is not None else None

    def spec(job: Job) -> RunSpec:
        return RunSpec(job, warmup_steps=warmup_steps, window_s=window_s, device=device)

    # one persistent worker for the solo runs; started on the first one (a resumed call with
    # nothing to do starts none)
    pool = WorkerPool(env=env, device=device)
    noted = 0
    try:
        for cfg in _order(todo, clock, colocated_share):
            kind = cfg.kind
            if kind == "colocated":
                missing = [j for j in cfg.jobs if j.key not in solo_times]
                if missing:
                    result.unrunnable += 1
                    if console is not None:
                        console.print(f"skip {cfg.label}: no solo step time for {job_label(missing[0])}",
                                      markup=False)
                    continue
            left = clock.left()
            need = clock.expected(kind)
            if kind == "solo" and pool.pid is None and pool.start_s:
                need += statistics.median(pool.start_s)  # a fresh worker's start-up comes first
            if left < need:
                result.stopped = "budget"
                break
            limit = min(run_timeout_s if kind == "solo" else group_timeout_s, left)
            if bar is not None:
                bar.start(cfg.label, left)
            t0 = time.monotonic()
            if kind == "solo":
                rows = [pool.run(spec(cfg.job), timeout_s=limit)]
            else:
                pool.stop()  # the solo worker's CUDA context must not sit on the GPU during a group
                rows = run_group([spec(j) for j in cfg.jobs], {j.key: solo_times[j.key] for j in cfg.jobs},
                                 timeout_s=limit, env=env)
            wall = time.monotonic() - t0
            capped = limit < (run_timeout_s if kind == "solo" else group_timeout_s)
            if capped and any(r.get("status") == "timeout" for r in rows):
                result.stopped = "budget"
                if console is not None:
                    console.print(f"budget: {cfg.label} cut at {limit:.0f} s; not recorded", markup=False)
                break
            clock.record(kind, wall)
            for row, cid in zip(rows, cfg.config_ids(gpu_model)):
                row["suite"] = suite
                row["config_id"] = cid
            result.parquet = compacted.add(ds.append(rows))
            result.measured += 1
            result.rows += len(rows)
            for row in rows:
                result.statuses[row["status"]] = result.statuses.get(row["status"], 0) + 1
                if kind == "solo" and row.get("status") == "ok" and row.get("step_time_mean_s"):
                    solo_times[row["job_key"]] = float(row["step_time_mean_s"])
            if bar is not None:
                bar.finish(cfg.label, "; ".join(_summary(r) for r in rows), wall)
            if console is not None:
                for note in pool.notes[noted:]:
                    console.print(f"solo {note}", markup=False)
            noted = len(pool.notes)
    finally:
        pool.close()  # ends the worker and its process group, whatever happened
        if bar is not None:
            bar.close()
    result.worker_starts = pool.starts
    result.worker_start_s = list(pool.start_s)
    result.elapsed_s = clock.elapsed()
    if result.parquet is None and compacted.num_rows and not parquet.exists():
        result.parquet = compacted.write()
    if console is not None:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(result.statuses.items())) or "none"
        console.print(f"suite {suite}: measured {result.measured} configurations ({result.rows} rows: {counts}) in "
                      f"{result.elapsed_s:.0f} s; stopped: {result.stopped}; "
                      f"{result.total - result.skipped - result.measured} left", markup=False)
        if result.worker_starts:
            ready = statistics.median(result.worker_start_s) if result.worker_start_s else float("nan")
            console.print(f"solo worker: {result.worker_starts} process(es), {ready:.1f} s from start to ready "
                          f"(median)", markup=False)
    return result


class _Progress:
    """A rich progress bar on stderr (done/total, elapsed, budget left) and one line per run."""

    def __init__(self, console, total: int, done: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.n = done
        self.total = total
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[left]}"), console=console,
                                 transient=True)
        self.task = self.progress.add_task("starting", total=total, completed=done, left="")
        self.progress.start()

    def start(self, label: str, left: float) -> None:
        self.progress.update(self.task, description=label, left=f"{left:.0f} s left")

    def finish(self, label: str, summary: str, wall: float) -> None:
        self.n += 1
        width = len(str(self.total))
        self.progress.console.print(f"[{self.n:>{width}}/{self.total}] {label}: {summary} ({wall:.1f} s)",
                                    markup=False)
        self.progress.advance(self.task)

    def close(self) -> None:
        self.progress.stop()


# ----------------------------------------------------------------------------------- entry point
def _print_list(plan: Sequence[Config]) -> None:
    try:
        for i, c in enumerate(plan, 1):
            print(f"{i:4d}  {c.phase:9s}  {c.regime or '-':12s}  {c.label}")
        sys.stdout.flush()
    except BrokenPipeError:  # `... --list | head`
        sys.stdout = open(os.devnull, "w")


def _on_sigterm(signum, frame):
    # `timeout` (collect.sh's hard stop) sends SIGTERM: unwind, so that the worker in flight and
    # its process group are killed (WorkerPool / run_group clean up on any exception).
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpucast.profile.suite",
                                 description="Measure the gpucast device suite on this machine's GPU.")
    ap.add_argument("--out", type=Path, help="directory of the run: dataset/ parts and measurements.parquet")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds of wall time for the whole suite")
    ap.add_argument("--suite", default=SUITE_NAME, help="suite name recorded in every row")
    ap.add_argument("--parquet", type=Path, help="where the compacted file goes [OUT/measurements.parquet]")
    ap.add_argument("--prior", type=Path, action="append", default=[],
                    help="earlier measurements (file or directory) whose done configurations are skipped; repeatable")
    ap.add_argument("--no-resume", action="store_true", help="measure configurations already done, again")
    ap.add_argument("--window-s", type=float, default=WINDOW_S, help="steady window per run, seconds")
    ap.add_argument("--list", action="store_true", help="print the suite and exit (no GPU needed)")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    ap.add_argument("--colocated-share", type=float, default=COLOCATED_SHARE,
                    help="share of the budget kept for the co-located groups, 0 to 1 (1: the groups first) "
                         f"[{COLOCATED_SHARE:g}]")
    args = ap.parse_args(argv)
    if args.list:
        _print_list(configs())
        return 0
    if args.out is None:
        print("error: --out DIR is required", file=sys.stderr)
        return 2
    if not (args.budget > 0 and math.isfinite(args.budget)):
        print(f"error: --budget must be a positive number of seconds, got {args.budget:g}", file=sys.stderr)
        return 2
    if not 0.0 <= args.colocated_share <= 1.0:
        print(f"error: --colocated-share must be between 0 and 1, got {args.colocated_share:g}", file=sys.stderr)
        return 2
    from gpucast.profile.nvml import GpuUnavailable

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        missing = [p for p in args.prior if not p.exists()]
        if missing:
            raise FileNotFoundError(f"--prior {str(missing[0])!r} does not exist")
        run_suite(args.out, budget_s=args.budget, suite=args.suite, resume=not args.no_resume,
                  progress=not args.quiet, prior=args.prior, parquet=args.parquet, window_s=args.window_s,
                  colocated_share=args.colocated_share)
    except (GpuUnavailable, FileNotFoundError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
