"""Job traces read or generated without predicting anything: the :class:`Trace` and
:class:`TraceJob` types, Gavel's Philly-derived traces, a synthetic generator, and a CSV/Parquet
format for a cluster's own job log. (:func:`gpucast.cluster.traces.load_trace` resolves a trace's
name, workload mixes included, over this module and :mod:`gpucast.cluster.mixes`.)

A :class:`Trace` is a list of :class:`TraceJob` sorted by arrival. A job says *what* runs (a zoo
workload, batch size, precision, or a Gavel job type), how many GPUs it needs (gang-scheduled)
and how much work it is: ``steps`` (training iterations) or ``duration_s`` (its run time alone
on the cluster's reference GPU type, converted to steps by the simulator with the job's true
step time there). Nothing here knows GPUs or policies.

Gavel's traces (``gpucast/data/gavel/traces/*.trace``)
-----------------------------------------------------
Tab-separated, no header, seven columns, as Gavel's own ``parse_trace`` reads them
(``scheduler/utils.py`` of the OSDI 2020 artifact)::

    job_type  command  num_steps_arg  needs_data_dir  total_steps  arrival_time  scale_factor

* ``job_type``: e.g. ``ResNet-50 (batch size 64)``, ``A3C``; mapped to a zoo workload through
  :data:`gpucast.cluster.gavel.MAPPING`.
* ``command``: the training command (``%s`` placeholders for Gavel's run directory); unused.
* ``num_steps_arg``: the flag that passes the step count (``-step``, ``--num_steps`` ...); unused.
* ``needs_data_dir``: 1 if the command takes a data directory (0 only for A3C); unused.
* ``total_steps``: training iterations the job runs (the job's work).
* ``arrival_time``: seconds from the trace's start.
* ``scale_factor``: GPUs of the (data-parallel) job; Gavel skips rows with 0, so do we.

The traces are Gavel's sampling of job types and sizes shaped after Microsoft's Philly trace
(durations, GPU counts, arrival rates); the job types are Gavel's, not Philly's. The trace named
``"gavel"`` is :data:`DEFAULT_GAVEL_TRACE`; any other packaged one is chosen by id
(``"gavel:2869ce"`` or just ``"2869ce"``, see :func:`gpucast.cluster.gavel.trace_ids`).

User traces (CSV or Parquet)
----------------------------
One row per job, columns (header names exactly; others are ignored):

==============  ========  ==========================================================
column          required  meaning
==============  ========  ==========================================================
``job_id``      yes       unique string
``arrival_s``   yes       submission time in seconds (>= 0), any order
``workload``    yes       a zoo name (``gpucast zoo``) or a Gavel job type
``batch_size``  yes       positive integer, per GPU
``precision``   no        ``fp32`` (default), ``tf32``, ``amp-fp16``, ``amp-bf16``
``gpus``        yes       positive integer, GPUs of the job (gang-scheduled)
``duration_s``  one of    run time alone on the reference GPU type, > 0
``steps``       one of    training iterations, > 0 (used when both are given)
==============  ========  ==========================================================

A bad file raises :class:`TraceError` with one line naming the row (1-based, header excluded)
and the column.
"""


from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from gpucast.cluster import gavel

DEFAULT_GAVEL_TRACE = "ee9e8c"  # 2,000 jobs, 1,025 of them multi-GPU (up to 32): the largest
                                # and most multi-GPU of Gavel's packaged traces
PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "fp8")


