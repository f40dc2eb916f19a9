"""The measurement commands of the `gpucast` command line: ``profile`` and ``data``.

* ``gpucast profile MODEL [job flags] [--window-s S] [--json]``: run one job for real on this
  machine's GPU, in an isolated worker (:func:`gpucast.profile.worker.run_isolated`), and print
  what was measured.
* ``gpucast profile suite --out DIR --budget S``: the device suite
  (:func:`gpucast.profile.suite.run_suite`).
* ``gpucast data show [PATH...]``: the measured rows (Parquet files or directories).
* ``gpucast data compare [PATH]``: each measured ``ok`` solo row against ``gpucast.predict`` on
  the row's GPU.

A thin shell like :mod:`.app`, whose helpers and options it uses: :mod:`.app` calls
``register(app, common)`` (the module is passed in, so nothing here imports
``gpucast.cli`` and ``python -m gpucast.cli`` registers on the app it runs). No GPU, a missing
path, bad input, an output directory (``--out``, ``--save``) in which no file can be created
(checked before any measurement, :func:`gpucast.fileio.check_output_dir`): one ``error:`` line,
exit 2.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup


DEFAULT_DATA = Path("data/measurements")


class _DefaultRun(TyperGroup):
    """``gpucast profile MODEL ...`` means ``gpucast profile run MODEL ...``; ``suite`` is the one
    other subcommand (no zoo workload is named ``suite`` or ``run``)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


# ----------------------------------------------------------------------------------- helpers
def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.2f}"


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _gib(v) -> str:
    return "-" if v is None else f"{int(v) / 2**30:.2f}"


