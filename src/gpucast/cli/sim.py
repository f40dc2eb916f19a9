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
* ``gpucast simulate ... --sweep load=1,2,3 --sweep seed=0,1 [--workers N | --ray-address ADDR]
  [--json out.json] [--markdown out.md]``: the same simulation over every combination of the
  swept values (:mod:`gpucast.cluster.sweep`: axes ``load``, ``seed``, ``trace``/``mix``,
  ``error-scale``, ``gpus``, ``policy``), each (point, policy) run in parallel on ``N`` local
  processes (default: the cores here) or on a Ray cluster, with a progress bar over the runs;
  one table, one row per run in the axes' order, identical to a sequential sweep's
  (:mod:`gpucast.cli.sim_sweep`).

A thin shell: :mod:`.app` calls ``register(app, common)``. Every
input is checked before anything runs: an unknown policy, trace or GPU type, a count below 1, an
output path that cannot be written (the output files are reserved with
:func:`gpucast.fileio.reserve_output` before the run starts), a multi-GPU gang with a parallel plan
that the cluster's nodes can never hold prints one ``error:`` line and exits 2, and nothing is
written. Output files are written atomically into the reserved temporary files (``os.replace``); a
write failure after the run (a full disk) is one ``error:`` line, no half-written file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Optional

import typer

from gpucast.cli.sim_checks import (check_base, check_dynamic, check_gangs, engine_params,  # noqa: F401
                                    parse_policies)
from gpucast.cli.sim_sweep import run_sweep
from gpucast.fileio import discard, reserve_outputs

BASELINE = "slot"


