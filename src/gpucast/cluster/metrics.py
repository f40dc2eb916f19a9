"""What a simulated run delivered, as numbers: :func:`summarize` one :class:`SimResult`,
:func:`compare` several against a baseline policy (relative change in %).

Definitions (every time in seconds of simulated time; a job is *finished* when its
``finish_s`` is set, *started* when its ``start_s`` is):

* ``gpu_util_busy_pct``: cluster GPU utilization while the cluster is loaded, as the reference
  work defines it: the time-weighted mean of ``util_timeline`` over the **busy period** only,
  the times at which at least one job is queued or running, from the first arrival to
  ``end_s``. Stretches with no job queued or running (and everything before the first arrival)
  are left out, so an idle gap between bursts of jobs does not dilute it; a policy that keeps a
  queue waiting behind idle GPUs is still charged for them. The busy period is the result's
  ``busy_intervals`` (recorded by the engine: a job counts from its arrival until it finishes
  or is abandoned), clipped to ``[first arrival, end_s]``; a result without them (a hand-made
  one) uses the union over jobs of ``[arrival_s, finish_s]`` (``end_s`` for an unfinished
  job). ``None`` when the busy period is empty.
* ``gpu_util_queued_pct``: the same mean over the **queued period** only, the times at which at
  least one job waits for its first start (the union over jobs of ``[arrival_s, start_s]``;
  ``end_s`` for a job never started; a wait after an out-of-memory requeue is not counted): the
  cluster while it has more work than it runs, which is when packing can gain anything. A
  trace whose last hundreds of hours are a few very long jobs running alone (Gavel's ends so)
  dilutes the busy-period figure with a tail that no policy can fill; this one leaves it out.
  ``None`` when no job ever waited.
* ``gpu_util_pct``: time-weighted cluster GPU utilization. ``util_timeline`` is a step function,
  ``(t_i, u_i)`` meaning "from ``t_i`` on, the cluster's GPUs are ``u_i`` % utilized"; the value
  is its integral over ``[0, end_s]`` divided by ``end_s``. Before the first point the cluster
  counts as idle (0 %); points past ``end_s`` are ignored.
  This is the busy share of **all** GPUs over the run (time 0 to the last finish).
* ``gpu_util_allocated_pct``: the busy share of the **allocated** GPUs (those holding at least
  one job): the same integral over the integral of ``alloc_timeline``; ``gpus_allocated_pct``
  is the time-weighted share of GPUs holding a job.
* ``makespan_s``: ``end_s`` minus the first arrival.
* JCT (job completion time): ``finish_s - arrival_s`` over finished jobs: mean, p50, p95, p99.
* queueing delay: ``start_s - arrival_s`` over started jobs (the first start: a job that was
  requeued after an OOM failure keeps its first ``start_s``): mean, p95. Jobs that never
  started are not in it (their wait is censored by the end of the run); ``jobs_never_started``
  counts them.
* slowdown: ``JCT / solo_duration_s`` over finished jobs with a positive solo duration
  (1.0: as fast as alone on the GPU type with no wait): mean, p95.
* ``oom_failures``, ``restarts``: sums over jobs. ``gpu_hours``: the sum of ``gpu_seconds`` / 3600:
  GPU time held by jobs, busy or not, work lost to OOM failures included. A GPU shared by ``k``
  jobs counts ``k`` times (each job holds it), so this is what the jobs were charged, not the
  cluster's capacity used; it can exceed ``n_gpus * makespan``.

Percentiles are linear interpolation between order statistics (numpy's default ``linear``
method: the p-th percentile of ``n`` sorted values sits at position ``p/100 * (n-1)``).
An empty set gives ``None``, never 0.

The module reads only the attributes of ``SimResult``/``JobRecord`` (see
``gpucast.cluster.result``); it runs nothing.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import numpy as np

# The metrics `compare` reports changes of: (summary key, short label). Utilization is better
# when higher, the times when lower.
COMPARED = (
    ("gpu_util_busy_pct", "util busy"),
    ("gpu_util_queued_pct", "util queued"),
    ("gpu_util_pct", "util"),
    ("makespan_s", "makespan"),
    ("jct_mean_s", "JCT mean"),
    ("jct_p99_s", "JCT p99"),
    ("queue_delay_mean_s", "queue delay"),
)


def _pct(values: np.ndarray, q: float) -> Optional[float]:
    return float(np.percentile(values, q)) if values.size else None


def _mean(values: np.ndarray) -> Optional[float]:
    return float(values.mean()) if values.size else None


def util_integral(timeline: Sequence[tuple[float, float]], end_s: float) -> float:
    """The integral of the utilization step function over ``[0, end_s]``, in %·s."""
    if end_s <= 0 or not timeline:
        return 0.0
    t = np.asarray([p[0] for p in timeline], dtype=float)
    u = np.asarray([p[1] for p in timeline], dtype=float)
    order = np.argsort(t, kind="stable")
    t, u = t[order], u[order]
    lo = np.clip(t, 0.0, end_s)
    hi = np.clip(np.append(t[1:], end_s), 0.0, end_s)
    return float(np.sum(u * np.maximum(hi - lo, 0.0)))


def time_weighted_util(timeline: Sequence[tuple[float, float]], end_s: float) -> Optional[float]:
    """Mean cluster GPU utilization % over ``[0, end_s]``; ``None`` when ``end_s <= 0``."""
    if end_s <= 0:
        return None
    return util_integral(timeline, end_s) / end_s


def allocated_util(result) -> Optional[float]:
    """Busy share of the *allocated* GPUs: the utilization integral over the integral of the
    share of GPUs holding a job (``None`` without an allocation timeline or allocation)."""
    if not result.alloc_timeline or result.end_s <= 0:
        return None
    held = util_integral(result.alloc_timeline, result.end_s)
    return 100.0 * util_integral(result.util_timeline, result.end_s) / held if held > 0 else None


def _cumulative(timeline: Sequence[tuple[float, float]], end_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Knots and the running integral of the step function at them over ``[0, end_s]`` (idle
    before the first point): the integral is piecewise linear, so ``np.interp`` on these is exact.
    (``np.interp`` needs increasing x; repeated knots, events at one instant, are fine for it
    because their y values agree: a zero width adds nothing.)"""
    t = np.asarray([p[0] for p in timeline], dtype=float)
    u = np.asarray([p[1] for p in timeline], dtype=float)
    order = np.argsort(t, kind="stable")
    t, u = np.clip(t[order], 0.0, end_s), u[order]
    knots = np.concatenate(([0.0], t, [end_s]))
    widths = np.diff(knots)
    rates = np.concatenate(([0.0], u))  # idle before the first point
    return knots, np.concatenate(([0.0], np.cumsum(rates * widths)))


