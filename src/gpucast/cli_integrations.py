"""The scheduler commands of the `gpucast` command line: ``slurm``.

* ``gpucast slurm JOBSPEC [--gpu a100-80gb] [--shards-per-gpu 8] [--mps] [--mps-per-gpu 100]
  [--json]``: predict the job of a job spec file (.json/.yaml) and print the ``--gres`` option
  that requests its share (:func:`gpucast.integrations.slurm.gres_request`), alone on stdout so
  that ``sbatch $(gpucast slurm job.yaml) train.sh`` works. ``--json`` prints the request, the
  share it spells and the ``job_desc.tres_per_node`` value the job_submit plugin sets.

A thin shell like ``cli.py``: ``cli.py`` calls ``register(app, cli_module)`` at its end. A
missing or bad file, an unknown GPU: one ``error:`` line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


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
                                                                  "prediction as JSON.")) -> None:
        """Print the Slurm --gres request for a job's predicted share of a GPU."""
        from gpucast.integrations.slurm import gres_request
        from gpucast.job import Job

        def build():
            job = Job.load(jobspec)
            from gpucast.api import predict

            prediction = predict(job, gpu)
            return prediction, gres_request(prediction, shards_per_gpu=shards_per_gpu, mps=mps,
                                            mps_per_gpu=mps_per_gpu)

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
