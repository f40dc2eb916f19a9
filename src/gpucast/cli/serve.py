"""The service command of the `gpucast` command line: ``serve``.

``gpucast serve [--host 127.0.0.1] [--port 8000] [--data-dir DIR] [--env env.yaml]`` runs the HTTP service
(:func:`gpucast.service.create_app`) with uvicorn until interrupted. ``--data-dir`` holds
uploaded ONNX files (default ``$GPUCAST_DATA_DIR`` or ``~/.cache/gpucast/service``); ``--env`` a calibrated
environment (``gpucast calibrate``) that every prediction uses. A thin
shell like :mod:`.app`, which calls ``register(app, common)``; a port outside
1-65535 or a data directory that cannot be created prints one ``error:`` line and exits 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer, cli) -> None:
    """Add ``serve`` to ``app``; ``cli`` is the module of ``app`` (``_run``, ``_fail``, consoles)."""

    @app.command("serve")
    def serve(host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
              port: int = typer.Option(8000, "--port", help="TCP port to listen on."),
              data_dir: Optional[Path] = typer.Option(None, "--data-dir",
                                                      help="Where uploaded ONNX files are kept (by content)."),
              log_level: str = typer.Option("info", "--log-level", help="uvicorn's log level."),
              env_file: Optional[Path] = typer.Option(None, "--env", help="An environment file from `gpucast "
                                                                          "calibrate`: every prediction uses it.")
              ) -> None:
        """Serve predictions over HTTP (POST /v1/predict, /v1/advise, /v1/place; docs at /docs)."""
        from gpucast.service import Settings, create_app

        if not 1 <= port <= 65535:
            cli._fail(f"--port must be between 1 and 65535, got {port}")
        env = cli._run(lambda: cli._environment(env_file))
        settings = Settings(environment=env) if data_dir is None else Settings(data_dir=data_dir, environment=env)
        try:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            cli._fail(f"cannot create --data-dir {str(settings.data_dir)!r}: {exc.strerror or exc}")
        import uvicorn

        cli.err.print(f"gpucast serving on http://{host}:{port} (docs: /docs, data: {settings.data_dir})",
                      highlight=False, soft_wrap=True)
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)
