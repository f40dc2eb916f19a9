"""The learning commands of the `gpucast` command line: ``calibrate`` and ``learn evaluate``.

* ``gpucast calibrate ROWS... --out env.yaml [--label NAME] [--base default|priors] [--no-cv]
  [--json]``: read measured rows (:mod:`gpucast.learn.rows`), fit an environment to them
  (:func:`gpucast.learn.calibrate.calibrate`), print the error on the rows before and after and a
  cross-validated estimate, and write the environment file (:mod:`gpucast.learn.artifacts`).
  ``gpucast predict/explain/simulate/serve --env env.yaml`` use it.
* ``gpucast learn fit ROWS... --out hybrid.json [--quantity Q] [--env env.yaml] [--force]``: train the
  hybrid residual model on the rows (:func:`gpucast.learn.evaluate.fit_hybrid`); it is written only
  if it beats the physics on held-out groups (``--force`` writes it anyway);
  ``gpucast predict --learned hybrid.json`` applies it.
* ``gpucast learn evaluate ROWS... [--quantity util_pct|memory_mib|step_time_s] [--json]``: every
  method of :mod:`gpucast.learn.evaluate` under the same group-held-out split, one table.

A thin shell like :mod:`.app`, which calls ``register(app, common)``. The output
file is reserved before anything is fitted (:func:`gpucast.fileio.reserve_output`: an unwritable
one is one ``error:`` line, exit 2; a write failure after the fit is one ``error:`` line too); a
malformed row prints one ``error:`` line naming the file, row and column and exits 2; nothing is
written then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer


def _needs(module: str) -> None:
    """Refuse in one line when the ``learn`` extra is not installed."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ValueError(f"this command needs {module}: pip install 'gpucast[learn]'")


