"""The host probe on the `gpucast` command line: ``gpucast probe-host --out host.yaml``.

Times PyTorch's dispatcher and a few data-loader primitives on this CPU
(:mod:`gpucast.probe.host`) and writes an environment file for nodes like this one: its
``host_time_factor`` (this CPU's speed relative to the reference core) and loader constants.
``gpucast predict/explain/simulate --env host.yaml`` read it like a calibrated environment. A thin
shell like :mod:`.app`, which calls ``register(app, common)``; the output file is
reserved before anything is measured (:func:`gpucast.fileio.reserve_output`: an unwritable one is
one ``error:`` line, exit 2) and written atomically; a write failure then is one ``error:`` line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer, cli) -> None:
    """Add ``probe-host`` to ``app``; ``cli`` is the module of ``app``."""

    @app.command("probe-host")
    def probe_host_cmd(out: Path = typer.Option(..., "--out", "-o", help="Write the environment file (YAML) here."),
                       label: Optional[str] = typer.Option(None, "--label", help="Name of the environment "
                                                                                "(default: host-<hostname>)."),
                       quick: bool = typer.Option(False, "--quick", help="Dispatch only (~0.5 s): no loader constants."),
                       as_json: bool = typer.Option(False, "--json", help="Print the environment document as JSON.")
                       ) -> None:
        """Measure this host's CPU (PyTorch dispatch, loader primitives) as an environment file for --env."""
        from gpucast.fileio import reserve_output
        from gpucast.probe import host

        # Reserve the file before probing: an unwritable --out is one error line, not a lost probe.
        with cli._run(lambda: reserve_output(out, "--out")) as reserved:
            with cli.err.status("probing this host") as status:
                probe = host.measure(quick=quick, progress=lambda s: status.update(f"probing this host: {s}"))
            doc = cli._run(lambda: host.write(probe, reserved, label))
        if as_json:
            print(json.dumps(doc, indent=2, default=float))
            return
        from rich.table import Table

        t = Table(title=f"gpucast probe-host: {probe.cpu}, {probe.cores} cores, torch {probe.torch_version}")
        t.add_column("constant")
        t.add_column("value", justify="right")
        t.add_column("measured here", justify="right")
        t.add_row("cpu speed (reference core = 1)", f"{probe.speed:.3f}", "")
        t.add_row("host_time_factor", f"{1 / probe.speed:.3f}", "")
        for name, us in probe.dispatch_s.items():
            t.add_row(f"  dispatch: {name}", "", f"{us * 1e6:.2f} us")
        for name, v in probe.loader.items():
            here = probe.loader_measured_s[name]
            t.add_row(name, f"{v:.4g}", f"{here:.4g}")
        cli.console.print(t)
        for s in probe.skipped:
            cli.err.print(f"[yellow]note:[/] skipped {s}")
        cli.err.print(f"wrote {out} (not seen: the CUDA launch path, pinned copies, host-GPU syncs; "
                      f"use it with --env {out})")
