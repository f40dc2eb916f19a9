"""The `gpucast` Typer app: every command group registered on it, and :func:`main`, which turns a usage error
into one line and exit code 2.

The commands live in this package, one module per group: ``predict``/``explain`` (:mod:`.predict`), ``zoo``,
``gpus``, ``demo`` (:mod:`.catalog`), ``profile``/``data`` (:mod:`.data`), ``simulate`` (:mod:`.sim`), ``serve``
(:mod:`.serve`), the scheduler integrations (:mod:`.integrations`), ``calibrate``/``learn`` (:mod:`.learn`),
``probe-host`` (:mod:`.probe`), ``advise`` (:mod:`.advise`) and ``pack`` (:mod:`.pack`).
"""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from gpucast.cli import advise, catalog, common, data, integrations, learn, pack, predict, probe, serve, sim
from gpucast.cli.common import err

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict a deep-learning job's GPU utilization, peak memory and step time from its graph.")
app.command()(predict.predict)
app.command()(predict.explain)
for _group in (catalog, data, sim, serve, integrations, learn, probe, advise, pack):
    _group.register(app, common)


def _click_exceptions():
    """The click exception module typer raises from (typer >= 0.2x vendors click as typer._click)."""
    return sys.modules[typer.BadParameter.__module__]


def main() -> None:
    exceptions = _click_exceptions()
    try:
        rv = app(standalone_mode=False)
        sys.stdout.flush()  # surface a closed pipe here, not at interpreter exit
    except KeyboardInterrupt:
        sys.exit(130)
    except exceptions.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `gpucast`: typer already printed the help
            sys.exit(exc.exit_code)
        # A usage error (bad option value, unknown option or command): one line like our own
        # errors instead of typer's multi-line box. Usage errors exit 2.
        msg = " ".join(exc.format_message().split())
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        err.print(f"[bold red]error:[/] {escape(msg + hint)}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except getattr(exceptions, "Abort", ()):  # not every vendored click has it
        sys.exit(1)
    except BrokenPipeError:  # `gpucast zoo --json | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)

