"""``gpucast``: packing with gpucast's predictions, their intervals and the co-location model.

Told gpucast's predictions with intervals (the 80 % intervals of the run's error model, which
cover 80 % of the simulated truths as a calibration's split-conformal intervals do; see
:meth:`gpucast.cluster.truth.Truth.intervals`). A GPU is allowed when

* the upper ends of the memory intervals of its jobs and this one fit (the interval is the
  safety margin against out-of-memory failures),
* it holds fewer than ``max_jobs_per_gpu`` jobs, and,
* if it is not empty, sharing pays: the newcomer's normalized throughput (1/slowdown) minus what
  the GPU's jobs lose (sum of the drops of their 1/slowdown) is at least ``min_gain``, with the
  slowdowns from the co-location model (:mod:`gpucast.cluster.timeshare`) on the jobs' predicted
  timelines taken at the **upper end of each utilization interval** (``cautious``: a job that may
  be busier than predicted is assumed to be). ``weigh_gangs`` counts a resident k-GPU job's loss
  k times (it runs at its slowest GPU's pace); off by default: on the packaged mixes it blocked
  most sharing and lost more than it saved.

Among allowed GPUs the job goes where it costs least: the added slowdown (the GPU's jobs' increase
plus the newcomer's slowdown minus one) minus ``consolidate`` for a shared GPU (an empty GPU costs
0). With ``consolidate = 1`` a job shares a GPU whenever sharing pays and adds less than one
whole slowdown, even when empty GPUs are free: light jobs are packed together and whole GPUs stay
free for gang-scheduled multi-GPU jobs; with 0 it shares only when no empty GPU is free.

How it trades utilization against JCT: ``min_gain`` is the knob; at 0 (the default) any net
gain shares a GPU (more jobs running, each slower: utilization up, the shared jobs' run times
longer); higher values share only where the jobs hardly meet (JCT of running jobs protected,
less packing). 0 since the co-location model was fitted on current-GPU pairs of real scripts:
held out by family there, sharing every pair it predicts to gain is worth 100 % of the oracle's
gain against 99 % at a margin of 0.2 (``benchmarks/results/colocation_current.md``), and on
``philly-mix`` at a queue-keeping load (seeds 0 and 1) it raised utilization over the queued
period from +24 %/+34 % to +41 %/+49 % over ``slot`` with mean JCT -50 %/-55 % (0.2 was chosen
when the model, fitted on Gavel's pairs, said sharing rarely pays). The intervals make it
cautious where the prediction is uncertain. All values are our choices (parameters). FIFO, like
``packing``, so the two differ only in placement.
"""

from __future__ import annotations

from gpucast.cluster import timeshare
from gpucast.cluster.policies.base import Policy


class GpucastPolicy(Policy):
    name = "gpucast"
    told = "prediction"
    score_uses_index = False
    max_jobs_per_gpu = 4
    min_gain = 0.0
    cautious = True
    weigh_gangs = False
    consolidate = 1.0

    def _slowdowns(self, obs, gpu_type) -> list[float]:
        return timeshare.slowdowns([o.timeline(upper=self.cautious) for o in obs])

    def predicted_slowdowns(self, gpu, job):
        return self._slowdowns(gpu.jobs + (job,), gpu.gpu_type)

    _MEMO_MAX = 1 << 18

    def _remembered(self, obs: tuple, gpu_type):
        """:meth:`_slowdowns` of ``obs`` on ``gpu_type``, remembered by the observations' identity
        (placement asks for the same few sets of observations again and again; the stored tuple
        is checked object by object, so a recycled ``id`` is never mistaken for another)."""
        memo = self.__dict__.get("_sd_memo")
        if memo is None:
            memo = self._sd_memo = {}
        order = sorted(range(len(obs)), key=lambda i: id(obs[i]))   # one entry per set, any order
        canon = tuple(obs[i] for i in order)
        key = (gpu_type, tuple(map(id, canon)))
        hit = memo.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], canon)):
            sd = hit[1]
        else:
            if len(memo) >= self._MEMO_MAX:
                memo.clear()
            sd = self._slowdowns(canon, gpu_type)
            memo[key] = (canon, sd)
        out = [0.0] * len(obs)
        for k, i in enumerate(order):
            out[i] = sd[k]
        return out

    def score(self, gpu, job):
        if not gpu.jobs:
            return 0.0     # alone: nothing to protect (an over-large job fails in the engine)
        mem = sum(o.memory_upper for o in gpu.jobs) + job.memory_upper
        if mem > gpu.memory_bytes:
            return None
        before = self._remembered(gpu.jobs, gpu.gpu_type)
        after = self._remembered(gpu.jobs + (job,), gpu.gpu_type)
        w = [o.gpus if self.weigh_gangs else 1 for o in gpu.jobs]
        harm = sum(k * (1.0 / b - 1.0 / a) for k, b, a in zip(w, before, after[:-1]))
        if 1.0 / after[-1] - harm < self.min_gain:
            return None
        cost = sum(k * (a - b) for k, b, a in zip(w, before, after[:-1])) + after[-1] - 1.0
        return cost - self.consolidate
