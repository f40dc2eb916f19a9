"""``gpucast simulate --sweep``: check every axis, value, trace, gang and output file before any run, then
run the sweep (:mod:`gpucast.cluster.sweep`) on local processes or a Ray cluster with a progress bar,
and print (and optionally write) its one table. Called by :mod:`gpucast.cli.sim`'s ``simulate``; the
checks both run are :mod:`gpucast.cli.sim_checks`.
"""

from __future__ import annotations

import json

from gpucast.cli.sim_checks import check_base, check_dynamic, check_gangs, engine_params, parse_policies
from gpucast.fileio import discard, reserve_outputs


def run_sweep(cli, specs, *, trace, gpus, gpu_type, gpus_per_node, policies, seed, error_sigma, limit, load,
              report, json_out, markdown_out, env_file, colocation, workers, ray_address,
              sharing="timeslice", mig_layout=None, mig_nodes=None, mps_nodes=None,
              mps_replicas=None, mig_dynamic=False, mig_reconfig_s=None, mig_start="carved", mig_hold_s=None) -> None:
    """``simulate --sweep``: check everything (axes, values, traces, gangs, output files) before
    any run, then run the sweep (:mod:`gpucast.cluster.sweep`) with a progress bar and print,
    and optionally write, its one table."""
    import gpucast.cluster as cl
    from gpucast.cluster import sweep as sw

    def check():
        if not specs:
            raise ValueError("--workers, --ray-address and --markdown go with --sweep AXIS=V1,V2,...")
        if report is not None:
            raise ValueError("--report is one run's HTML report: with --sweep use --json or --markdown")
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        if workers is not None and ray_address is not None:
            raise ValueError("give --workers or --ray-address, not both (Ray places the runs on its cluster's CPUs)")
        if ray_address is not None and not ray_address.strip():
            raise ValueError("--ray-address is empty: give 'auto', 'host:port', 'ray://host:port' or 'local'")
        check_base(gpus=gpus, gpus_per_node=gpus_per_node, limit=limit, load=load, error_sigma=error_sigma,
                   colocation=colocation, sharing=sharing)
        check_dynamic(mig_dynamic, mig_reconfig_s, mig_hold_s)
        axes = sw.parse_axes(specs, list(cl.POLICIES))
        names = axes.get("policy") or parse_policies(policies, list(cl.POLICIES))
        outs = reserve_outputs((json_out, "--json"), (markdown_out, "--markdown"))
        try:
            if ray_address is not None:
                connected[0] = sw.connect(ray_address.strip())   # an unreachable cluster fails before any work
            for g in axes.get("gpus", [gpus]):
                cl.ClusterSpec.build(gpu_type, g, gpus_per_node, mig_layout, mig_nodes, mps_nodes, mps_replicas, mig_dynamic,
                                     mig_start)
            env = cli._environment(env_file)
            base = sw.Base(trace=trace, gpus=gpus, gpu_type=gpu_type, gpus_per_node=gpus_per_node,
                           policies=tuple(names), seed=seed, error_sigma=error_sigma, limit=limit, load=load,
                           colocation=colocation, env=env, mig_layout=mig_layout, mig_nodes=mig_nodes, mps_nodes=mps_nodes,
                           mps_replicas=mps_replicas, mig_dynamic=mig_dynamic, mig_start=mig_start,
                           params=((("sharing", sharing),) if sharing != "timeslice" else ())
                           + tuple(engine_params(mig_reconfig_s, mig_hold_s).items()))
            pts = sw.points(base, axes)
            with _bar(cli.err) as bar:
                shared = sw.prepare(base, pts, progress=bar)
            for key, tr in shared.traces.items():
                check_gangs(cl, tr, sw._spec(base, key[1]), names)
        except BaseException:
            discard(outs)
            raise
        return axes, base, shared, outs

    connected = [False]
    try:
        axes, base, shared, (json_file, md_file) = cli._run(check)
        try:
            with _bar(cli.err) as bar:
                res = sw.run(base, axes, workers=workers, ray_address=ray_address and ray_address.strip(),
                             progress=bar, shared=shared)
        except BaseException:
            discard((json_file, md_file))
            raise
    finally:
        if connected[0]:
            import ray

            ray.shutdown()
    es = shared.error_model
    swept = ", ".join(f"{a} {'/'.join(sw._param(v) for v in vs)}" for a, vs in axes.items())
    title = (f"gpucast simulate --sweep: {len(res.rows)} runs ({swept}) on {gpu_type}; base: trace {trace}, "
             f"{gpus} GPUs, seed {seed}, load {'trace' if load is None else f'{load:g}'}, error sigma util "
             f"{es.util:.3g} / memory {es.memory:.3g} / step {es.step:.3g}, co-location world {colocation}, "
             f"sharing {sharing}")
    cli.console.print(sw.rich_table(res, title))
    where = f"on Ray ({res.workers} CPUs)" if res.executor == "ray" else (
        f"on {res.workers} local processes" if res.executor == "processes" else "one after another in this process")
    cli.console.print(f"{len(res.rows)} runs {where} in {res.wall_s:.1f} s (sum of run times "
                      f"{sum(res.point_wall_s):.1f} s); table times are hours of simulated time",
                      highlight=False, markup=False)

    def write_outputs():
        try:
            if json_file is not None:
                json_file.write_text(json.dumps(sw.to_json(res), indent=2) + "\n")
                cli.err.print(f"wrote {json_out}", highlight=False, markup=False)
            if md_file is not None:
                md_file.write_text(sw.markdown(res, title))
                cli.err.print(f"wrote {markdown_out}", highlight=False, markup=False)
        finally:
            discard((json_file, md_file))

    cli._run(write_outputs)


class _bar:
    """A rich progress bar on ``console`` as a ``progress(done, total, what)`` callback."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.tasks: dict = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.tasks:  # started at the first report: an early error leaves no blank line
            self.progress.__exit__(*exc)

    def __call__(self, done, total, what):
        if not self.tasks:
            self.progress.__enter__()
        task = self.tasks.get(what)
        if task is None:
            task = self.tasks[what] = self.progress.add_task(what, total=total)
        self.progress.update(task, completed=done, total=total)
