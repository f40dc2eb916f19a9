"""The packaged environment's fit over the shared measured sets, and its judge: leave one whole
set out.

The sets (``data/measured/<set>`` in the repository, each read by :mod:`gpucast.learn.shared_sets` or
:mod:`gpucast.learn.lucid` into jobs with the loaders, loops and stacks their scripts had):

* ``mlp``: GPUMemNet's 2,978 MLP runs on an A100-40GB (utilization, memory; PyTorch 2.x);
* ``gavel``: Gavel's solo throughputs on K80/P100/V100 (step time; PyTorch 1.4);
* ``lucid``: Lucid's 35 solo runs of real training scripts on an RTX 3090 (utilization, memory,
  step time; PyTorch 1.11).

Two stages, each :meth:`gpucast.learn.fit.Fitter.fit` (log-space least squares with the
constants' published priors):

1. ``mlp`` moves :data:`STAGE1_PARAMS` (in-memory loaders, copies, the loop's habits, idle
   kernels, the eager CUDA context, NVML's tick);
2. ``gavel`` and ``lucid`` together, from stage 1's constants, move :data:`STAGE2_PARAMS`: the
   loaders the MLP set has no rows for, the PyTorch-1.x stack factors
   (:mod:`gpucast.estimate.stack`), which only sets measured on 1.x stacks say anything about,
   NVML's tick again (Lucid's utilization) and the eager CUDA 11 context and cuDNN images (Lucid's
   nvidia-smi memory, :data:`CUDA11_MEMORY_PARAMS`) -- jointly on their step times and utilization,
   with :data:`STAGE2_PER_SET` fitted once per set: each set ran on one cluster's hosts, so its
   host speed is a nuisance of its own (prior: ``host_time_factor``'s), and only what the two
   1.x sets share goes into the release's factors. The packaged environment keeps the host
   factor at its prior (a cluster never measured); the sets' hosts are recorded in the stage's
   ``per_set``. Release and host are told apart only as far as the priors and two sets allow:
   Gavel's cloud hosts come out ~1.8x slower than the reference core, Lucid's ~1.1x.

:func:`fit_sets` with ``without=NAME`` runs the same procedure on the other sets only (a stage
with no rows keeps its priors): what a cluster gpucast has never seen gets. Fits nothing on import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from gpucast.estimate.environment import Environment
from gpucast.learn.fit import GAVEL_PARAMS, MLP_PARAMS, Fitter

SETS = ("mlp", "gavel", "lucid")
# The sets' folder names under data/measured (what an environment fit's stages record).
SET_DATA = {"mlp": "gpumemnet-mlp", "gavel": "gavel", "lucid": "lucid-rtx3090"}
STACK_PARAMS = ("torch1_host_factor", "torch1_kernel_factor")
# The eager CUDA 11 context and cuDNN's kernel images (gpucast.estimate.memory): only Lucid's rows
# measure memory on a CUDA 11 stack (the MLP set's is CUDA 12; Gavel has no memory).
CUDA11_MEMORY_PARAMS = ("cuda_context_eager_extra_cu11_bytes", "cudnn_context_eager_bytes")
# NVML's tick is a property of the counter: every set with measured utilization moves it.
STAGE1_PARAMS = MLP_PARAMS + ("nvml_tick_s",)
STAGE2_PARAMS = GAVEL_PARAMS + STACK_PARAMS + ("nvml_tick_s",) + CUDA11_MEMORY_PARAMS
STAGE2_SETS = ("gavel", "lucid")
STAGE2_PER_SET = ("host_time_factor",)

# A run is GPU-bound when its measured utilization is at least this (the step-time target of
# issue 18 is judged on them: elsewhere the loader or the host sets the step).
GPU_BOUND_UTIL_PCT = 80.0


def rows_of(name: str, shared: str | Path, mlp_limit: int | None = None):
    """The measured rows of one shared set (``shared``: the folder of the sets, ``data/measured``
    in the repository)."""
    shared = Path(shared)
    if name == "mlp":
        from gpucast.learn.shared_sets import mlp_rows

        return mlp_rows(shared / "gpumemnet-mlp" / "runs.csv", mlp_limit)
    if name == "gavel":
        from gpucast.learn.shared_sets import gavel_rows

        return gavel_rows(shared / "gavel" / "simulation_throughputs.json")
    if name == "lucid":
        from gpucast.learn import lucid

        return lucid.single_rows(shared / "lucid-rtx3090")
    raise ValueError(f"unknown shared set {name!r} (known: {', '.join(SETS)})")


def fit_sets(fitters: dict[str, Fitter], without: str | None = None,
             say: Callable[[str], None] | None = None,
             without_group: tuple[str, str] | None = None,
             first_stage: tuple[Environment, dict] | None = None) -> tuple[Environment, dict]:
    """The environment fitted on every set in ``fitters`` but ``without``, and each stage's info.
    ``without_group`` = (set, group) also leaves that group's rows out (a Lucid family, say);
    ``first_stage`` reuses an MLP stage already fitted on the same rows (its environment and info:
    the stage does not depend on the 1.x sets)."""
    if without is not None and without not in SETS:
        raise ValueError(f"unknown shared set {without!r} (known: {', '.join(SETS)})")
    use = {k: f for k, f in fitters.items() if k != without}
    for k, f in use.items():
        f.sets[:] = k
    env = Environment.priors()
    stages = []
    if "mlp" in use and first_stage is not None:
        env, info = first_stage
        stages.append(info)
    elif "mlp" in use:
        if say:
            say("fitting the MLP set's constants")
        env, info = use["mlp"].fit(_rows(use["mlp"], "mlp", without_group), STAGE1_PARAMS, priors=env)
        stages.append({"data": ["gpumemnet-mlp"], "params": list(STAGE1_PARAMS), **info})
    second = [use[k] for k in STAGE2_SETS if k in use]
    if second:
        if say:
            say(f"fitting loaders and the 1.x stack on {', '.join(k for k in STAGE2_SETS if k in use)}")
        joint = Fitter.concat(second) if len(second) > 1 else second[0]
        keep = ~((joint.sets == without_group[0]) & (joint.groups == without_group[1])) if without_group \
            else np.ones(len(joint.rows), bool)
        env, info = joint.fit(np.flatnonzero(keep), STAGE2_PARAMS, priors=env, per_set=STAGE2_PER_SET)
        stages.append({"data": [SET_DATA[k] for k in STAGE2_SETS if k in use], "params": list(STAGE2_PARAMS), **info})
    values = {}
    for s in stages:
        values.update(s["values"])
    return env, {"stages": stages, "values": values, "without": without}


def _rows(f: Fitter, name: str, without_group: tuple[str, str] | None) -> np.ndarray:
    keep = np.ones(len(f.rows), bool)
    if without_group and without_group[0] == name:
        keep &= f.groups != without_group[1]
    return np.flatnonzero(keep)
