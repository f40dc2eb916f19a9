"""The scheduler commands of the `gpucast` command line: ``slurm``.

* ``gpucast slurm JOBSPEC [--gpu a100-80gb] [--shards-per-gpu 8] [--mps] [--mps-per-gpu 100]
  [--json]``: predict the job of a job spec file (.json/.yaml) and print the ``--gres`` option
  that requests its share (:func:`gpucast.integrations.slurm.gres_request`), alone on stdout so
  that ``sbatch $(gpucast slurm job.yaml) train.sh`` works; for a job whose parallel plan spans
  nodes, the whole-node options instead (``--nodes=2 --ntasks-per-node=8 --gpus-per-node=8
  --exclusive``). ``--json`` prints the request, the share it spells and the
  ``job_desc.tres_per_node`` value the job_submit plugin sets (per node), with ``nodes``,
  ``whole_nodes`` and ``sbatch_options``.
* ``--service URL [--service-timeout 5] [--no-fallback]``: ask a running ``gpucast serve`` for the
  prediction (:func:`gpucast.integrations.remote.predict_remote`) instead of capturing the model
  here; the output is the same. This path never imports torch, so a cached answer takes about
  as long as starting Python: what slurmctld's synchronous job_submit plugin needs. The service
  refusing the job (4xx) is an ``error:`` line, exit 2. The service unreachable, silent for
  ``--service-timeout`` seconds, busy (408/429) or failing (5xx): one ``warning:`` line on
  stderr and the local prediction, or with ``--no-fallback`` an ``error:`` line, exit 2.
  ``module:`` jobs never go to the service.

A thin shell: :mod:`.app` calls ``register(app, common)``. A
missing or bad file, an unknown GPU, a service URL that is not http(s): one ``error:`` line,
exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape


def register(app: typer.Typer, cli) -> None:
    """Add ``slurm`` to ``app``; ``cli`` is the module of ``app`` (``_run``, ``_fail``, consoles)."""

    @app.command("slurm")
    def slurm(jobspec: Path = typer.Argument(..., help="A job spec file (.json/.yaml), as `gpucast predict --job`."),
              gpu: str = typer.Option("a100-80gb", "--gpu", "-g", help="GPU type of the nodes (see `gpucast gpus`)."),
              shards_per_gpu: int = typer.Option(8, "--shards-per-gpu", min=1,
                                                 help="Shards the site configures per GPU (gres.conf)."),
              mps: bool = typer.Option(False, "--mps", help="Request MPS (--gres=mps:N) instead of shards."),
              mps_per_gpu: int = typer.Option(100, "--mps-per-gpu", min=1,
                                              help="MPS count the site configures per GPU."),
              as_json: bool = typer.Option(False, "--json", help="Print the request, the share and the "
                                                                  "prediction as JSON."),
              service: Optional[str] = typer.Option(None, "--service", metavar="URL",
                                                    help="Ask this `gpucast serve` (http://HOST:PORT) for the "
                                                         "prediction instead of capturing the model here."),
              service_timeout: Optional[float] = typer.Option(None, "--service-timeout", metavar="SECONDS",
                                                              help="Seconds to wait for the service (default 5)."),
              no_fallback: bool = typer.Option(False, "--no-fallback",
                                               help="With --service: when the service cannot answer, fail "
                                                    "(exit 2) instead of predicting locally.")) -> None:
        """Print the Slurm --gres request for a job's predicted share of a GPU."""
        from gpucast.integrations.slurm import gres_request
        from gpucast.job import Job

        url, timeout = None, None
        if service is None:
            if service_timeout is not None or no_fallback:
                cli._fail("--service-timeout and --no-fallback apply to --service")
        else:
            from gpucast.integrations.remote import DEFAULT_TIMEOUT_S, check_url

            try:
                url = check_url(service)
            except ValueError as exc:
                cli._fail(f"--service: {exc}")
            timeout = DEFAULT_TIMEOUT_S if service_timeout is None else service_timeout
            if not timeout > 0 or timeout != timeout or timeout == float("inf"):
                cli._fail(f"--service-timeout must be a positive number of seconds, got {service_timeout:g}")

        def build():
            job = Job.load(jobspec)
            prediction = remote(job) if url is not None else None
            if prediction is None:
                from gpucast.api import predict

                prediction = predict(job, gpu)
            return prediction, gres_request(prediction, shards_per_gpu=shards_per_gpu, mps=mps,
                                            mps_per_gpu=mps_per_gpu)

        def remote(job):
            """The service's prediction; None (after one warning line) to predict locally."""
            from gpucast.integrations.remote import ServiceUnavailable, predict_remote

            try:
                return predict_remote(job, gpu, url, timeout)
            except ServiceUnavailable as exc:
                if no_fallback:
                    raise ValueError(f"{exc} (--no-fallback)") from None
                # One line on stderr, before any output: the job_submit plugin reads stdout and
                # stderr together and looks for "error:" and the JSON's "tres_per_node" only.
                msg = " ".join(str(exc).replace("error:", "error -").split())
                cli.err.print(f"[yellow]warning:[/] {escape(msg)}; predicting locally", highlight=False,
                              soft_wrap=True)
                return None

        prediction, req = cli._run(build)
        if as_json:
            out = req.to_dict()
            out["job"] = prediction.job
            out["prediction"] = {k: prediction.to_dict()[k] for k in (
                "gpu_util_pct", "gpu_util_interval", "memory_peak_bytes", "memory_interval", "step_time_s",
                "step_time_interval", "fits_in_memory")}
            print(json.dumps(out, indent=2, sort_keys=True))
        else:
            print(req.sbatch)
