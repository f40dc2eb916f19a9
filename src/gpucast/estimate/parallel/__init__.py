"""A job spread over many GPUs: a parallel plan's step, memory and utilization from one replica's trace.

:func:`estimate_plan` (:mod:`.compose`, where the model is described) answers for a job with a
``parallel`` group (:class:`gpucast.plan.Parallel`). Its parts, one job each: :mod:`.ranks` (a
stage's ops), :mod:`.stages` (a stage's rank), :mod:`.collectives` (communicators and their
collectives), :mod:`.sequence`, :mod:`.context`, :mod:`.experts`, :mod:`.overlaps`,
:mod:`.offload` (the parallelisms and overlaps), :mod:`.sharding`, :mod:`.activations`,
:mod:`.memory` (what a rank holds), :mod:`.framework` (the trainer's host time), :mod:`.flops`
(MFU), :mod:`.checks` (impossible plans).
"""

from gpucast.estimate.parallel.collectives import Placement, placement
from gpucast.estimate.parallel.compose import estimate_plan

__all__ = ["estimate_plan", "placement", "Placement"]
