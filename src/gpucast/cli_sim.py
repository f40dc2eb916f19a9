"""The simulator command of the `gpucast` command line: ``simulate``.

* ``gpucast simulate --trace gavel --gpus 128 [--gpu-type v100-16gb] [--gpus-per-node 8]
  --policies slot,slot-fifo,profiling,horus,gpucast,oracle [--seed 0] [--error-sigma measured]
  [--load L] [--limit N]
  [--report out.html] [--json out.json] [--env env.yaml]``: replay a trace through each policy on one
  homogeneous cluster (:func:`gpucast.cluster.simulate`), with a progress bar per policy; print
  the comparison table (:func:`gpucast.cluster.metrics.summarize`: utilization over the busy
  period first, then over the whole run) and each policy's change from ``slot`` (FIFO with
  EASY backfilling; ``slot-fifo`` is strict FIFO); optionally write the HTML report
  (:mod:`gpucast.cluster.report`) and a JSON list with one object per policy (the summary, its
  relative change from ``slot`` and the run's parameters).

A thin shell like ``cli.py``: ``cli.py`` calls ``register(app, cli_module)`` at its end. Every
input is checked before anything runs: an unknown policy, trace or GPU type, a count below 1, an
output path that cannot be written, a multi-GPU gang with a parallel plan that the cluster's nodes
can never hold prints one ``error:`` line and exits 2, and nothing is written. Output files are written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import typer

BASELINE = "slot"


def _h(v) -> str:
    return "-" if v is None else f"{v / 3600.0:.2f}"


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def parse_policies(text: str, known) -> list[str]:
    """``"slot, gpucast,slot"`` -> ``["slot", "gpucast"]``; an unknown name raises ValueError."""
    names: list[str] = []
    for name in (p.strip().lower() for p in text.split(",")):
        if not name:
            continue
        if name not in known:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(known)}")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"--policies is empty; choose from {', '.join(known)}")
    return names


def check_writable(path: Path, flag: str) -> None:
    """Raise ValueError unless ``path`` can be created or replaced (its directory exists and is
    writable, it is not a directory)."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a directory")
    if not parent.is_dir():
        raise ValueError(f"{flag} {str(path)!r}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag} {str(path)!r} is not writable")


def comparison_table(summaries: list[dict], changes: list[dict], title: str):
    """One row per policy: utilization over the busy period and over the whole run (each with its
    change vs the baseline), makespan, JCT, queueing delay, slowdown, OOM failures, finished jobs."""
    from rich.table import Table

    by_policy = {c["policy"]: c for c in changes}
    t = Table(title=title)
    cols = ("policy", "util % busy", f"vs {BASELINE}", "util % all", f"vs {BASELINE}", "makespan h", "JCT mean h",
            "JCT p50 h", "JCT p99 h", "queue mean h", "slowdown", "OOM", "GPU-h", "finished")
    for col in cols:
        t.add_column(col, justify="left" if col == "policy" else "right")

    def vs(s, key):
        g = by_policy.get(s["policy"], {}).get(key)
        return "-" if g is None or s["policy"] == BASELINE else f"{g:+.1f}%"

    for s in summaries:
        t.add_row(s["policy"], _f(s.get("gpu_util_busy_pct")), vs(s, "gpu_util_busy_pct"), _f(s["gpu_util_pct"]),
                  vs(s, "gpu_util_pct"), _h(s["makespan_s"]), _h(s["jct_mean_s"]), _h(s["jct_p50_s"]),
                  _h(s["jct_p99_s"]), _h(s["queue_delay_mean_s"]), _f(s["slowdown_mean"], "{:.2f}"), str(s["oom_failures"]),
                  _f(s["gpu_hours"], "{:.0f}"), f"{s['jobs_finished']}/{s['jobs']}")
    return t


