"""The co-location worlds and the process's choice among them: the fitted constants (:data:`FITTED`, Gavel's
pairs; :data:`CURRENT`, our RTX 3090 and H200 pairs; :data:`MEASURED_PAIRS`, the default), Gavel's per-job
corrections, timelines anchored to a measured solo step (:func:`anchored`), and the world and sharing mode
in force (:func:`set_world`, :func:`set_mode`, :func:`predicting_with`). The model they parametrise is
:mod:`gpucast.cluster.timeshare.shared`'s."""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import fields

from gpucast.cluster.timeshare.model import Constants, JobTimeline


def _constants(d: dict, base: "Constants | None" = None) -> "Constants":
    """Constants from a fit file's ``constants`` mapping (unknown names ignored) over ``base``."""
    known = {f.name: f.type for f in fields(Constants)}
    vals = {k: (str(v) if k in ("stretch", "exclusive") else float(v)) for k, v in d.items() if k in known}
    return (base or Constants()).with_(**vals)


def _packaged_fit() -> dict:
    from importlib import resources

    path = resources.files("gpucast") / "data" / "gavel" / "timeshare_fit.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


_FIT = _packaged_fit()
# Source: benchmarks/colocation.py, fitted on every pair Gavel measured (K80/P100/V100), packaged in
# gpucast/data/gavel/timeshare_fit.json with its provenance; Constants()' starts where it is absent.
FITTED = _constants(_FIT.get("constants", {}))
# Per (gpu, Gavel job type) timeline corrections from the same fit (timeshare.fit.corrected).
GAVEL_CORRECTIONS = {(r["gpu"], r["job_type"]): (float(r["busy_logit"]), float(r["log_gaps"]))
                     for r in _FIT.get("corrections", [])}

def _packaged_current() -> dict:
    from importlib import resources

    path = resources.files("gpucast") / "data" / "timeshare_current.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


_CURRENT_FIT = _packaged_current()
# Source: benchmarks/colocation_current.py, fitted on measured pairs of real training scripts on a
# current GPU (an RTX 3090: Lucid's artifact, Hu et al. ASPLOS '23; the data is not packaged, only
# these constants and their provenance, gpucast/data/timeshare_current.json), the jobs' timelines
# gpucast's predictions of their solo runs (timeshare.pairs.predicted_timelines: nothing measured
# about the jobs enters; the file keeps the fit on anchored timelines beside it, "anchored_constants").
# FITTED's where absent.
# Exclusive time slices on data-center GPUs (Constants.exclusive: the evidence is there); the fit
# itself is on a GeForce card, where the cap is off.
CURRENT = _constants(_CURRENT_FIT.get("constants", {}),
                     FITTED.with_(stretch="held", relief=0.0)).with_(exclusive="data-center")
# CURRENT as fitted, on any GPU: time slices that let two jobs do more than one GPU of work
# together, as the RTX 3090 pairs did.
MEASURED_PAIRS = CURRENT.with_(exclusive="no")
# The co-location worlds a simulation can run in (``gpucast simulate --colocation``): the model
# fitted on current-GPU pairs of real scripts as fitted (the default; the best validated:
# benchmarks/results/colocation_current.md), the same with exclusive slices on data-center GPUs
# (CURRENT as gpucast predicts a data-center GPU: benchmarks/results/h200_colocation.md) and the one
# fitted on Gavel's K80/P100/V100 pairs (a sensitivity run).
WORLDS = {"measured-pairs": MEASURED_PAIRS, "data-center": CURRENT, "gavel": FITTED}
DEFAULT_WORLD = "measured-pairs"
# What gpucast's policies predict with in a world other than the default's model: in the
# data-center world, as gpucast predicts a data-center GPU (the cap); elsewhere the default's.
PREDICTED_IN = {"data-center": CURRENT}

def anchored(est, step_s: float, util_pct: float | None = None, c: Constants = FITTED) -> JobTimeline:
    """A job's timeline from its prediction ``est`` (a :class:`gpucast.cluster.truth.Estimate`)
    and its true solo step time: GPU busy time ``util_pct`` of the step when given, else the
    predicted busy seconds times ``(true step / predicted step) ** kernel_share`` (at most the
    step); the rest is host time, with the predicted gap count scaled by
    ``(true host time / predicted host time) ** gap_exponent``."""
    busy_p = est.busy_s if est.busy_s > 0 else est.util_pct / 100.0 * est.step_time_s
    if util_pct is not None:
        busy = min(step_s, util_pct / 100.0 * step_s)
    else:
        busy = min(step_s, busy_p * (step_s / est.step_time_s) ** c.kernel_share)
    host_p = max(est.step_time_s - busy_p, 1e-9)
    host = max(0.0, step_s - busy)
    if host <= 1e-12:
        return JobTimeline(step_s, step_s, 0.0, est.mem_bound)
    gaps = max(1.0, est.gaps) * (host / host_p) ** c.gap_exponent
    return JobTimeline(step_s, busy, max(1.0, gaps), est.mem_bound)