def _h(v) -> str:
    return "-" if v is None else f"{v / 3600.0:.2f}"


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


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
                                                     "measured pairs of real scripts on a current GPU, as "
                                                     "fitted), 'data-center' (the same with exclusive time "
                                                     "slices on data-center GPUs, as gpucast predicts them; "
                                                     "the policies predict so too) or 'gavel' (fitted on "
                                                     "Gavel's K80/P100/V100 pairs; a sensitivity run)."),
                 colocation_mode: str = typer.Option("timeslice", "--colocation-mode",
                                                     help="How the jobs on one GPU share it, in the simulated "
                                                          "world and in the policies' predictions alike: "
                                                          "'timeslice' (CUDA's default time-slicing; the "
                                                          "device plugin's time-slicing replicas) or 'mps' "
                                                          "(NVIDIA MPS: kernels of different jobs run at once, "
                                                          "no context switch). MIG slices are GPU types: "
                                                          "--gpu-type a100-80gb:3g.40gb."),
                 mig_layout: Optional[str] = typer.Option(
                     None, "--mig-layout", metavar="PROFILE,PROFILE,...",
                     help="Carve the GPUs of the first --mig-nodes nodes (default: all) into this MIG layout "
                          "(static unless --mig-dynamic), e.g. 3g.40gb,2g.20gb,2g.20gb or 1g.10gb*7 (profiles of --gpu-type: "
                          "`gpucast gpus --mig`); each slice takes one-GPU jobs, multi-GPU jobs go to whole GPUs."),
                 mig_nodes: Optional[int] = typer.Option(None, "--mig-nodes",
                                                         help="With --mig-layout: how many nodes are carved."),
                 mig_dynamic: bool = typer.Option(
                     False, "--mig-dynamic",
                     help="With --mig-layout: the carved nodes start carved (--mig-start) and are "
                          "re-partitioned whole when jobs that want whole GPUs wait, or carved again when "
                          "jobs that would run on a slice wait (the gpucast and oracle policies ask for it): "
                          "the node drains (no new jobs on it; running ones finish), is reconfigured for "
                          "--mig-reconfig-s, then its other face opens."),
                 mig_start: str = typer.Option(
                     "carved", "--mig-start", metavar="carved|whole",
                     help="With --mig-dynamic: the face the re-partitionable nodes start with (whole: they are "
                          "carved only when the policy wants slices)."),
                 mig_hold_s: Optional[float] = typer.Option(
                     None, "--mig-hold-s", min=0.0,
                     help="With --mig-dynamic: seconds a node keeps a face it opened before it may be "
                          "re-partitioned again (default 3600, our choice; 0: none)."),
                 mig_reconfig_s: Optional[float] = typer.Option(
                     None, "--mig-reconfig-s", min=0.0,
                     help="With --mig-dynamic: seconds a node takes to be reconfigured once drained (default 60, "
                          "our choice)."),
                 mps_nodes: Optional[int] = typer.Option(
                     None, "--mps-nodes",
                     help="This many nodes of whole GPUs (after the carved ones) share their GPUs through MPS, "
                          "the others by --colocation-mode (as operators label nodes with the device plugin's "
                          "MPS or time-slicing config); the gpucast policy then places each job where its "
                          "predicted cost is lowest, under that GPU's mode."),
                 mps_replicas: Optional[int] = typer.Option(
                     None, "--mps-replicas", min=1,
                     help="With --mps-nodes: MPS as the NVIDIA device plugin's sharing.mps.replicas runs it, at "
                          "most this many jobs per GPU, each limited to 1/N of the SMs "
                          "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), alone too. Default: no limit."),
                 sweep: Optional[List[str]] = typer.Option(
                     None, "--sweep", metavar="AXIS=V1,V2,...",
                     help="Sweep an axis (repeat for more; every combination runs, each under every policy): "
                          "load=1,2,3 (offered load), seed=0,1,2, trace=gavel,philly-mix (alias mix), "
                          "error-scale=0,0.5,1,2 (times the --error-sigma model), gpus=64,128, "
                          "policy=slot,gpucast (instead of --policies). One table, one row per run; "
                          "--json/--markdown write it (--report is per run: not with --sweep)."),
                 workers: Optional[int] = typer.Option(None, "--workers",
                                                       help="With --sweep: local worker processes (default: "
                                                            "the cores here; 1: one after another in this "
                                                            "process). Same results for any count."),
                 ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                                           help="With --sweep: run the runs as tasks on this Ray "
                                                                "cluster ('auto', 'host:port', 'ray://host:port', or "
                                                                "'local' to start one here); its nodes need "
                                                                "gpucast installed. Same results as locally."),
                 markdown_out: Optional[Path] = typer.Option(None, "--markdown",
                                                             help="With --sweep: write the table as Markdown here.")
                 ) -> None:
        """Replay a job trace through scheduling policies on a simulated GPU cluster and compare them.

        With --sweep, run the simulation over every combination of the swept values, in parallel
        (local processes, or a Ray cluster with --ray-address), and print one table:
        gpucast simulate --mix philly-mix --gpus 128 --policies slot,gpucast --sweep load=1,2,3
        --sweep seed=0,1,2,3 --workers 2 --markdown sweep.md
        """
        import gpucast.cluster as cl

        if sweep or workers is not None or ray_address is not None or markdown_out is not None:
            return run_sweep(cli, sweep or [], trace=trace, gpus=gpus, gpu_type=gpu_type, gpus_per_node=gpus_per_node,
                             mig_layout=mig_layout, mig_nodes=mig_nodes, mps_nodes=mps_nodes, mps_replicas=mps_replicas,
                             mig_dynamic=mig_dynamic, mig_reconfig_s=mig_reconfig_s, mig_start=mig_start,
                             mig_hold_s=mig_hold_s,
                             policies=policies, seed=seed, error_sigma=error_sigma, limit=limit, load=load,
                             report=report, json_out=json_out, markdown_out=markdown_out, env_file=env_file,
                             colocation=colocation, workers=workers, ray_address=ray_address,
                             sharing=colocation_mode)

        def check():
            check_base(gpus=gpus, gpus_per_node=gpus_per_node, limit=limit, load=load, error_sigma=error_sigma,
                       colocation=colocation, sharing=colocation_mode)
            check_dynamic(mig_dynamic, mig_reconfig_s, mig_hold_s)
            names = parse_policies(policies, list(cl.POLICIES))
            # Reserve the output files before any work: an unwritable one fails here, not after the run.
            outs = reserve_outputs((report, "--report"), (json_out, "--json"))
            try:
                spec = cl.ClusterSpec.build(gpu_type, gpus, gpus_per_node, mig_layout, mig_nodes, mps_nodes, mps_replicas,
                                            mig_dynamic, mig_start)
                env = cli._environment(env_file)
                jobs = _load_trace(cl, trace, gpus, limit, load, env, cli.err)
                check_gangs(cl, jobs, spec, names)
            except BaseException:
                discard(outs)
                raise
            return names, spec, jobs, env, outs

        names, spec, jobs, env, (report_out, json_file) = cli._run(check)
        from gpucast.cluster.truth import set_environment

        set_environment(env)
        try:
            results = run_policies(cl, jobs, spec, names, cli.err, seed=seed, error_sigma=error_sigma,
                                   colocation=colocation, sharing=colocation_mode,
                                   **engine_params(mig_reconfig_s, mig_hold_s))
        finally:
            set_environment(None)
        from gpucast.cluster import metrics

        summaries = [metrics.summarize(r.result) for r in results]
        changes = metrics.compare(summaries, baseline=BASELINE)
        n_jobs = summaries[0]["jobs"] if summaries else 0
        trace_name = (results[0].result.params or {}).get("trace", trace) if results else trace
        es = (results[0].result.params or {}).get("error_sigma", {}) if results else {}
        carved = (f" ({'all' if mig_nodes is None else mig_nodes} nodes carved into MIG {mig_layout}"
                  + (f", re-partitioned on demand from {mig_start}" if mig_dynamic else "") + ")" if mig_layout else "") + (f" ({mps_nodes} nodes under MPS" + (f", {mps_replicas} replicas" if mps_replicas else "") + ")"
                     if mps_nodes else "")
        title = (f"gpucast simulate: {n_jobs} jobs (trace {trace_name}) on {gpus} x {gpu_type}{carved}, seed {seed}, "
                 f"error sigma util {es.get('util', 0):.3g} / memory {es.get('memory', 0):.3g} / "
                 f"step {es.get('step', 0):.3g}, co-location world {colocation}, sharing {colocation_mode}")
        cli.console.print(comparison_table(summaries, changes, title))
        for c in changes:
            if c["policy"] != BASELINE:
                cli.console.print(f"{c['policy']}: {metrics.change_line(c)}", highlight=False, markup=False)
        for r in results:
            reps = (r.result.params or {}).get("mig_repartitions")
            if reps:
                waits = ", ".join(f"{face} {(end - start) / 3600:.1f} h" for start, end, _k, face in reps)
                cli.console.print(f"{r.policy}: re-partitioned {len(reps)} MIG node(s) (the face opened, after "
                                  f"its drain and reconfiguration: {waits})", highlight=False, markup=False)
        for sm in summaries:
            if sm.get("services"):
                met, wait = sm.get("service_slo_met_pct"), sm.get("service_wait_mean_s")
                cli.console.print(f"{sm['policy']}: {sm['services']} inference services met their latency targets "
                                  f"{'-' if met is None else f'{met:.1f}'} % of the time they served, waited "
                                  f"{'-' if wait is None else f'{wait / 3600:.2f}'} h on average to start",
                                  highlight=False, markup=False)
        wall = ", ".join(f"{r.policy} {r.wall_s:.1f} s" + (" (also fetches the predictions)" if i == 0 else "")
                         for i, r in enumerate(results))
        cli.console.print(f"wall time: {wall}; table times are hours of simulated time", highlight=False,
                          markup=False)
        def write_outputs():
            # Into the files reserved before the run; a failure now (a full disk...) is one error line.
            try:
                if json_file is not None:
                    from gpucast.fileio import atomic_write_text

                    by_policy = {c["policy"]: c for c in changes}
                    objs = []
                    for r, s in zip(results, summaries):
                        c = by_policy.get(s["policy"])
                        change = {k: v for k, v in c.items() if k not in ("policy", "vs")} if c else None
                        objs.append({**s, f"change_vs_{BASELINE}_pct": change, "wall_s": r.wall_s,
                                     "params": _jsonable(r.result.params)})
                    atomic_write_text(json_file, json.dumps(objs, indent=2, sort_keys=False) + "\n")
                    cli.err.print(f"wrote {json_out}", highlight=False, markup=False)
                if report_out is not None:
                    from gpucast.cluster.report import write_report

                    write_report(report_out, [r.result for r in results], title=title)
                    cli.err.print(f"wrote {report}", highlight=False, markup=False)
            finally:
                discard((json_file, report_out))

        cli._run(write_outputs)


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
