"""The measured sets of ``../shared/data`` as gpucast jobs, each with the loader and loop its
script really had.

* GPUMemNet's MLP runs (``gpumemnet-mlp/runs.csv``, A100-40GB; its README says how every run was
  fed and timed): the exact ``nn.Sequential`` as a module job, a ``TensorDataset`` of 4,096
  samples read by ``DataLoader(batch_size=B, shuffle=True)`` (no workers, pageable copies),
  ``loss.item()`` twice and a tqdm bar with ``set_postfix`` per step, Adam, cross-entropy.
  Group: the ``architecture`` column. Versions were not recorded; the stack is taken to load
  CUDA modules eagerly because the smallest model's process shows 1,451 MiB, which a lazily
  loaded context (~0.5 GiB) cannot explain.
* Gavel's solo throughputs (``gavel/simulation_throughputs.json``, K80/P100/V100), mapped to zoo
  jobs by :data:`gpucast.cluster.gavel.MAPPING`, with each job type's real loader (below, from
  Gavel's ``workloads/pytorch`` scripts as the mapping's evidence describes them). Group: the job
  type.

The shared data is read from a path given by the caller (tests and scripts pass
``../shared/data``); nothing of it is packaged.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from gpucast.job import Job
from gpucast.cluster.gavel import GAVEL_SURROUNDINGS  # noqa: F401  (re-exported for tests)
from gpucast.surroundings import Data, Loop, Stack


@dataclass(frozen=True)
class MeasuredRow:
    job: Job
    gpu: str
    group: str                      # held-out unit: architecture / job type
    label: str
    util_pct: float | None = None
    memory_mib: float | None = None
    step_time_s: float | None = None


# ------------------------------------------------------------------------------ GPUMemNet MLP runs

MLP_DATA = Data(source="memory", num_workers=0, pin_memory=False, non_blocking=False, dataset_samples=4096)
MLP_LOOP = Loop(item_calls=2, progress_bar=True, log_every=0, cudnn_benchmark=False)
MLP_STACK = Stack(lazy_loading=False)


def _mlp_factories(input_size: int, widths: tuple[int, ...]):
    def model_fn():
        import torch.nn as nn

        layers, prev = [], input_size
        for i, w in enumerate(widths):
            layers.append(nn.Linear(prev, w))
            if i < len(widths) - 1:
                layers.append(nn.ReLU())
            prev = w
        return nn.Sequential(*layers)

    def input_fn(batch_size: int):
        import torch

        return (torch.randn(batch_size, input_size),)

    return model_fn, input_fn


def _ce_loss(output, inputs):
    import torch
    import torch.nn.functional as F

    return F.cross_entropy(output, torch.randint(0, output.shape[-1], output.shape[:1], device=output.device))


def mlp_rows(path: str | Path, limit: int | None = None) -> list[MeasuredRow]:
    """GPUMemNet's MLP runs as jobs (``path``: the runs.csv)."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            widths = tuple(int(w) for w in r["linear_widths"].split(";"))
            model_fn, input_fn = _mlp_factories(int(r["input_size"]), widths)
            job = Job.from_module(model_fn, input_fn, batch_size=int(r["batch_size"]), optimizer="adam",
                                  loss_fn=_ce_loss, name=f"gpumemnet-mlp:{r['input_size']}:{r['linear_widths']}",
                                  data=MLP_DATA, loop=MLP_LOOP, stack=MLP_STACK)
            rows.append(MeasuredRow(job=job, gpu=r["gpu"], group=r["architecture"], label=f"mlp run {r['run']}",
                                    util_pct=float(r["util_pct"]), memory_mib=float(r["memory_max_mib"])))
            if limit and len(rows) >= limit:
                break
    return rows


# ------------------------------------------------------------------------------ Gavel throughputs

def gavel_rows(path: str | Path) -> list[MeasuredRow]:
    """Gavel's solo, single-GPU throughputs as jobs (``path``: simulation_throughputs.json)."""
    from gpucast.cluster.gavel import MAPPING, job_fields, solo_throughputs, split_job_type

    rows = []
    for (job_type, scale, gpu), steps_per_s in solo_throughputs(path).items():
        name, batch = split_job_type(job_type)
        if scale != 1 or name not in MAPPING:
            continue
        job = Job(**job_fields(job_type))
        rows.append(MeasuredRow(job=job, gpu=gpu, group=name, label=f"{job_type} on {gpu}",
                                step_time_s=1.0 / steps_per_s))
    return rows