def corrected(tl: JobTimeline, corr: tuple[float, float] | None) -> JobTimeline:
    """``tl`` with a per-job correction ``(logit shift of the busy share, log factor on the
    gaps)`` learned from that job's measured pairs (:func:`fit_corrections`); None: as is."""
    if not corr:
        return tl
    u = min(max(tl.util, 1e-4), 1 - 1e-4)
    z = math.log(u / (1 - u)) + corr[0]
    u2 = 1.0 / (1.0 + math.exp(-z))
    return JobTimeline(tl.step_s, u2 * tl.step_s, max(1.0, tl.gaps) * math.exp(corr[1]), tl.mem_bound)


def mem_bound_share(prediction) -> float:
    """The memory-bound share of a prediction's kernel time: its bytes at the GPU's achievable
    bandwidth (the estimator's ``bandwidth_efficiency``) over its GPU busy time, at most 1."""
    from gpucast.estimate.constants import DEFAULT
    from gpucast.hardware import get_gpu

    if prediction.gpu_busy_s <= 0:
        return 0.0
    bw = get_gpu(prediction.gpu).memory_bandwidth_gbs * 1e9 * DEFAULT.bandwidth_efficiency
    return min(1.0, prediction.bytes / bw / prediction.gpu_busy_s)


# [the model gpucast's policies predict with, the world the simulator's truth runs in]
_ACTIVE = [WORLDS[DEFAULT_WORLD], WORLDS[DEFAULT_WORLD]]
_WORLD_NAME = [DEFAULT_WORLD]


def set_constants(c: Constants | None) -> None:
    """The constants :func:`slowdowns` uses when given none, for gpucast's policies and for the
    simulator's truth alike (None: the default world's, :data:`CURRENT`): the benchmarks'
    sensitivity runs (``benchmarks/sim_mixes.py --host-contention``) set them."""
    c = WORLDS[DEFAULT_WORLD] if c is None else c
    _ACTIVE[0] = _ACTIVE[1] = c
    _WORLD_NAME[0] = next((k for k, v in WORLDS.items() if v == c), "custom")


def set_world(name: str | None) -> Constants:
    """Make :data:`WORLDS`' ``name`` the constants the simulator's truth runs in (None: the
    default); gpucast's policies keep predicting with gpucast's model (:data:`PREDICTED_IN`'s where
    it names the world: the caller restores :func:`predicting`). Returns them."""
    name = name or DEFAULT_WORLD
    if name not in WORLDS:
        raise ValueError(f"unknown co-location world {name!r} ({', '.join(WORLDS)})")
    _ACTIVE[1] = WORLDS[name]
    if name in PREDICTED_IN:
        _ACTIVE[0] = PREDICTED_IN[name]
    _WORLD_NAME[0] = name
    return _ACTIVE[1]


# How the processes on one GPU share it: "timeslice" (CUDA's default, and the device plugin's
# time-slicing replicas: one context at a time) or "mps" (NVIDIA MPS: one server context, kernels
# of different processes run at once, no context switch). The mode the simulator's truth and the
# policies predict in (set_mode; gpucast.cluster.simulate(sharing=...)).
MODES = ("timeslice", "mps")
_MODE = ["timeslice"]


def set_mode(name: str | None) -> str:
    """Make ``name`` (:data:`MODES`; None: ``timeslice``) the sharing mode :func:`slowdowns` and
    the functions beside it use when given none. Returns it."""
    name = name or MODES[0]
    if name not in MODES:
        raise ValueError(f"unknown sharing mode {name!r} ({', '.join(MODES)})")
    _MODE[0] = name
    return name


def mode() -> str:
    """The sharing mode in force (:func:`set_mode`)."""
    return _MODE[0]


def world() -> Constants:
    """The constants the simulator's truth runs in (:func:`set_world`, :func:`set_constants`)."""
    return _ACTIVE[1]


def world_name() -> str:
    return _WORLD_NAME[0]


@contextlib.contextmanager
def predicting_with(c: Constants):
    """Within the block, gpucast's policies predict with ``c`` (:func:`predicting`); the service's
    placements outside any simulation predict with :data:`CURRENT`, the simulator's with its world's."""
    before = _ACTIVE[0]
    _ACTIVE[0] = c
    try:
        yield c
    finally:
        _ACTIVE[0] = before


def predicting() -> Constants:
    """The constants gpucast's policies predict with (:func:`set_constants`)."""
    return _ACTIVE[0]
