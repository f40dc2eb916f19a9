"""Each job's true behaviour in the simulator, and what a policy is told about it.

The truth of a job (its solo utilization, peak memory and step time on a GPU type) is the
simulator's ground truth; policies never read it except ``oracle``, and ``profiling`` after it
paid for a profiling run. Where the truth comes from, in order:

1. **Measured** (provenance: a real run). Solo rows with status ``ok`` in ``data/measurements``
   (gpucast's own harness; the directory is empty today) give utilization, memory (torch's peak
   reserved) and step time for that job on that GPU. Gavel's ``simulation_throughputs.json``
   gives solo step times of Gavel job types on K80, P100 and V100 (catalog ``k80``, ``p100``,
   ``v100-16gb``), for one GPU and for data-parallel scale factors 2-8 where measured.
2. **Simulated truth** otherwise: gpucast's analytic prediction times a multiplicative
   log-normal error, ``truth = predicted * exp(sigma * z)``, ``z ~ N(0, 1)``, drawn once per
   (job profile, GPU type, quantity) from ``seed``, with one ``sigma`` per quantity
   (:mod:`gpucast.cluster.errors`: gpucast's measured error by default). For utilization the
   error moves the logit (``logit(truth) = logit(predicted) + sigma * z``), so it stays a share
   between 0 and 100 %. This is not a measurement: it says "suppose gpucast is as wrong as it was measured
   to be". With ``error_sigma=0`` the truth equals the prediction. A MIG slice
   (:mod:`gpucast.mig`) draws its whole GPU's error: the measured error is the model's on a job
   and a GPU, not on a partition of it, so a job's truth on a slice is its truth on the whole GPU
   scaled as the slice model predicts (the slice model's own error is not measured and not drawn).

A single-GPU Gavel job type with a measured step time takes its utilization and idle gaps from
the co-location fit to Gavel's measured pairs (:data:`gpucast.cluster.timeshare.GAVEL_CORRECTIONS`,
source ``inferred:gavel-pairs``): inferred from measurements, not measured, and not drawn with
the error model. A Gavel job type that Gavel measured running alone on a GPU type did fit there, so its simulated
true memory is clipped to :data:`MEASURED_FIT_FRACTION` of that GPU's memory (gpucast
over-predicts some of them). A multi-GPU job with no measured multi-GPU throughput runs each step
in its solo step time (weak scaling, per-GPU batch fixed; communication is not modelled), except a
planned gang (a job whose fields carry a ``parallel`` group and its ``gpus``,
:mod:`gpucast.cluster.gangs`): its prediction is its plan's, so its step is one optimizer step of
the whole job with the plan's communication, its memory the busiest GPU's and its utilization the
mean over its GPUs, each times the error model as above.

What a policy is told is an :class:`Observation` per GPU type: nothing (``told="nothing"``), the
prediction with its intervals (``"prediction"``), the measured truth after profiling
(``"profiled"``) or the truth (``"truth"``). The value types (``Profile``, ``Estimate``,
``Behaviour``, ``Observation``) are :mod:`gpucast.cluster.behaviour`'s, importable from here.

Predictions are computed once per distinct (job fields, GPU type) in the process
(:func:`predict_cached`), so a 100,000-job trace over 30 job types costs 30 predictions per GPU
type, and kept **on disk between runs** so that a repeated ``gpucast simulate`` skips them (about
a second each): in :mod:`gpucast.disk_cache`, the cache ``gpucast predict`` keeps (one format,
one directory, one size bound; its module docstring says what the key covers and where it lives;
``GPUCAST_CACHE_DIR=off`` or ``GPUCAST_NO_CACHE=1`` turns it off). A job simulated on a GPU type
with the default environment has the key ``gpucast predict JOB --gpu TYPE`` has, so either
answers the other. Nothing else is cached on disk (truth, the error model and observations are
recomputed every run).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Callable

from gpucast.cluster import gavel
from gpucast.cluster.behaviour import Behaviour, Estimate, Observation, Profile

__all__ = ["Truth", "Profile", "Estimate", "Behaviour", "Observation", "predict_cached", "set_environment",
           "prediction_cache_dir", "MEASURED_FIT_FRACTION"]

MEASURED_FIT_FRACTION = 0.95  # our choice: a job measured running alone uses at most 95 % of the GPU
DEFAULT_MEASUREMENTS_DIR = Path(__file__).resolve().parents[3] / "data" / "measurements"


# ----------------------------------------------------------------------------- predictions

_PRED_CACHE: dict[tuple, Estimate] = {}


# The environment every simulated prediction uses (``gpucast simulate --env``; None: the default)
# and the model version it makes, which keys the caches.
_ENVIRONMENT = None
_VERSION = None


def set_environment(env) -> None:
    """Make the simulator's predictions use ``env`` (an Environment, or None for the default)."""
    from gpucast.api import model_version

    global _ENVIRONMENT, _VERSION
    _ENVIRONMENT, _VERSION = env, model_version(env)


