"""Shared helpers: a hand-set truth (synthetic fixture: no predictor, no Gavel data) and traces."""

from __future__ import annotations

import pytest

from gpucast.cluster.traces import Trace, TraceJob
from gpucast.cluster.truth import Behaviour, Observation

GB = 1e9


class HandTruth:
    """Synthetic truth for engine tests: per workload (util %, true memory, step s, told memory)."""

    def __init__(self, table):
        self.table = table

    def behaviour(self, prof, gpu, gpus=1):
        u, mem, step, _told = self.table[prof.workload]
        return Behaviour(u, mem, step, "test", "test", "test")

    def observe(self, prof, gpu, told, gpus=1):
        u, mem, step, told_mem = self.table[prof.workload]
        if told == "nothing":
            return Observation(prof.workload, prof.batch_size, gpus, gpu, told)
        m = mem if told in ("truth", "profiled") else told_mem
        return Observation(prof.workload, prof.batch_size, gpus, gpu, told, u, (u, u), m, (m, m), step)


def job(jid, arrival, workload="w", steps=100.0, gpus=1):
    return TraceJob(jid, float(arrival), workload, 1, gpus, "fp32", float(steps), None, None,
                    (("model", workload),))


def trace(*jobs):
    return Trace("test", sorted(jobs, key=lambda j: j.arrival_s))