def busy_periods(result) -> list[tuple[float, float]]:
    """The busy period of ``result`` (see ``gpu_util_busy_pct``) as sorted, disjoint, non-empty
    ``(start, end)`` intervals within ``[first arrival, end_s]``."""
    records = list(result.records)
    end_s = float(result.end_s)
    lo = min((r.arrival_s for r in records), default=0.0)
    raw = list(getattr(result, "busy_intervals", None) or ())
    if not raw:
        raw = [(r.arrival_s, r.finish_s if r.finish_s is not None else end_s) for r in records]
    return _merge(raw, lo, end_s)


def _merge(raw, lo: float, hi: float) -> list[tuple[float, float]]:
    """``raw`` intervals clipped to ``[lo, hi]``, empty ones dropped, overlapping ones joined."""
    out: list[list[float]] = []
    for a, b in sorted((max(float(a), lo), min(float(b), hi)) for a, b in raw):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def queued_periods(result) -> list[tuple[float, float]]:
    """The queued period of ``result`` (see ``gpu_util_queued_pct``) as sorted, disjoint,
    non-empty intervals."""
    end_s = float(result.end_s)
    raw = [(r.arrival_s, r.start_s if r.start_s is not None else end_s) for r in result.records]
    return _merge(raw, 0.0, end_s)


def queued_util(result) -> Optional[float]:
    """Mean cluster GPU utilization % over the queued period (``gpu_util_queued_pct``)."""
    return _util_over(result, queued_periods(result))


def busy_util(result) -> Optional[float]:
    """Mean cluster GPU utilization % over the busy period (``gpu_util_busy_pct``); ``None``
    when it is empty."""
    return _util_over(result, busy_periods(result))


def _util_over(result, periods) -> Optional[float]:
    length = sum(b - a for a, b in periods)
    if length <= 0:
        return None
    if not result.util_timeline:
        return 0.0
    knots, cum = _cumulative(result.util_timeline, float(result.end_s))
    a = np.asarray([p[0] for p in periods])
    b = np.asarray([p[1] for p in periods])
    return float(np.sum(np.interp(b, knots, cum) - np.interp(a, knots, cum))) / length


def binned_util(timeline: Sequence[tuple[float, float]], end_s: float, bins: int) -> tuple[list[float], list[float]]:
    """The step function averaged over ``bins`` equal time bins of ``[0, end_s]``: (bin start
    times, mean utilization % in each bin). Exact (the running integral of a step function is
    piecewise linear, so interpolating it at the bin edges loses nothing), and the bins' mean is
    the whole run's :func:`time_weighted_util`. Used to keep plots of long runs small."""
    if end_s <= 0 or not timeline or bins < 1:
        return [], []
    knots, cum = _cumulative(timeline, end_s)
    edges = np.linspace(0.0, end_s, bins + 1)
    area = np.interp(edges, knots, cum)
    means = np.diff(area) / np.diff(edges)
    return edges[:-1].tolist(), means.tolist()