def register(app: typer.Typer, cli) -> None:
    """Add ``simulate`` to ``app``; ``cli`` is the module of ``app`` (``_run``, ``_fail``, consoles)."""

    @app.command("simulate")
    def simulate(trace: str = typer.Option("gavel", "--trace",
                                           help="Trace: 'gavel' (the bundled Philly-derived Gavel trace), "
                                                "'gavel:ID', 'philly-mix', 'pai-mix', 'llm-mix' (with multi-GPU "
                                                "LLM gangs on whole nodes: use --gpu-type a100-80gb and at "
                                                "least 64 GPUs) or a mix YAML (workloads drawn to a real "
                                                "cluster's utilization, gangs named with their plans), "
                                                "'synthetic:N[:SEED]', or a trace file (CSV/Parquet)."),
                 gpus: int = typer.Option(128, "--gpus", help="GPUs in the cluster."),
                 gpu_type: str = typer.Option("v100-16gb", "--gpu-type",
                                              help="GPU type of every node (see `gpucast gpus`)."),
                 gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node."),
                 policies: str = typer.Option("slot,profiling,horus,packing,gpucast,oracle", "--policies",
                                              help="Comma-separated policies to compare: slot (FIFO with "
                                                   "EASY backfilling, the baseline), slot-fifo (strict "
                                                   "FIFO), profiling, horus, packing, gpucast, oracle."),
                 seed: int = typer.Option(0, "--seed", help="Seed of the simulation's random draws (the "
                                                            "prediction errors). A synthetic trace has its own: "
                                                            "synthetic:N:SEED."),
                 error_sigma: str = typer.Option("measured", "--error-sigma",
                                                 help="The prediction error the policies see: 'measured' "
                                                      "(gpucast's measured error per quantity), a number "
                                                      "(0: exact predictions) or util=S,memory=S,step=S."),
                 limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N jobs of the trace."),
                 load: Optional[float] = typer.Option(None, "--load",
                                                      help="Rescale the arrivals to this offered load (GPU-time "
                                                           "offered per unit time per GPU; above 1 a queue "
                                                           "grows). Default: the trace's own."),
                 report: Optional[Path] = typer.Option(None, "--report", help="Write the HTML report here."),
                 json_out: Optional[Path] = typer.Option(None, "--json",
                                                         help="Write a JSON list, one object per policy, here."),
                 env_file: Optional[Path] = typer.Option(None, "--env",
                                                         help="An environment file from `gpucast calibrate`: the "
                                                              "predictions the policies see use it."),
                 colocation: str = typer.Option("measured-pairs", "--colocation",
                                                help="How jobs sharing a GPU slow each other in the simulated "
                                                     "world: 'measured-pairs' (the co-location model fitted on "
                                                     "measured pairs of real scripts on a current GPU) or 'gavel' "
                                                     "(fitted on Gavel's K80/P100/V100 pairs; a sensitivity run). "
                                                     "gpucast's policies always predict with gpucast's model.")
                 ) -> None:
        """Replay a job trace through scheduling policies on a simulated GPU cluster and compare them."""
        import gpucast.cluster as cl

        def check():
            if gpus < 1:
                raise ValueError(f"--gpus must be at least 1, got {gpus}")
            if gpus_per_node < 1:
                raise ValueError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
            if limit is not None and limit < 1:
                raise ValueError(f"--limit must be at least 1, got {limit}")
            if load is not None and not load > 0:
                raise ValueError(f"--load must be > 0, got {load}")
            from gpucast.cluster import errors

            errors.parse(error_sigma)
            from gpucast.cluster.timeshare import WORLDS

            if colocation not in WORLDS:
                raise ValueError(f"unknown --colocation {colocation!r}; choose from {', '.join(WORLDS)}")
            names = parse_policies(policies, list(cl.POLICIES))
            for path, flag in ((report, "--report"), (json_out, "--json")):
                if path is not None:
                    check_writable(path, flag)
            if report is not None and json_out is not None and report.resolve() == json_out.resolve():
                raise ValueError("--report and --json name the same file")
            spec = cl.ClusterSpec.homogeneous(gpu_type, gpus, gpus_per_node=gpus_per_node)
            env = cli._environment(env_file)
            jobs = _load_trace(cl, trace, gpus, limit, load, env, cli.err)
            check_gangs(cl, jobs, spec, names)
            return names, spec, jobs, env

        names, spec, jobs, env = cli._run(check)
        from gpucast.cluster.truth import set_environment

        set_environment(env)
        try:
            results = run_policies(cl, jobs, spec, names, cli.err, seed=seed, error_sigma=error_sigma,
                                   colocation=colocation)
        finally:
            set_environment(None)
        from gpucast.cluster import metrics

        summaries = [metrics.summarize(r.result) for r in results]
        changes = metrics.compare(summaries, baseline=BASELINE)
        n_jobs = summaries[0]["jobs"] if summaries else 0
        trace_name = (results[0].result.params or {}).get("trace", trace) if results else trace
        es = (results[0].result.params or {}).get("error_sigma", {}) if results else {}
        title = (f"gpucast simulate: {n_jobs} jobs (trace {trace_name}) on {gpus} x {gpu_type}, seed {seed}, "
                 f"error sigma util {es.get('util', 0):.3g} / memory {es.get('memory', 0):.3g} / "
                 f"step {es.get('step', 0):.3g}, co-location world {colocation}")
        cli.console.print(comparison_table(summaries, changes, title))
        for c in changes:
            if c["policy"] != BASELINE:
                cli.console.print(f"{c['policy']}: {metrics.change_line(c)}", highlight=False, markup=False)
        wall = ", ".join(f"{r.policy} {r.wall_s:.1f} s" + (" (also fetches the predictions)" if i == 0 else "")
                         for i, r in enumerate(results))
        cli.console.print(f"wall time: {wall}; table times are hours of simulated time", highlight=False,
                          markup=False)
        if json_out is not None:
            from gpucast.fileio import atomic_write_text

            by_policy = {c["policy"]: c for c in changes}
            objs = []
            for r, s in zip(results, summaries):
                c = by_policy.get(s["policy"])
                change = {k: v for k, v in c.items() if k not in ("policy", "vs")} if c else None
                objs.append({**s, f"change_vs_{BASELINE}_pct": change, "wall_s": r.wall_s,
                             "params": _jsonable(r.result.params)})
            atomic_write_text(json_out, json.dumps(objs, indent=2, sort_keys=False) + "\n")
            cli.err.print(f"wrote {json_out}", highlight=False, markup=False)
        if report is not None:
            from gpucast.cluster.report import write_report

            write_report(report, [r.result for r in results], title=title)
            cli.err.print(f"wrote {report}", highlight=False, markup=False)