class TraceError(ValueError):
    """A trace that cannot be read; the message is one line naming the row and column."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    arrival_s: float
    workload: str            # zoo name
    batch_size: int
    gpus: int
    precision: str = "fp32"
    steps: float | None = None
    duration_s: float | None = None
    job_type: str | None = None   # Gavel job type when the job is one (keys measured data)
    fields: tuple = ()            # gpucast Job fields as sorted items (hashable)
    latency_s: float | None = None  # an inference service: its latency target per batch (its duration_s
                                    # is then its lifetime); None: a job that runs to completion

    @property
    def profile_key(self) -> tuple:
        """Jobs with equal keys behave identically (one prediction per key and GPU type)."""
        return (self.workload, self.batch_size, self.precision, self.job_type, self.fields)


@dataclass
class Trace:
    name: str
    jobs: list[TraceJob]
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.jobs)


def _zoo_fields(workload: str, batch_size: int, precision: str) -> tuple:
    return tuple(sorted({"model": workload, "batch_size": batch_size, "precision": precision}.items()))


def _gavel_job(job_id: str, arrival_s: float, job_type: str, gpus: int, *, steps=None,
               duration_s=None, precision="fp32") -> TraceJob:
    f = dict(gavel.job_fields(job_type))
    f.setdefault("precision", precision)
    return TraceJob(job_id, float(arrival_s), f["model"], int(f["batch_size"]), int(gpus), f["precision"],
                    steps, duration_s, job_type,
                    tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in f.items())))


def _is_gavel_type(name: str) -> bool:
    return gavel.split_job_type(name)[0] in gavel.MAPPING


# ----------------------------------------------------------------------------- Gavel traces

def parse_gavel(path: str | Path, *, name: str | None = None) -> Trace:
    """Read one Gavel ``.trace`` file (format in the module docstring)."""
    path = Path(path)
    jobs = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 7:
                raise TraceError(f"{path}: line {lineno}: expected 7 tab-separated columns, got {len(cols)}")
            job_type, _cmd, _flag, _needs_data, total_steps, arrival, scale = cols
            try:
                steps, arrival_s, gpus = int(total_steps), float(arrival), int(scale)
            except ValueError:
                raise TraceError(f"{path}: line {lineno}: total_steps, arrival_time and scale_factor "
                                 f"must be numbers, got {total_steps!r}, {arrival!r}, {scale!r}") from None
            if gpus == 0:
                continue
            try:
                jobs.append(_gavel_job(f"{path.stem}-{lineno}", arrival_s, job_type, gpus, steps=float(steps)))
            except KeyError as e:
                raise TraceError(f"{path}: line {lineno}: {e.args[0]}") from None
    jobs.sort(key=lambda j: j.arrival_s)
    return Trace(name or f"gavel:{path.stem}", jobs, source=str(path))


# ----------------------------------------------------------------------------- user traces

def _bad(path, row, col, msg):
    return TraceError(f"{path}: row {row}, column {col!r}: {msg}")


def parse_table(path: str | Path) -> Trace:
    """Read a user trace from CSV (``.csv``) or Parquet (``.parquet``/``.pq``); see module docs."""
    import csv

    path = Path(path)
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            columns = list(table.column_names)
            records = table.to_pylist()
        else:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                columns = list(reader.fieldnames or [])
                records = list(reader)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except Exception as e:  # noqa: BLE001 - any reader failure is one line
        raise TraceError(f"{path}: cannot read: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    cols = set(columns)
    for c in ("job_id", "arrival_s", "workload", "batch_size", "gpus"):
        if c not in cols:
            raise TraceError(f"{path}: missing required column {c!r} (have: {', '.join(map(str, columns))})")
    if "duration_s" not in cols and "steps" not in cols:
        raise TraceError(f"{path}: needs a 'duration_s' or a 'steps' column")
    from gpucast import zoo

    zoo_names = set(zoo.names())
    seen = set()
    jobs = []
    for i, r in enumerate(records, 1):
        def num(col, kind, positive=True, allow_zero=False, optional=False):
            v = r.get(col)
            if v is None or (isinstance(v, str) and v.strip() == "") or (isinstance(v, float) and math.isnan(v)):
                if optional:
                    return None
                raise _bad(path, i, col, "missing value")
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise _bad(path, i, col, f"expected a number, got {v!r}") from None
            if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
                raise _bad(path, i, col, f"expected a {'non-negative' if allow_zero else 'positive'} number, got {v!r}")
            if kind is int:
                if x != int(x):
                    raise _bad(path, i, col, f"expected an integer, got {v!r}")
                return int(x)
            return x

        job_id = str(r["job_id"]).strip()
        if not job_id:
            raise _bad(path, i, "job_id", "missing value")
        if job_id in seen:
            raise _bad(path, i, "job_id", f"duplicate job_id {job_id!r}")
        seen.add(job_id)
        arrival = num("arrival_s", float, allow_zero=True)
        batch = num("batch_size", int)
        gpus = num("gpus", int)
        steps = num("steps", float, optional=True) if "steps" in cols else None
        duration = num("duration_s", float, optional=True) if "duration_s" in cols else None
        if steps is None and duration is None:
            raise _bad(path, i, "duration_s", "one of duration_s or steps is needed")
        precision = str(r.get("precision") or "fp32").strip() or "fp32"
        if precision not in PRECISIONS:
            raise _bad(path, i, "precision", f"expected one of {', '.join(PRECISIONS)}, got {precision!r}")
        workload = str(r["workload"]).strip()
        if workload in zoo_names:
            jobs.append(TraceJob(job_id, arrival, workload, batch, gpus, precision, steps, duration, None,
                                 _zoo_fields(workload, batch, precision)))
        elif _is_gavel_type(workload):
            jobs.append(_gavel_job(job_id, arrival, workload, gpus, steps=steps, duration_s=duration,
                                   precision=precision))
        else:
            raise _bad(path, i, "workload", f"unknown workload {workload!r} (a zoo name or a Gavel job type)")
    jobs.sort(key=lambda j: j.arrival_s)
    return Trace(path.stem, jobs, source=str(path))


# ----------------------------------------------------------------------------- synthetic

# The default job mix: Gavel's single-GPU job types (they carry measured solo throughputs).
def gavel_job_types() -> list[str]:
    return sorted({jt for (jt, sf, _gpu) in gavel.solo_throughputs() if sf == 1})


DEFAULT_GPUS_DIST = {1: 0.70, 2: 0.10, 4: 0.10, 8: 0.10}
# Philly (Jeon et al., ATC 2019) reports most jobs single-GPU; these shares are our round choice,
# not numbers from the paper.
DEFAULT_DURATION_MEDIAN_S = 1800.0   # our choice: half an hour median solo run time
DEFAULT_DURATION_SIGMA = 1.5         # our choice: log-normal spread (p99 ~ 33x the median)


def synthetic(n_jobs: int, *, seed: int = 0, mean_interarrival_s: float = 60.0,
              arrivals: list[float] | None = None, mix: dict | None = None,
              gpus_dist: dict[int, float] | None = None,
              duration_median_s: float = DEFAULT_DURATION_MEDIAN_S,
              duration_sigma: float = DEFAULT_DURATION_SIGMA,
              max_duration_s: float | None = 30 * 86400.0, name: str | None = None) -> Trace:
    """A seeded synthetic trace.

    Arrivals are a Poisson process with ``mean_interarrival_s`` unless ``arrivals`` (a list of
    times) is given. ``mix`` maps a Gavel job type (``"ResNet-50 (batch size 64)"``) or a zoo
    job ``(workload, batch_size, precision)`` to a weight; the default is every Gavel
    single-GPU job type with equal weight. GPUs per job follow ``gpus_dist``; solo durations are
    log-normal (median, sigma), capped at ``max_duration_s``.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    if arrivals is not None:
        times = np.sort(np.asarray(arrivals, dtype=float))
        n_jobs = len(times)
    else:
        times = np.cumsum(rng.exponential(mean_interarrival_s, n_jobs)) if n_jobs else np.zeros(0)
        if n_jobs:
            times -= times[0]
    mix = mix or {jt: 1.0 for jt in gavel_job_types()}
    items = list(mix)
    w = np.asarray([mix[k] for k in items], dtype=float)
    pick = rng.choice(len(items), size=n_jobs, p=w / w.sum())
    gd = gpus_dist or DEFAULT_GPUS_DIST
    gk = list(gd)
    gw = np.asarray([gd[k] for k in gk], dtype=float)
    gpus = np.asarray(gk)[rng.choice(len(gk), size=n_jobs, p=gw / gw.sum())]
    dur = duration_median_s * np.exp(duration_sigma * rng.standard_normal(n_jobs))
    if max_duration_s:
        dur = np.minimum(dur, max_duration_s)
    protos = []
    for it in items:
        if isinstance(it, str):
            protos.append(("gavel", it))
        else:
            wl, b, p = (tuple(it) + ("fp32",))[:3]
            protos.append(("zoo", (wl, int(b), p)))
    jobs = []
    for i in range(n_jobs):
        kind, v = protos[pick[i]]
        jid = f"syn-{i}"
        if kind == "gavel":
            jobs.append(_gavel_job(jid, float(times[i]), v, int(gpus[i]), duration_s=float(dur[i])))
        else:
            wl, b, p = v
            jobs.append(TraceJob(jid, float(times[i]), wl, b, int(gpus[i]), p, None, float(dur[i]), None,
                                 _zoo_fields(wl, b, p)))
    return Trace(name or f"synthetic-{n_jobs}-seed{seed}", jobs, source="synthetic",
                 notes=[f"seed={seed}, mean_interarrival_s={mean_interarrival_s}, "
                        f"duration median={duration_median_s}s sigma={duration_sigma}"])