def job_arrays(records: Iterable) -> dict[str, np.ndarray]:
    """Per-job JCT, queueing delay and slowdown arrays (finished / started jobs only; inference
    services, which end with their lifetime, not when their work is done, are not among them:
    :func:`services`)."""
    jct, wait, slow = [], [], []
    for r in records:
        if r.latency_target_s is not None:
            continue
        if r.start_s is not None:
            wait.append(r.start_s - r.arrival_s)
        if r.finish_s is not None:
            j = r.finish_s - r.arrival_s
            jct.append(j)
            if r.solo_duration_s and r.solo_duration_s > 0:
                slow.append(j / r.solo_duration_s)
    return dict(jct=np.asarray(jct, dtype=float), queue_delay=np.asarray(wait, dtype=float),
                slowdown=np.asarray(slow, dtype=float))


def summarize(result) -> dict:
    """One flat dict of the metrics above for ``result`` (a ``SimResult``); JSON-ready."""
    records = list(result.records)
    a = job_arrays(records)
    jct, wait, slow = a["jct"], a["queue_delay"], a["slowdown"]
    first_arrival = min((r.arrival_s for r in records), default=0.0)
    finished = sum(1 for r in records if r.finish_s is not None)
    started = sum(1 for r in records if r.start_s is not None)
    return dict(
        policy=result.policy,
        n_gpus=int(result.n_gpus),
        jobs=len(records),
        jobs_finished=finished,
        jobs_unfinished=len(records) - finished,
        jobs_never_started=len(records) - started,
        gpu_util_busy_pct=busy_util(result),
        gpu_util_queued_pct=queued_util(result),
        gpu_util_pct=time_weighted_util(result.util_timeline, result.end_s),
        gpu_util_allocated_pct=allocated_util(result),
        gpus_allocated_pct=time_weighted_util(result.alloc_timeline, result.end_s) if result.alloc_timeline else None,
        makespan_s=float(result.end_s - first_arrival) if records else float(result.end_s),
        end_s=float(result.end_s),
        jct_mean_s=_mean(jct),
        jct_p50_s=_pct(jct, 50),
        jct_p95_s=_pct(jct, 95),
        jct_p99_s=_pct(jct, 99),
        queue_delay_mean_s=_mean(wait),
        queue_delay_p95_s=_pct(wait, 95),
        slowdown_mean=_mean(slow),
        slowdown_p95=_pct(slow, 95),
        oom_failures=int(sum(r.oom_failures for r in records)),
        restarts=int(sum(r.restarts for r in records)),
        gpu_hours=float(sum(r.gpu_seconds for r in records)) / 3600.0,
        **services(records),
    )


def services(records: Sequence) -> dict:
    """Inference services' metrics (none when the run has no service): how many; the share of
    their serving time in which their batches met their latency target (``service_slo_met_pct``:
    100 x (1 - late seconds / served seconds), served seconds counted on their one GPU, time lost
    to an out-of-memory failure included); their mean wait before they first served. A service
    still waiting when the run ends has served nothing and counts only in the wait."""
    svc = [r for r in records if r.latency_target_s is not None]
    if not svc:
        return {}
    served = math.fsum(r.gpu_seconds for r in svc)
    late = math.fsum(r.late_s or 0.0 for r in svc)
    waits = [r.start_s - r.arrival_s for r in svc if r.start_s is not None]
    return {"services": len(svc),
            "service_slo_met_pct": 100.0 * (1.0 - late / served) if served > 0 else None,
            "service_wait_mean_s": float(np.mean(waits)) if waits else None}


def change_pct(value: Optional[float], base: Optional[float]) -> Optional[float]:
    """The relative change of ``value`` from ``base``: ``(value - base) / base * 100``, signed as
    it reads: utilization 40 -> 60 is +50 %, a makespan 100 -> 80 h is -20 %. ``None`` when either
    is missing or ``base`` is 0."""
    if value is None or base is None or base == 0 or math.isnan(base) or math.isnan(value):
        return None
    return (value - base) / base * 100.0


def compare(summaries: Sequence[dict], baseline: str = "slot") -> list[dict]:
    """Each summary's change from the ``baseline`` policy's on :data:`COMPARED`: a list (same
    order) of ``{"policy": ..., "vs": baseline, "<key>": change_pct, ...}``. A missing baseline
    gives an empty list."""
    base = next((s for s in summaries if s["policy"] == baseline), None)
    if base is None:
        return []
    out = []
    for s in summaries:
        row = {"policy": s["policy"], "vs": baseline}
        for key, _ in COMPARED:
            row[key] = change_pct(s.get(key), base.get(key))
        out.append(row)
    return out


def change_line(changes: dict) -> str:
    """``util busy +5.0%, util +61.5%, makespan -23.7%, ... vs slot`` (one :func:`compare` row)."""
    parts = [f"{label} {changes[key]:+.1f}%" for key, label in COMPARED if changes.get(key) is not None]
    return f"{', '.join(parts)} vs {changes['vs']}" if parts else f"no comparison with {changes['vs']}"
