"""``gpucast pack JOB JOB ... --gpu GPU``: several one-GPU jobs on one GPU, in every sharing mode.

A thin shell over :func:`gpucast.advisor.pack.pack` like :mod:`.app` (which calls ``register(app, common)``). Each JOB is a zoo workload with an optional batch size and precision,
``MODEL[:BATCH[:PRECISION]]`` (``resnet50:64``, ``bert-base:16:amp-bf16``), or a job file
(``.yaml``/``.yml``/``.json``, as ``--job`` takes). Prints one row per arrangement (time-slicing,
with HAMi core limits, MPS, MPS replicas, the best MIG layout) with each job's slowdown, the jobs'
total progress and whether their memory fits, the MIG slice of each job, why the best one wins and
its Kubernetes requests; ``--json`` for tools (every arrangement's requests). Bad input (a job, a GPU, a count) is one ``error:`` line and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def parse_job(text: str):
    """A JOB argument: ``MODEL[:BATCH[:PRECISION]]`` or a job file."""
    from gpucast.job import Job, JobError

    if Path(text).suffix.lower() in JOB_FILE_SUFFIXES:
        return Job.load(Path(text))
    model, *rest = text.split(":")
    if len(rest) > 2 or not model:
        raise JobError(f"job {text!r}: give MODEL[:BATCH[:PRECISION]] (e.g. resnet50:64:amp-bf16) or a job file")
    fields: dict = {}
    if rest:
        try:
            fields["batch_size"] = int(rest[0])
        except ValueError:
            raise JobError(f"job {text!r}: the batch size {rest[0]!r} is not a whole number") from None
    if len(rest) > 1:
        fields["precision"] = rest[1]
    return Job(model=model, **fields)


def register(app: typer.Typer, cli) -> None:
    """Add ``pack`` to ``app``; ``cli`` is the module of ``app``."""

    @app.command("pack")
    def pack_cmd(jobs: List[str] = typer.Argument(..., metavar="JOB...",
                                                  help="2 to 7 jobs: MODEL[:BATCH[:PRECISION]] (zoo workloads, "
                                                       "`gpucast zoo`) or job files (.yaml/.json)."),
                 gpu: str = typer.Option("a100-80gb", "--gpu", "-g", help="The whole GPU they share."),
                 as_json: bool = cli._JSON, constants: Optional[Path] = cli._CFG,
                 env_file: Optional[Path] = cli._ENV) -> None:
        """Several one-GPU jobs on one GPU: time-slicing, HAMi core limits, MPS, MPS replicas or a MIG
        layout; which keeps the most of their speed, and why."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from gpucast.advisor.pack import pack

        def setup():
            cfg, env = cli._config(constants, env_file)
            return [parse_job(j) for j in jobs], cfg, env

        js, cfg, env = cli._run(setup)
        with Progress(TextColumn("predicting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=cli.err, transient=True) as bar:
            task = bar.add_task("jobs", total=None)
            result = cli._run(lambda: pack(js, gpu, cfg, env,
                                           progress=lambda d, t: bar.update(task, completed=d, total=t)))
        if as_json:
            print(json.dumps(result.to_dict(), indent=2))
            return
        cli.console.print(table(result))
        for line in result.why:
            cli.console.print(line, highlight=False, markup=False)
        if result.best is not None:
            b = result.arrangements[result.best]
            cli.console.print(f"Kubernetes, {b.detail}: the GPU: {b.node}", highlight=False, markup=False)
            for lab, req in zip(result.labels, b.requests):
                cli.console.print(f"  {lab}: " + ", ".join(f"{k}: {v}" for k, v in req.items()), highlight=False,
                                  markup=False)
            for lab, solo, here in zip(result.labels, result.solo_serving or (), b.serving or ()):
                if solo is not None and here is not None:
                    cli.console.print(f"serving, {lab}: TTFT {here['ttft_s'] * 1e3:.1f} ms, TPOT "
                                      f"{here['tpot_s'] * 1e3:.2f} ms under {b.detail} (alone on the whole GPU "
                                      f"{solo['ttft_s'] * 1e3:.1f} / {solo['tpot_s'] * 1e3:.2f} ms)"
                                      + (f", {here['preemptions']} preemptions" if here["preemptions"] else ""),
                                      highlight=False, markup=False)


def table(result):
    """One row per arrangement: what to set, each job's slowdown, total progress, worst, memory."""
    from rich.table import Table

    t = Table(title=f"gpucast pack: {len(result.labels)} jobs on one {result.gpu} "
                    f"(analytic predictions, not measurements)")
    t.add_column("arrangement", no_wrap=True)
    for lab in result.labels:
        t.add_column(lab, justify="right")
    for name in ("progress", "worst", "memory"):
        t.add_column(name, justify="right")
    mem = result.shared_memory_bytes / 2**30
    for i, a in enumerate(result.arrangements):
        cells = [f"x{s:.2f}" + (f" {a.slices[k]}" if a.slices else "") for k, s in enumerate(a.slowdowns)]
        fits = "fits" if a.memory_fits else "does not fit"
        t.add_row(("* " if i == result.best else "") + a.detail, *cells, f"{a.progress:.2f}", f"x{a.worst:.2f}",
                  fits if a.slices else f"{mem:.1f} of {result.gpu_memory_bytes / 2**30:.0f} GiB, {fits}")
    return t