def check_gangs(cl, trace, spec, names) -> None:
    """Raise ValueError (one line, naming the job) when a planned gang of ``trace`` could never
    start on ``spec``'s nodes under one of the policies (a profiling pool takes GPUs of the last
    node), before any run starts."""
    from gpucast.cluster import gangs
    from gpucast.cluster.engine import pool_size

    nodes = [nd for _g, nd, _t in spec.gpus()]
    for name in names:
        npool = pool_size(cl.make_policy(name), len(nodes))
        sizes = Counter(nodes[:len(nodes) - npool]).values()
        try:
            gangs.check(trace.jobs, sizes)
        except ValueError as exc:
            raise ValueError(f"{exc} (policy {name})" if npool else str(exc)) from None


def _load_trace(cl, trace, gpus, limit, load, env, console):
    """The trace; a workload mix is drawn with a progress bar over its candidates' predictions
    (made with ``env``, the run's environment)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from gpucast.cluster import mixes
    from gpucast.cluster.truth import set_environment

    if not mixes.is_mix(trace):
        return cl.load_trace(trace, gpus=gpus, limit=limit, load=load)
    set_environment(env)
    try:
        with Progress(TextColumn("drawing {task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task(trace, total=None)
            return cl.load_trace(trace, gpus=gpus, limit=limit, load=load,
                                 progress=lambda i, n: bar.update(task, completed=i, total=n))
    finally:
        set_environment(None)


class _Run:
    __slots__ = ("policy", "result", "wall_s")

    def __init__(self, policy, result, wall_s):
        self.policy, self.result, self.wall_s = policy, result, wall_s


def run_policies(cl, jobs, spec, names, console, **kwargs) -> list[_Run]:
    """Simulate ``jobs`` under each policy in turn, one progress bar (task) per policy."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    out = []
    total = len(jobs) if hasattr(jobs, "__len__") else None
    with Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        tasks = {n: progress.add_task(n, total=total) for n in names}
        for n in names:
            task = tasks[n]
            last = [0, total or 1]  # last drawn count, total

            def tick(done, all_jobs, task=task, last=last):
                # A 100,000-job trace reports every job: redraw at most ~200 times per policy.
                last[1] = all_jobs
                if done - last[0] >= max(1, all_jobs // 200) or done >= all_jobs:
                    last[0] = done
                    progress.update(task, completed=done, total=all_jobs)

            t0 = time.perf_counter()
            res = cl.simulate(jobs, spec, n, progress=tick, **kwargs)
            out.append(_Run(n, res, time.perf_counter() - t0))
            progress.update(task, completed=last[1], total=last[1])
    return out


def _jsonable(obj):
    """``obj`` with anything json cannot write turned into its string."""
    return json.loads(json.dumps(obj, default=str))
