"""A trace by name: Gavel's packaged traces, a synthetic one, a file, or a workload mix.

:func:`load_trace` is the simulator's one way in; the formats and the types are in
:mod:`gpucast.cluster.trace_formats` (Gavel's ``.trace`` files, a cluster's CSV/Parquet job log,
the synthetic generator: read without predicting anything), the mixes in
:mod:`gpucast.cluster.mixes` (drawn over one of those traces with predictions). Every name of
``trace_formats`` is importable from here too.
"""

from __future__ import annotations

from dataclasses import replace

from gpucast.cluster import mixes
from gpucast.cluster.trace_formats import (DEFAULT_DURATION_MEDIAN_S, DEFAULT_DURATION_SIGMA,  # noqa: F401
                                           DEFAULT_GAVEL_TRACE, DEFAULT_GPUS_DIST, PRECISIONS, Trace,
                                           TraceError, TraceJob, at_load, gavel_job_types, load_named,
                                           offered_load, parse_gavel, parse_table, solo_duration_s, synthetic)

__all__ = ["load_trace", "Trace", "TraceJob", "TraceError", "DEFAULT_GAVEL_TRACE", "PRECISIONS", "parse_gavel",
           "parse_table", "synthetic", "gavel_job_types", "solo_duration_s", "offered_load", "at_load",
           "load_named"]


def load_trace(name_or_path, *, gpus: int | None = None, limit: int | None = None, progress=None,
               load: float | None = None) -> Trace:
    """A trace by name or path.

    ``"gavel"`` is :data:`DEFAULT_GAVEL_TRACE`; ``"gavel:<id>"`` or ``"<id>"`` a packaged Gavel
    trace; ``"philly-mix"``, ``"pai-mix"``, ``"llm-mix"`` or a ``.yaml`` file a workload mix
    (:mod:`gpucast.cluster.mixes`; ``progress(i, n)`` follows its candidates' predictions); a path
    ending in ``.trace`` a Gavel file; ``.csv``/``.parquet`` a user trace;
    ``"synthetic:N"`` (optionally ``"synthetic:N:SEED"``) a synthetic trace. A :class:`Trace`
    is returned as is. ``limit`` keeps the first N jobs by arrival. ``gpus`` (the cluster size)
    caps each job's GPU count so that every job can run; capped jobs are counted in ``notes``. A
    planned gang (a job with a parallel plan, :mod:`gpucast.cluster.gangs`) is never capped: its
    plan is made for its GPU count, so one larger than the cluster is a :class:`TraceError`.
    ``load`` (with ``gpus``) rescales the arrivals to that offered load (:func:`at_load`).
    """
    if isinstance(name_or_path, Trace):
        trace = name_or_path
    else:
        s = str(name_or_path)
        trace = mixes.build(s, progress=progress) if mixes.is_mix(s) else load_named(s)
    jobs = trace.jobs
    notes = list(trace.notes)
    if limit is not None:
        jobs = jobs[:limit]
    if gpus is not None:
        from gpucast.cluster.gangs import node_gpus

        big = next((j for j in jobs if j.gpus > gpus and node_gpus(j.fields, j.gpus)), None)
        if big is not None:
            raise TraceError(f"job {big.job_id}: its parallel plan needs {big.gpus} GPUs, more than the "
                             f"cluster's {gpus}")
        capped = sum(j.gpus > gpus for j in jobs)
        if capped:
            jobs = [replace(j, gpus=gpus) if j.gpus > gpus else j for j in jobs]
            notes.append(f"{capped} jobs asked for more than {gpus} GPUs and were capped to {gpus}")
    out = Trace(trace.name, jobs, trace.source, notes)
    if load is not None:
        if gpus is None:
            raise TraceError("a load needs the cluster's GPU count")
        out = at_load(out, gpus, load)
    return out