def _model_version() -> str:
    if _VERSION is None:
        set_environment(_ENVIRONMENT)
    return _VERSION


def predict_cached(profile: Profile, gpu: str) -> Estimate:
    """``gpucast.predict`` once per (job fields, GPU type, environment) in this process, and across
    processes through gpucast's disk cache of predictions (see the module docstring)."""
    key = (profile.fields or (profile.workload, profile.batch_size, profile.precision), gpu, _model_version())
    est = _PRED_CACHE.get(key)
    if est is None:
        est = _PRED_CACHE[key] = _estimate(_prediction(profile.job(), gpu))
    return est


def _prediction(job, gpu: str):
    """``job``'s prediction on ``gpu`` in the simulator's environment: read from
    :mod:`gpucast.disk_cache` where it holds one (the key ``gpucast predict`` uses for the same
    job, GPU and environment), else computed and stored there."""
    from gpucast.api import predict
    from gpucast import disk_cache
    from gpucast.hardware import get_gpu

    env = _ENVIRONMENT
    (p,) = disk_cache.predictions(job, [get_gpu(gpu)], lambda spec: predict(job, gpu, env=env), env)
    return p


def _estimate(p) -> Estimate:
    """What the simulator keeps of a prediction."""
    from gpucast.cluster.timeshare import mem_bound_share

    return Estimate(p.gpu_util_pct, tuple(p.gpu_util_interval), float(p.memory_peak_bytes),
                    tuple(float(x) for x in p.memory_interval), p.step_time_s,
                    tuple(p.step_time_interval), float(p.gpu_busy_s), float(p.gpu_idle_gaps),
                    mem_bound_share(p), float(p.gpu_held_pct), float(p.gpu_syncs))


def prediction_cache_dir() -> Path | None:
    """The directory of the disk cache of predictions (:func:`gpucast.disk_cache.directory`), or
    ``None`` when it is turned off."""
    from gpucast import disk_cache

    return disk_cache.directory()


def _load_measured(root: Path | None) -> dict[tuple[str, str], dict]:
    """Solo ``ok`` rows of gpucast's measurement dataset, by (job_key, catalog GPU)."""
    if root is None or not Path(root).is_dir() or not any(Path(root).glob("*.parquet")):
        return {}
    from gpucast.profile.dataset import Dataset

    out = {}
    for r in Dataset(root).rows():
        if r.get("kind") == "solo" and r.get("status") == "ok" and r.get("gpu_name") and r.get("job_key"):
            out[(r["job_key"], r["gpu_name"])] = r
    return out


def _logit_scaled(util_pct: float, factor: float) -> float:
    """A utilization whose odds are ``factor`` times ``util_pct``'s (its logit moved by
    ``log(factor)``): bounded by 0 and 100 as a share must be."""
    if factor == 1.0:
        return util_pct
    u = min(max(util_pct / 100.0, 1e-6), 1 - 1e-6)
    odds = u / (1 - u) * factor
    return 100.0 * odds / (1.0 + odds)