def _signed(v, fmt="{:+.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def _rel(pred, meas):
    return None if pred is None or not meas else 100.0 * (pred - meas) / meas


def gpu_model_or_fail(cli) -> str:
    """The NVML name of GPU 0; no GPU: one error line, exit 2."""
    from gpucast.profile.nvml import GpuUnavailable, open_backend

    try:
        backend = open_backend()
    except GpuUnavailable as exc:
        msg = str(exc)
        cli._fail(msg if msg.startswith("no NVIDIA GPU") else f"no NVIDIA GPU: {msg}")
    try:
        return backend.device_name()
    finally:
        backend.close()


def run_table(row: dict):
    """What one run measured, as a two-column table."""
    from rich.table import Table

    t = Table(title=f"measured on {row.get('gpu_model') or '?'} ({row.get('status')})")
    t.add_column("what")
    t.add_column("value", justify="right")
    seq = f" s{row['seq_len']}" if row.get("seq_len") else ""
    t.add_row("job", f"{row.get('model')} b{row.get('batch_size')}{seq} {row.get('precision')} {row.get('mode')} "
                     f"{row.get('optimizer')}")
    t.add_row("step ms (mean / p50 / p95)",
              " / ".join(_ms(row.get(k)) for k in ("step_time_mean_s", "step_time_p50_s", "step_time_p95_s")))
    t.add_row("window", f"{row.get('window_steps') or 0} steps, {row.get('window_s') or 0:.2f} s")
    t.add_row("utilization % (mean / p50 / p95)",
              " / ".join(_pct(row.get(k)) for k in ("util_mean_pct", "util_p50_pct", "util_p95_pct")))
    t.add_row("NVML samples", f"{row.get('util_samples') or 0} at {row.get('sampler_hz') or 0:.0f} Hz")
    t.add_row("process memory GiB (NVML, peak)", _gib(row.get("proc_mem_max_bytes")))
    t.add_row("device memory used GiB (NVML, peak)", _gib(row.get("mem_used_max_bytes")))
    t.add_row("torch peak allocated / reserved GiB",
              f"{_gib(row.get('torch_max_allocated_bytes'))} / {_gib(row.get('torch_max_reserved_bytes'))}")
    t.add_row("SM clock MHz / power W", f"{_pct(row.get('sm_clock_mean_mhz'))} / {_pct(row.get('power_mean_w'))}")
    return t


def rows_table(rows: list[dict]):
    """One line per run: model, batch, precision, mode, kind, GPU, status, step ms, util %, memory."""
    from rich.table import Table

    t = Table(title=f"{len(rows)} measured runs")
    for col in ("model", "batch", "precision", "mode", "kind", "GPU", "status", "step ms", "util %", "memory GiB",
                "suite"):
        t.add_column(col, justify="right" if col in ("batch", "step ms", "util %", "memory GiB") else "left")
    for r in rows:
        kind = r.get("kind") or "-"
        if kind == "colocated":
            kind = f"coloc[{r.get('slot')}]"
        t.add_row(str(r.get("model")), str(r.get("batch_size")), str(r.get("precision")), str(r.get("mode")), kind,
                  str(r.get("gpu_name") or r.get("gpu_model") or "-"), str(r.get("status")),
                  _ms(r.get("step_time_mean_s")), _pct(r.get("util_mean_pct")), _gib(r.get("proc_mem_max_bytes")),
                  str(r.get("suite") or "-"))
    return t


def compare_rows(rows: list[dict], predict=None, progress=None,
                 cpu_speed: float | None = None) -> tuple[list[dict], list[str]]:
    """Predict every ``ok`` solo row on its GPU, the job as the harness ran it
    (:func:`gpucast.profile.spec.as_run`: resident synthetic data, one ``loss.item()`` a step; the
    measuring host's ``cpu_speed`` where given); return (one record per row, notes).

    A record holds the row's job and GPU and, for step time, utilization and peak memory, the
    measured value (``step_time_mean_s``, ``util_mean_pct``, ``proc_mem_max_bytes``), the
    predicted one (``step_time_s``, ``gpu_util_pct``, ``memory_peak_bytes``) and the error:
    ``(pred - meas) / meas`` in percent for step time and memory, ``pred - meas`` in points for
    utilization. A row whose GPU is not in the catalog (``gpu_name`` null or unknown) is skipped
    with a note; so is a row whose job cannot be rebuilt or predicted. Memory is not compared when
    NVML did not attribute the process's memory (a container with its own pid namespace)."""
    from gpucast.hardware import catalog
    from gpucast.job import Job
    from gpucast.profile.spec import as_run

    if predict is None:
        from gpucast.api import predict
    gpus = catalog()
    records, notes = [], []
    solo_ok = [r for r in rows if r.get("kind") == "solo" and r.get("status") == "ok"]
    off_catalog: dict[str, int] = {}
    for r in (progress(solo_ok) if progress else solo_ok):
        spec = gpus.get(r.get("gpu_name") or "")
        if spec is None:
            name = r.get("gpu_name") or r.get("gpu_model") or "an unknown GPU"
            off_catalog[name] = off_catalog.get(name, 0) + 1
            continue
        try:
            p = predict(as_run(Job.from_dict(json.loads(r["job_json"])), cpu_speed), spec)
        except Exception as exc:  # noqa: BLE001 - one bad row must not hide the others
            notes.append(f"row {r.get('run_id')}: cannot predict: {' '.join(str(exc).split())[:200]}")
            continue
        ms, mu, mm = r.get("step_time_mean_s"), r.get("util_mean_pct"), r.get("proc_mem_max_bytes")
        records.append(dict(
            run_id=r.get("run_id"), model=r.get("model"), batch_size=r.get("batch_size"),
            precision=r.get("precision"), mode=r.get("mode"), gpu=spec.name,
            step_time_measured_s=ms, step_time_predicted_s=p.step_time_s,
            step_time_error_pct=_rel(p.step_time_s, ms),
            util_measured_pct=mu, util_predicted_pct=p.gpu_util_pct,
            util_error_pts=None if mu is None else p.gpu_util_pct - mu,
            memory_measured_bytes=mm, memory_predicted_bytes=p.memory_peak_bytes,
            memory_error_pct=_rel(p.memory_peak_bytes, mm), bottleneck=p.bottleneck,
        ))
    for name, n in sorted(off_catalog.items()):
        notes.append(f"skipped {n} row(s) on {name}: not in the GPU catalog (see `gpucast gpus`)")
    no_mem = sum(1 for rec in records if rec["memory_measured_bytes"] is None)
    if no_mem:
        notes.append(f"{no_mem} row(s) without NVML process memory: memory not compared for them")
    return records, notes


def summarize(records: list[dict]) -> dict:
    """Median absolute % error (MdAPE) of step time and of peak memory; for utilization, the
    mean absolute error in points and the RMSLE as the reference paper defines it, on fractions:

        RMSLE = sqrt( mean_i ( ln(1 + pred_i / 100) - ln(1 + meas_i / 100) )^2 )

    ``pred_i``, ``meas_i``: predicted and measured utilization in percent; natural logarithm.
    A record lacking a value is left out of that metric; ``n_*`` counts what each one used."""
    def mdape(key):
        v = [abs(r[key]) for r in records if r[key] is not None]
        return (statistics.median(v) if v else None), len(v)

    step, n_step = mdape("step_time_error_pct")
    mem, n_mem = mdape("memory_error_pct")
    pairs = [(r["util_predicted_pct"], r["util_measured_pct"]) for r in records if r["util_measured_pct"] is not None]
    rmsle = (math.sqrt(sum((math.log1p(p / 100) - math.log1p(m / 100)) ** 2 for p, m in pairs) / len(pairs))
             if pairs else None)
    mae = sum(abs(p - m) for p, m in pairs) / len(pairs) if pairs else None
    return dict(rows=len(records), step_time_mdape_pct=step, n_step=n_step, memory_mdape_pct=mem, n_memory=n_mem,
                util_rmsle=rmsle, util_mae_pts=mae, n_util=len(pairs))


def compare_table(records: list[dict]):
    from rich.table import Table

    t = Table(title=f"measured vs predicted ({len(records)} ok solo runs)")
    for col in ("model", "batch", "precision", "mode", "gpu", "step ms meas", "pred", "err %", "util % meas", "pred",
                "err pts", "mem GiB meas", "pred", "err %"):
        t.add_column(col, justify="left" if col in ("model", "precision", "mode", "gpu") else "right")
    for r in records:
        t.add_row(str(r["model"]), str(r["batch_size"]), str(r["precision"]), str(r["mode"]), r["gpu"],
                  _ms(r["step_time_measured_s"]), _ms(r["step_time_predicted_s"]), _signed(r["step_time_error_pct"]),
                  _pct(r["util_measured_pct"]), _pct(r["util_predicted_pct"]),
                  _signed(r["util_error_pts"], "{:+.1f}"), _gib(r["memory_measured_bytes"]),
                  _gib(r["memory_predicted_bytes"]), _signed(r["memory_error_pct"]))
    return t


def summary_line(s: dict) -> str:
    def f(v, fmt):
        return "-" if v is None else fmt.format(v)

    return (f"step time MdAPE {f(s['step_time_mdape_pct'], '{:.1f}')}% (n={s['n_step']}); "
            f"peak memory MdAPE {f(s['memory_mdape_pct'], '{:.1f}')}% (n={s['n_memory']}); "
            f"utilization RMSLE {f(s['util_rmsle'], '{:.3f}')}, MAE {f(s['util_mae_pts'], '{:.1f}')} pts "
            f"(n={s['n_util']}; RMSLE = sqrt(mean((ln(1+pred/100) - ln(1+meas/100))^2)))")


# ----------------------------------------------------------------------------------- commands
def register(app: typer.Typer, cli) -> None:
    """Add ``profile`` and ``data`` to ``app``; ``cli`` is the module of ``app`` (its shared
    options, ``_build_job``, ``_run``, ``_fail`` and consoles)."""
    profile_app = typer.Typer(cls=_DefaultRun, no_args_is_help=True, add_completion=False,
                              help="Measure jobs for real on this machine's NVIDIA GPU (`gpucast profile MODEL`, "
                                   "`gpucast profile suite`).")
    data_app = typer.Typer(no_args_is_help=True, add_completion=False,
                           help="Show measured rows and compare them with predictions.")

    def load(paths) -> list[dict]:
        from gpucast.profile.suite import read_rows

        return cli._run(lambda: read_rows(paths or [DEFAULT_DATA]))

    @profile_app.command("run")
    def profile_run(model: Optional[str] = cli._MODEL, job: Optional[Path] = cli._JOB,
                    batch_size: Optional[int] = cli._BS, seq_len: Optional[int] = cli._SEQ,
                    input_shape: Optional[str] = cli._SHAPE, precision: Optional[str] = cli._PREC,
                    mode: Optional[str] = cli._MODE, optimizer: Optional[str] = cli._OPT,
                    input_pipeline_ms: Optional[float] = cli._PIPE, gpus: Optional[int] = cli._NGPU,
                    window_s: float = typer.Option(3.0, "--window-s", min=0.1, help="Steady-state window, seconds."),
                    warmup_steps: int = typer.Option(5, "--warmup-steps", min=0, help="Steps before the window."),
                    timeout_s: float = typer.Option(300.0, "--timeout-s", min=1.0,
                                                    help="Kill the run after this many seconds."),
                    save: Optional[Path] = typer.Option(None, "--save",
                                                        help="Also append the row to this dataset directory."),
                    as_json: bool = cli._JSON) -> None:
        """Run one job for real on GPU 0: measured step time, utilization and memory."""
        from gpucast.profile.runner import RunSpec

        def build():
            if save is not None:  # before the run: an unwritable directory must not cost a measurement
                from gpucast.fileio import check_output_dir

                check_output_dir(save, "--save")
            j = cli._build_job(model, job, batch_size, seq_len, input_shape, precision, mode, optimizer,
                               input_pipeline_ms, gpus)
            return j, RunSpec(j, warmup_steps=warmup_steps, window_s=window_s)

        j, spec = cli._run(build)
        gpu_model = gpu_model_or_fail(cli)
        from gpucast.profile.worker import run_isolated

        row = run_isolated(spec, timeout_s=timeout_s)
        if save is not None:
            from gpucast.profile.dataset import Dataset, config_id

            row["config_id"] = config_id(j.key, row.get("gpu_model") or gpu_model, "solo")
            path = cli._run(lambda: Dataset(save).append([row]))
            cli.err.print(f"saved to {path}", highlight=False)
        if as_json:
            print(json.dumps(row, indent=2, sort_keys=True))
        else:
            cli.console.print(run_table(row))
            if j.gpus > 1:
                cli.console.print(f"note: one replica of {j.gpus} was run (no all-reduce)", highlight=False,
                                  markup=False)
            if row.get("status") != "ok":
                cli.console.print(f"{row.get('status')}: {row.get('error') or ''}", highlight=False, markup=False)
        if row.get("status") != "ok":
            raise typer.Exit(1)

    @profile_app.command("suite")
    def profile_suite(out: Optional[Path] = typer.Option(None, "--out", help="Directory of the run (dataset parts "
                                                                                "and measurements.parquet)."),
                      budget: float = typer.Option(540.0, "--budget", min=1.0, help="Wall-time budget, seconds."),
                      suite: str = typer.Option("h200-v1", "--suite", help="Suite name recorded in every row."),
                      prior: List[Path] = typer.Option([], "--prior", help="Earlier measurements whose done "
                                                                              "configurations are skipped; repeatable."),
                      no_resume: bool = typer.Option(False, "--no-resume", help="Measure done configurations again."),
                      window_s: float = typer.Option(2.0, "--window-s", min=0.1,
                                                     help="Steady window per run, seconds."),
                      list_only: bool = typer.Option(False, "--list", help="Print the suite and exit (no GPU needed)."),
                      colocated_share: float = typer.Option(0.25, "--colocated-share", min=0.0, max=1.0,  # suite.COLOCATED_SHARE
                                                            help="Share of the budget kept for the co-located "
                                                                 "groups (1: the groups first).")
                      ) -> None:
        """Measure the device suite, most informative configurations first, within a time budget."""
        from gpucast.profile import suite as s

        if list_only:
            from rich.table import Table

            plan = s.configs()
            t = Table(title=f"suite {suite}: {len(plan)} configurations")
            for col in ("#", "phase", "regime", "kind", "jobs"):
                t.add_column(col, justify="right" if col == "#" else "left")
            for i, c in enumerate(plan, 1):
                t.add_row(str(i), c.phase, c.regime or "-", c.kind, c.label)
            cli.console.print(t)
            return
        if out is None:
            cli._fail("give --out DIR (where the measurements go)")
        from gpucast.fileio import check_output_dir

        cli._run(lambda: check_output_dir(out, "--out"))  # before the suite: not after a GPU check
        for p in prior:
            if not p.exists():
                cli._fail(f"--prior {str(p)!r} does not exist")
        gpu_model_or_fail(cli)
        res = s.run_suite(out, budget_s=budget, suite=suite, resume=not no_resume, prior=prior, window_s=window_s,
                          colocated_share=colocated_share)
        cli.console.print(f"{res.measured} configurations measured ({res.rows} rows), {res.skipped} skipped as done, "
                          f"stopped: {res.stopped}; rows in {res.parquet or '-'}", highlight=False, markup=False)

    @data_app.command("show")
    def data_show(paths: Optional[List[Path]] = typer.Argument(None, help="Parquet files or directories "
                                                                            "(default: data/measurements)."),
                  as_json: bool = cli._JSON,
                  status: Optional[str] = typer.Option(None, "--status", help="Only rows with this status.")) -> None:
        """Print measured rows, one per run."""
        from gpucast.profile.schema import STATUSES

        if status is not None and status not in STATUSES:
            cli._fail(f"--status must be one of {', '.join(STATUSES)}, got {status!r}")
        rows = [r for r in load(paths) if status is None or r.get("status") == status]
        if as_json:
            print(json.dumps(rows, indent=2, sort_keys=True))
        elif not rows:
            cli.console.print("no rows", highlight=False)
        else:
            cli.console.print(rows_table(rows))
            cli.console.print("memory: peak NVML memory of the run's process ('-': NVML did not attribute it)",
                              highlight=False)

    @data_app.command("compare")
    def data_compare(path: Optional[Path] = typer.Argument(None, help="Parquet file or directory "
                                                                       "(default: data/measurements)."),
                     cpu_speed: Optional[float] = typer.Option(
                         None, "--cpu-speed", min=0.05, max=20.0,
                         help="The measuring host's single-thread speed relative to the reference core "
                              "(stack.cpu_speed; default: the job's own, else 1.0)."),
                     as_json: bool = cli._JSON) -> None:
        """Measured vs predicted step time, utilization and peak memory of each ok solo row, and a summary.

        Each job is predicted as the harness ran it: synthetic inputs already on the GPU, one
        loss.item() per step, no progress bar (gpucast.profile.spec.as_run)."""
        rows = load([path] if path is not None else [])
        records, notes = [], []
        if rows:
            from rich.progress import track

            records, notes = compare_rows(
                rows, progress=lambda it: track(it, description="predicting", console=cli.err, transient=True),
                cpu_speed=cpu_speed)
        else:
            notes = ["no rows"]
        summary = summarize(records)
        if as_json:
            print(json.dumps({"records": records, "summary": summary, "notes": notes}, indent=2))
            return
        if not rows:
            cli.console.print("no rows", highlight=False)
            return
        for note in notes:
            cli.console.print(f"note: {note}", highlight=False, markup=False)
        if not records:
            cli.console.print("no ok solo rows on a catalog GPU to compare", highlight=False)
            return
        cli.console.print(compare_table(records))
        cli.console.print(summary_line(summary), highlight=False, markup=False)

    app.add_typer(profile_app, name="profile")
    app.add_typer(data_app, name="data")
