"""The `gpucast` command line: a thin shell over the Python API (Typer + rich), one module per command group
(:mod:`.app` registers them; :mod:`.common` is what they share)."""

from gpucast.cli.app import app, main
from gpucast.cli.catalog import DEMO_GPUS, DEMO_JOBS

__all__ = ["DEMO_GPUS", "DEMO_JOBS", "app", "main"]
