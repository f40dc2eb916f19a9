"""The measured sets (``data/measured/<set>`` in the repository) as measured-row records (plain
mappings of the columns of :mod:`gpucast.learn.rows`): gpucast jobs, each with the loader and loop
its script really had.

* GPUMemNet's MLP runs (``gpumemnet-mlp/runs.csv``, A100-40GB; its README says how every run was
  fed and timed): the exact ``nn.Sequential`` as a module job, a ``TensorDataset`` of 4,096
  samples read by ``DataLoader(batch_size=B, shuffle=True)`` (no workers, pageable copies),
  ``loss.item()`` twice and a tqdm bar with ``set_postfix`` per step, Adam, cross-entropy.
  Group: the ``architecture`` column. Versions were not recorded; the stack is taken to load
  CUDA modules eagerly because the smallest model's process shows 1,451 MiB, which a lazily
  loaded context (~0.5 GiB) cannot explain.
* Gavel's solo throughputs (``gavel/simulation_throughputs.json``, K80/P100/V100), mapped to zoo
  jobs by :data:`gpucast.gavel.MAPPING`, with each job type's real loader (below, from
  Gavel's ``workloads/pytorch`` scripts as the mapping's evidence describes them). Group: the job
  type.

The records go through :func:`gpucast.learn.rows.from_records`, the validation every measured-row
file gets (:mod:`gpucast.learn.shared_sets` and the row readers call it; this module, below both,
only converts). The measured data is read from a path given by the caller (tests and scripts pass
``data/measured`` in the repository); nothing of it is packaged.
"""

from __future__ import annotations

import csv
from pathlib import Path

from gpucast.surroundings import Data, Loop, Stack

__all__ = ["MLP_DATA", "MLP_LOOP", "MLP_STACK", "mlp_records", "mlp_records_of", "gavel_records"]

# ------------------------------------------------------------------------------ GPUMemNet MLP runs

MLP_DATA = Data(source="memory", num_workers=0, pin_memory=False, non_blocking=False, dataset_samples=4096)
MLP_LOOP = Loop(item_calls=2, progress_bar=True, log_every=0, cudnn_benchmark=False)
MLP_STACK = Stack(lazy_loading=False)


def _flat(group: str, spec) -> dict:
    return {f"{group}.{k}": v for k, v in spec.to_dict().items()}


def mlp_records_of(runs: list[dict], limit: int | None = None) -> list[dict]:
    """runs.csv's rows (parsed) as measured-row records: ``mlp:`` models with the runs' loader."""
    surroundings = {**_flat("data", MLP_DATA), **_flat("loop", MLP_LOOP), **_flat("stack", MLP_STACK)}
    out = []
    for r in runs[:limit] if limit else runs:
        out.append({"model": f"mlp:{r['input_size']}:{r['linear_widths']}", "batch_size": int(r["batch_size"]),
                    "optimizer": "adam", **surroundings, "gpu": r["gpu"], "group": r["architecture"],
                    "label": f"mlp run {r['run']}", "util_pct": float(r["util_pct"]),
                    "memory_mib": float(r["memory_max_mib"])})
    return out


def mlp_records(path: str | Path, limit: int | None = None) -> list[dict]:
    with open(path, newline="") as f:
        return mlp_records_of(list(csv.DictReader(f)), limit)


# ------------------------------------------------------------------------------ Gavel throughputs

def gavel_records(path: str | Path) -> list[dict]:
    """Gavel's solo, single-GPU throughputs as measured-row records (job spec JSON, step time)."""
    from gpucast.gavel import MAPPING, job_fields, solo_throughputs, split_job_type
    from gpucast.job import Job

    out = []
    for (job_type, scale, gpu), steps_per_s in solo_throughputs(path).items():
        name, batch = split_job_type(job_type)
        if scale != 1 or name not in MAPPING:
            continue
        out.append({"job": Job(**job_fields(job_type)).to_json(), "gpu": gpu, "group": name,
                    "label": f"{job_type} on {gpu}", "step_time_s": 1.0 / steps_per_s})
    return out