def _fitter(rows, cli):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpucast.learn.fit import Fitter

    def check():
        if any(r.serving for r in rows):
            raise ValueError("serving rows (latency_s, ttft_s, tpot_s, output_tokens_per_s) are for gpucast calibrate")
    cli._run(check)
    with Progress(TextColumn("capturing the rows' jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=cli.err, transient=True) as bar:
        task = bar.add_task("capture", total=len(rows))
        return cli._run(lambda: Fitter(rows, progress=lambda i, n: bar.update(task, completed=i)))


def _serving_fit(rows, env, cli):
    """Each engine's host time per iteration fitted on the serving rows (gpucast.learn.serving_fit)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpucast.learn.serving_fit import fit_serving

    with Progress(TextColumn("predicting the serving rows"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=cli.err, transient=True) as bar:
        task = bar.add_task("serving", total=len(rows))
        fit = cli._run(lambda: fit_serving(rows, env, progress=lambda i, n: bar.update(task, completed=i)))

    def check():
        if not fit.engines:
            raise ValueError(f"no serving row could be predicted ({fit.unanswered[0]})")
    cli._run(check)
    return fit


def _print_calibration(cal, cli) -> None:
    lines = [("before (the base constants)", cal.before), ("after (fitted, on these rows)", cal.after),
             (f"cross-validated (held out by {cal.cv_unit})", cal.cross_validated)]
    cli.console.print(_metrics_table(f"gpucast calibrate: {cal.rows} rows, {len(cal.groups)} groups, "
                                     f"GPUs {', '.join(cal.gpus)}", lines))
    moved = ", ".join(f"{p} {v:.3g}" for p, v in cal.info.get("values", {}).items()) or "none"
    w = cal.info.get("prior_weight")
    how = ("the base kept: held-out rows were predicted best without a fit" if w is None and cal.params
           else f"prior weight {w:g}" + (" (chosen by the cross-validation)" if cal.cross_validated else ""))
    cli.console.print(f"fitted: {moved}; {how}", highlight=False)
    if not cal.conformal:
        cli.console.print("intervals: too few held-out rows for 80 % split-conformal intervals; predictions "
                          "keep the constant-corner bands", highlight=False)
    else:
        cli.console.print("80 % intervals (log half-widths): " + ", ".join(
            f"{q} {c['halfwidth']:.3f} from {c['rows']} rows" for q, c in cal.conformal.items()), highlight=False)


def _print_serving_fit(fit, cli) -> None:
    from rich.table import Table

    t = Table(title="serving rows: each engine's host time per iteration (MdAPE of the measured figures)")
    for col in ("engine", "rows", "groups", "host ms / iteration", "before", "after", "held out by group"):
        t.add_column(col, justify="left" if col == "engine" else "right")
    for e, f in fit.engines.items():
        t.add_row(e, str(f.rows), str(len(f.groups)), f"{f.prior_s * 1e3:.2f} -> {f.fitted_s * 1e3:.2f}",
                  f"{100 * f.mdape_before:.1f} %", f"{100 * f.mdape_after:.1f} %",
                  "-" if f.mdape_held_out is None else f"{100 * f.mdape_held_out:.1f} %")
    cli.console.print(t)
    for line in fit.unanswered[:5]:
        cli.err.print(f"not predicted: {line}", highlight=False, markup=False)


def _metrics_table(title: str, lines: list[tuple[str, dict | None]]):
    from rich.table import Table

    t = Table(title=title)
    for col in ("", "rows", "util MAE (pts)", "util RMSLE", "memory MAPE", "step MdAPE"):
        t.add_column(col, justify="left" if not col else "right")
    for name, s in lines:
        if not s:
            t.add_row(name, "-", "-", "-", "-", "-")
            continue
        n = max(v["n"] for v in s.values())
        t.add_row(name, str(n),
                  f"{s['util']['mae']:.1f}" if "util" in s else "-", f"{s['util']['rmsle']:.3f}" if "util" in s else "-",
                  f"{100 * s['memory']['mape']:.1f} %" if "memory" in s else "-",
                  f"{100 * s['step']['mdape']:.0f} %" if "step" in s else "-")
    return t


def _base(name: str):
    """``--base``: the Environment a fit starts from."""
    from gpucast.estimate.environment import Environment

    if name not in ("default", "priors"):
        raise ValueError(f"--base must be default or priors, got {name!r}")
    return Environment.priors() if name == "priors" else Environment.default()


def register(app: typer.Typer, cli) -> None:
    """Add ``calibrate`` and ``learn`` to ``app``; ``cli`` is the module of ``app``."""

    @app.command("calibrate")
    def calibrate_cmd(rows: List[Path] = typer.Argument(..., help="Measured-row files: CSV/Parquet/JSONL, a "
                                                                    "`gpucast profile` dataset, or a shared set."),
                      out: Path = typer.Option(..., "--out", "-o", help="Write the environment file (YAML) here."),
                      label: Optional[str] = typer.Option(None, "--label", help="Name of the environment "
                                                                               "(default: the output's stem)."),
                      base: str = typer.Option("default", "--base", help="Start from: default (the packaged "
                                                                          "constants) | priors (the published ones)."),
                      cv: bool = typer.Option(True, "--cv/--no-cv", help="Cross-validate (and give intervals)."),
                      as_json: bool = typer.Option(False, "--json", help="Print the environment document as JSON.")
                      ) -> None:
        """Fit an environment (host, loader, context, per-GPU speed; a serving engine's host time per
        iteration from serve rows) to a cluster's measured jobs."""
        from gpucast.fileio import reserve_output
        from gpucast.learn import artifacts
        from gpucast.learn.calibrate import calibrate
        from gpucast.learn.rows import read_rows

        def check():
            _needs("scipy")
            return _base(base)

        start = cli._run(check)
        # Reserve the file before the fit: an unwritable --out is one error line, not a lost fit.
        with cli._run(lambda: reserve_output(out, "--out")) as reserved:
            measured = cli._run(lambda: read_rows(rows))
            serving_rows = [r for r in measured if r.serving]
            training = [r for r in measured if not r.serving]
            cal = None
            if training:
                fitter = _fitter(training, cli)
                with cli.err.status("calibrating") as status:
                    cal = cli._run(lambda: calibrate(fitter, base=start, cross_validate=cv, label=label or out.stem,
                                                     progress=lambda s: status.update(s)))
            sfit = _serving_fit(serving_rows, cal.env if cal is not None else start, cli) if serving_rows else None
            doc = artifacts.document(cal, label or out.stem, rows, serving=sfit, serving_rows=serving_rows, base=start)
            cli._run(lambda: artifacts.save_environment(doc, reserved))
        if as_json:
            print(json.dumps(doc, indent=2, default=float))
        else:
            if cal is not None:
                _print_calibration(cal, cli)
            if sfit is not None:
                _print_serving_fit(sfit, cli)
        cli.err.print(f"wrote {out}", highlight=False, markup=False)

    learn_app = typer.Typer(no_args_is_help=True, add_completion=False,
                            help="Learned models and their evaluation on measured rows.")

    @learn_app.command("evaluate")
    def evaluate_cmd(rows: List[Path] = typer.Argument(..., help="Measured-row files (see `gpucast calibrate`)."),
                     quantity: List[str] = typer.Option([], "--quantity", "-q",
                                                        help="util_pct | memory_mib | step_time_s (default: all the "
                                                             "rows measured)."),
                     base: str = typer.Option("default", "--base", help="default | priors"),
                     as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
        """Every method under one group-held-out split: floor, reference-style trees, physics, calibrated
        physics, hybrid."""
        import numpy as np
        from rich.table import Table

        from gpucast.learn import evaluate as ev
        from gpucast.learn.rows import read_rows

        def check():
            _needs("scipy")
            _needs("lightgbm")
            bad = [q for q in quantity if q not in ev.KEYS]
            if bad:
                raise ValueError(f"--quantity must be one of {', '.join(ev.KEYS)}, got {bad[0]!r}")
            start = _base(base)
            r = read_rows(rows)
            if len({x.group for x in r}) < 2:
                raise ValueError("learn evaluate holds out whole groups: the rows need at least two groups")
            return r, start

        measured, start = cli._run(check)
        fitter = _fitter(measured, cli)
        qs = tuple(quantity) or tuple(q for q, arr in (("util_pct", fitter.util), ("memory_mib", fitter.memory),
                                                       ("step_time_s", fitter.step)) if (~np.isnan(arr)).any())
        with cli.err.status("evaluating") as status:
            res = ev.compare(fitter, qs, start, progress=lambda s: status.update(s))
        doc = {q: {m: ev.score(fitter, q, res[m][q]) for m in ev.METHODS} for q in qs}
        if as_json:
            print(json.dumps(doc, indent=2, default=float))
            return
        for q in qs:
            t = Table(title=f"{q}: {len(fitter.rows)} rows, {len(set(fitter.groups))} groups held out one at a time")
            keys = [k for k in doc[q]["physics"] if k != "n"]
            t.add_column("method")
            for k in keys:
                t.add_column(k, justify="right")
            for m in ev.METHODS:
                t.add_row(m, *(f"{doc[q][m][k]:.3f}" for k in keys))
            cli.console.print(t)

    @learn_app.command("fit")
    def fit_cmd(rows: List[Path] = typer.Argument(..., help="Measured-row files (see `gpucast calibrate`)."),
                out: Path = typer.Option(..., "--out", "-o", help="Write the hybrid model (JSON) here."),
                quantity: Optional[str] = typer.Option(None, "--quantity", "-q",
                                                       help="util_pct | memory_mib | step_time_s (default: the "
                                                            "quantity most rows measured)."),
                env_file: Optional[Path] = cli._ENV,
                force: bool = typer.Option(False, "--force", help="Write the model even if it loses to the physics "
                                                                  "on held-out groups.")) -> None:
        """Train the hybrid (LightGBM on the physics' residuals) on measured rows; `predict --learned` uses it."""
        from gpucast.fileio import reserve_output
        from gpucast.learn import artifacts
        from gpucast.learn.evaluate import fit_hybrid
        from gpucast.learn.rows import read_rows

        def check():
            _needs("lightgbm")
            if quantity is not None and quantity not in ("util_pct", "memory_mib", "step_time_s"):
                raise ValueError(f"--quantity must be util_pct, memory_mib or step_time_s, got {quantity!r}")
            r = read_rows(rows)
            env = cli._environment(env_file)
            return r, env

        # Reserve the file before training: an unwritable --out is one error line, not a lost model.
        with cli._run(lambda: reserve_output(out, "--out")) as reserved:
            measured, env = cli._run(check)
            fitter = _fitter(measured, cli)
            with cli.err.status("training"):
                model, meta = cli._run(lambda: fit_hybrid(fitter, quantity, env))
            meta["provenance"] = {"files": [{"path": str(p), "sha256": artifacts.file_digest(p)} for p in rows if p.is_file()]}
            ho = meta["held_out"]
            key = {"util_pct": "rmsle", "memory_mib": "mape", "step_time_s": "mdape"}[model.quantity]
            if ho:
                cli.console.print(f"held out by group ({len(meta['groups'])} groups, {model.rows} rows): {key} physics "
                                  f"{ho['physics'][key]:.3f}, hybrid {ho['hybrid'][key]:.3f}", highlight=False)
            if not meta["wins"] and not force:
                why = "no held-out groups" if not ho else f"{key} {ho['hybrid'][key]:.3f} vs {ho['physics'][key]:.3f}"
                cli._fail(f"not written: the hybrid does not beat the physics on held-out groups ({why}); "
                          f"--force writes it anyway", code=1)
            cli._run(lambda: artifacts.save_model(reserved, model, meta))
            if model.rows < artifacts.FEW_ROWS:
                cli.err.print(f"[yellow]note:[/] trained on {model.rows} rows, fewer than {artifacts.FEW_ROWS}: its "
                              f"predictions say so in model_version", highlight=False)
        cli.err.print(f"wrote {out}", highlight=False, markup=False)

    app.add_typer(learn_app, name="learn")

