"""``slot-fifo``: one job per GPU, strict FIFO: Kubernetes' default (a GPU is an integer resource).

Told nothing about the job. The head of the queue starts when enough GPUs are free (gang:
one node if possible); nothing behind it overtakes it, so a blocked gang head leaves every free
GPU idle until it starts. Memory is not checked: a job that does not fit alone fails with
out-of-memory in the engine. (This was ``slot`` until ``slot`` became FIFO with EASY
backfilling, :mod:`gpucast.cluster.policies.slot`; the placement rule is the same.)
"""

from __future__ import annotations

from gpucast.cluster.policies.packing import PackingPolicy


class SlotFifoPolicy(PackingPolicy):
    name = "slot-fifo"
    told = "nothing"
    max_jobs_per_gpu = 1

    def _need(self, obs) -> float:
        return 0.0

    def score(self, gpu, job):
        return float(gpu.index) if not gpu.jobs else None
