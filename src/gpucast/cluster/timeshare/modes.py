"""A GPU's sharing mode, to the model that solves the jobs on it.

``timeslice`` and ``mps`` (:data:`gpucast.cluster.timeshare.MODES`) are
:mod:`gpucast.cluster.timeshare`'s modes; ``"mps:N"`` is MPS as the NVIDIA device plugin's
``sharing.mps.replicas: N`` runs it, at most N clients each limited to ``1 / N`` of the SMs
(:mod:`gpucast.cluster.timeshare.mps`), where a job alone pays its limit too. The simulator's engine and
policies ask here for a GPU whose mode may be any of them (``None``: the run's mode,
:func:`gpucast.cluster.timeshare.set_mode`). The arithmetic is the two modules'; this one only
chooses between them.
"""

from __future__ import annotations

from typing import Sequence

from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import mps
from gpucast.cluster.timeshare import Constants, JobTimeline


def slowdowns(jobs: Sequence[JobTimeline], c: Constants | None = None, mode: str | None = None) -> list[float]:
    """:func:`gpucast.cluster.timeshare.slowdowns` in ``mode``, or under ``"mps:N"`` each job's
    step over its solo step without a limit (one job alone included). ``c``: as there (default:
    the constants gpucast predicts with)."""
    k = mps.replicas(mode)
    if k is None:
        return timeshare.slowdowns(jobs, c, mode)
    return mps.slowdowns(jobs, [1.0 / k] * len(jobs), c if c is not None else timeshare.predicting())


def slowdowns_many(sets: Sequence[Sequence[JobTimeline]], c: Constants | None = None,
                   mode: str | None = None) -> list[list[float]]:
    """:func:`slowdowns` of each set (:func:`gpucast.cluster.timeshare.slowdowns_many` where it is
    that module's mode: the same numbers)."""
    if mps.replicas(mode) is None:
        return timeshare.slowdowns_many(sets, c, mode)
    return [slowdowns(jobs, c, mode) for jobs in sets]


def shared_state(jobs: Sequence[JobTimeline], c: Constants | None = None,
                 mode: str | None = None) -> tuple[list[float], float]:
    """The slowdowns and what NVML reads of the GPU: :func:`gpucast.cluster.timeshare.shared_state`
    (two or more jobs), or under ``"mps:N"`` :func:`gpucast.cluster.timeshare.mps.shared_state` (one or more)."""
    k = mps.replicas(mode)
    if k is None:
        return timeshare.shared_state(jobs, c, mode)
    return mps.shared_state(jobs, [1.0 / k] * len(jobs), c if c is not None else timeshare.predicting())