def _unit_normal(*parts) -> float:
    """A standard normal draw fixed by ``parts`` (order of calls does not matter)."""
    import numpy as np

    h = hashlib.sha256(repr(parts).encode()).digest()
    return float(np.random.default_rng(int.from_bytes(h[:8], "little")).standard_normal())


def _error_key(gpu: str) -> str:
    """The GPU name an error is drawn for: a MIG slice's whole GPU, any other GPU itself."""
    return gpu.split(":", 1)[0]


class Truth:
    """True behaviour and observations of job profiles, with caching and a seeded error model."""

    def __init__(self, *, error_sigma="measured", seed: int = 0,
                 predictor: Callable[[Profile, str], Estimate] | None = None,
                 use_gavel: bool = True, measurements_dir: Path | None = DEFAULT_MEASUREMENTS_DIR):
        from gpucast.cluster.errors import ErrorModel, parse

        if isinstance(error_sigma, (int, float)) and not isinstance(error_sigma, bool) and error_sigma < 0:
            raise ValueError("error_sigma must be >= 0")
        self.errors: ErrorModel = parse(error_sigma)
        self.error_sigma = self.errors
        self.seed = seed
        self.predictor = predictor or predict_cached
        self._gavel_solo = gavel.solo_throughputs() if use_gavel else {}
        self._measured = _load_measured(measurements_dir)
        self._beh: dict[tuple, Behaviour] = {}
        self._est: dict[tuple, Estimate] = {}

    def estimate(self, profile: Profile, gpu: str) -> Estimate:
        k = (profile, gpu)
        e = self._est.get(k)
        if e is None:
            e = self._est[k] = self.predictor(profile, gpu)
        return e

    def _factor(self, profile: Profile, gpu: str, what: str) -> float:
        sigma = self.errors.sigma(what)
        if sigma == 0:
            return 1.0
        # a MIG slice draws its whole GPU's error (module docstring)
        return math.exp(sigma * _unit_normal(self.seed, profile.fields, profile.job_type, _error_key(gpu), what))

    def behaviour(self, profile: Profile, gpu: str, gpus: int = 1) -> Behaviour:
        k = (profile, gpu, gpus)
        b = self._beh.get(k)
        if b is not None:
            return b
        from gpucast.hardware import get_gpu

        est = self.estimate(profile, gpu)
        measured = None
        if self._measured:
            try:
                measured = self._measured.get((profile.job().key, gpu))
            except Exception:  # noqa: BLE001 - a profile that is not a valid Job has no measurement
                measured = None
        if measured is not None:
            util, util_src = float(measured["util_mean_pct"]), "measured:gpucast"
            mem = float(measured.get("torch_max_reserved_bytes") or measured.get("proc_mem_max_bytes"))
            mem_src = "measured:gpucast"
            step, step_src = float(measured["step_time_mean_s"]), "measured:gpucast"
        else:
            util = _logit_scaled(est.util_pct, self._factor(profile, gpu, "util"))
            util_src = "simulated"
            mem, mem_src = est.memory_bytes * self._factor(profile, gpu, "memory"), "simulated"
            step, step_src = est.step_time_s * self._factor(profile, gpu, "step"), "simulated"
        if profile.job_type is not None and self._gavel_solo:
            t = self._gavel_solo.get((profile.job_type, gpus, gpu)) or self._gavel_solo.get((profile.job_type, 1, gpu))
            if t:
                step, step_src = 1.0 / t, "measured:gavel"
                cap = MEASURED_FIT_FRACTION * get_gpu(gpu).memory_bytes
                if mem > cap and mem_src == "simulated":
                    mem = cap
        from gpucast.cluster.timeshare import GAVEL_CORRECTIONS, anchored, corrected

        corr = GAVEL_CORRECTIONS.get((gpu, profile.job_type)) if profile.job_type and gpus == 1 else None
        # The predicted held share over the predicted NVML reading: a truth drawn or measured as
        # NVML's number keeps it (estimate.nvml: the reading adds the idle gaps its tick misses).
        ratio = est.held / est.util_pct if est.util_pct > 0 else 1.0
        if corr is not None and step_src == "measured:gavel" and util_src == "simulated":
            # Gavel measured this job type's step and its slowdowns next to others: its timeline is
            # the one the co-location fit inferred from them (benchmarks/colocation.py).
            tl = corrected(anchored(est, step), corr)
            held = 100.0 * tl.util
            util, util_src = min(100.0, held / ratio) if ratio > 0 else held, "inferred:gavel-pairs"
        else:
            held = util * ratio
            tl = anchored(est, step, held)
        b = self._beh[k] = Behaviour(util, mem, step, util_src, mem_src, step_src, tl.gaps, est.mem_bound,
                                     held, est.syncs)
        return b

    def intervals(self, e: Estimate) -> tuple[tuple[float, float], tuple[float, float]]:
        """The 80 % utilization and memory intervals a policy is told with a prediction: those of
        the error model this run's truth is drawn with (``z = 1.2816``, so that they cover 80 %
        of the truths, as a calibration's split-conformal intervals do). When the error model is
        zero, the prediction's own utilization interval, and a memory interval of zero width: the
        true memory is then the prediction, as it is whenever the memory error is zero (the
        prediction's own memory range, ``EstimatorConfig.memory_range``, is a plausible range of
        no stated level, and ``gpucast``'s memory bound reads the told interval as an 80 % one:
        :func:`gpucast.cluster.policies.gpucast.memory_bound`)."""
        from gpucast.cluster.errors import Z80

        su, sm = self.errors.sigma("util"), self.errors.sigma("memory")
        if su == 0 and sm == 0:
            return e.util_interval, (e.memory_bytes, e.memory_bytes)
        fu, fm = math.exp(Z80 * su), math.exp(Z80 * sm)
        return ((_logit_scaled(e.util_pct, 1 / fu), _logit_scaled(e.util_pct, fu)),
                (e.memory_bytes / fm, e.memory_bytes * fm))

    def observe(self, profile: Profile, gpu: str, told: str, gpus: int = 1) -> Observation:
        """What a policy that is ``told`` this learns about ``profile`` on ``gpu``."""
        from gpucast.cluster.gangs import node_gpus

        base = dict(workload=profile.workload, batch_size=profile.batch_size, gpus=gpus, gpu_type=gpu,
                    source=told, job_type=profile.job_type, node_gpus=node_gpus(profile.fields, gpus))
        if told == "nothing":
            return Observation(**base)
        if told == "prediction":
            e = self.estimate(profile, gpu)
            from gpucast.cluster.errors import Z80

            ui, mi = self.intervals(e)
            fs = math.exp(Z80 * self.errors.sigma("step"))     # the step's 80 % interval, as intervals()
            return Observation(**base, util_pct=e.util_pct, util_interval=ui,
                               memory_bytes=e.memory_bytes, memory_interval=mi,
                               step_time_s=e.step_time_s, step_interval=(e.step_time_s / fs, e.step_time_s * fs),
                               gaps=e.gaps, mem_bound=e.mem_bound,
                               held_pct=e.held, syncs=e.syncs)
        if told in ("truth", "profiled"):
            b = self.behaviour(profile, gpu, gpus)
            return Observation(**base, util_pct=b.util_pct, util_interval=(b.util_pct, b.util_pct),
                               memory_bytes=b.memory_bytes, memory_interval=(b.memory_bytes, b.memory_bytes),
                               step_time_s=b.step_time_s, step_interval=(b.step_time_s, b.step_time_s),
                               gaps=b.gaps, mem_bound=b.mem_bound, held_pct=b.held_pct, syncs=b.syncs)
        raise ValueError(f"unknown observation kind {told!r} (nothing, prediction, profiled, truth)")