# ----------------------------------------------------------------------------- load

def solo_duration_s(tj: TraceJob) -> float:
    """A job's solo run time: its ``duration_s``, else its steps times Gavel's measured solo step
    time of its job type on a V100 (at its GPU count where measured); 0 when neither is known."""
    if tj.duration_s is not None:
        return tj.duration_s
    solo = gavel.solo_throughputs()
    tput = solo.get((tj.job_type, tj.gpus, "v100-16gb")) or solo.get((tj.job_type, 1, "v100-16gb"))
    return (tj.steps or 0.0) / tput if tput else 0.0


def offered_load(trace: Trace, n_gpus: int) -> float:
    """GPU-seconds of work the trace offers per second of its arrival span, per GPU of the
    cluster (1.0: exactly the cluster's capacity, run one job per GPU; above 1 a queue grows)."""
    jobs = trace.jobs
    if len(jobs) < 2:
        return 0.0
    span = jobs[-1].arrival_s - jobs[0].arrival_s
    work = sum(solo_duration_s(j) * j.gpus for j in jobs)
    return work / span / n_gpus if span > 0 else math.inf


def at_load(trace: Trace, n_gpus: int, load: float) -> Trace:
    """The trace with its arrival times stretched or compressed (about the first arrival) so that
    its :func:`offered_load` on ``n_gpus`` is ``load``; what runs and how long is unchanged."""
    from dataclasses import replace

    if not load > 0:
        raise TraceError(f"load must be > 0, got {load}")
    now = offered_load(trace, n_gpus)
    if not now or math.isinf(now):
        return trace
    f = now / load
    t0 = trace.jobs[0].arrival_s
    jobs = [replace(j, arrival_s=t0 + (j.arrival_s - t0) * f) for j in trace.jobs]
    return Trace(trace.name, jobs, trace.source, list(trace.notes) + [
        f"arrivals scaled by {f:.4g}: offered load {load:g} of {n_gpus} GPUs (the trace's own: {now:.3g})"])


