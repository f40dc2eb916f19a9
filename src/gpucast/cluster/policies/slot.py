"""``slot``: one job per GPU, FIFO with EASY backfilling: Slurm's default scheduler
(``sched/backfill``) with GPUs as an integer resource (``--gres=gpu:k``).

Told nothing about the job's utilization or memory. Jobs start in FIFO order while they fit
(gang: one node if possible, the ``slot-fifo`` placement); when the queue head does not fit, it
gets a reservation at the earliest time enough GPUs free up, and a later job of the first
``lookahead`` = 500 (Slurm's ``bf_max_job_test`` default) may start now on free GPUs only if it
does not delay that reservation, judged by the jobs' time limits
(:mod:`gpucast.cluster.policies.backfill`).

The time limit of a job is its requested duration: the trace's ``duration_s`` (the job's solo
run time on the cluster's reference GPU type), or, for a trace that gives steps, those steps at
the job's true solo step time there (the same quantity). That is a user who states the exact
run time: an optimistic assumption (real limits are over-estimates, which leave backfilling
fewer gaps), and a job on a slower GPU type than the reference can run past it (it is then
expected to end at any moment; the engine does not kill it). Memory is not checked: a job that
does not fit alone fails with out-of-memory in the engine. Not modelled from Slurm:
``bf_window`` (no reservation further ahead than a day), ``bf_interval`` (backfilling runs at
every event here, not every 30 s), priorities other than arrival order.
"""

from __future__ import annotations

from gpucast.cluster.policies.backfill import EasyBackfill
from gpucast.cluster.policies.slot_fifo import SlotFifoPolicy


class SlotPolicy(EasyBackfill, SlotFifoPolicy):
    name = "slot"
    lookahead = 500