# ----------------------------------------------------------------------------- names

def load_named(name: str) -> Trace:
    """A trace that is not a workload mix, by name or path: ``"gavel"`` (:data:`DEFAULT_GAVEL_TRACE`),
    ``"gavel:<id>"`` or ``"<id>"`` (a packaged Gavel trace), ``"synthetic:N"`` (optionally
    ``"synthetic:N:SEED"``), or a file (``.trace``: Gavel's format; else CSV/Parquet)."""
    s = str(name)
    ids = gavel.trace_ids()
    if s == "gavel":
        s = f"gavel:{DEFAULT_GAVEL_TRACE}"
    if s.startswith("gavel:") or s in ids:
        tid = s.split(":", 1)[1] if s.startswith("gavel:") else s
        if tid not in ids:
            raise TraceError(f"unknown Gavel trace {tid!r} (have: {', '.join(ids)})")
        return parse_gavel(gavel.data_dir() / "traces" / f"{tid}.trace", name=f"gavel:{tid}")
    if s.startswith("synthetic:"):
        parts = s.split(":")
        try:
            n = int(parts[1])
            seed = int(parts[2]) if len(parts) > 2 else 0
        except (ValueError, IndexError):
            raise TraceError(f"bad synthetic trace name {s!r} (synthetic:N or synthetic:N:SEED)") from None
        return synthetic(n, seed=seed)
    p = Path(s)
    if not p.exists():
        raise TraceError(f"no trace named {s!r}: not 'gavel', a Gavel id ({', '.join(ids)}), "
                         f"'philly-mix', 'pai-mix', 'llm-mix', 'synthetic:N' or an existing file")
    return parse_gavel(p) if p.suffix == ".trace" else parse_table(p)
