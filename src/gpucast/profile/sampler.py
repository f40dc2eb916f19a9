"""NVML sampling on a background thread, steady-state windows, and their aggregates.

A :class:`Sampler` reads an :class:`~gpucast.profile.nvml.NvmlBackend` every ``1/rate_hz``
seconds (default 50 Hz; it must sustain >= 20 Hz) on a daemon thread and keeps every
:class:`Sample`. The runner marks the steady-state window with the *same clock* (``clock``,
default ``time.monotonic``) and asks for :meth:`Sampler.window`; :func:`summarize` reduces a window
to the row's NVML columns and :func:`step_stats` reduces CUDA-event step times to the step columns.

What a sample means. NVML's ``utilization.gpu`` is already an average computed by the driver over
its own sample period (1/6 s to 1 s depending on the GPU): sampling faster than that period
returns the same value several times, and a single sample is not the utilization of the instant
it was read. What we report is the mean (and percentiles) over all samples in the window, which
approximates the time-weighted utilization over the window when the window is several driver
periods long. Repeated values are kept, not de-duplicated, so that every sample weighs the same
wall time.

Timing. Pacing uses ``time.monotonic`` (so an injected ``clock`` cannot stall the thread; a test
injects ``pace_clock`` and ``pace_wait`` instead, and drives the loop without wall time); each
sample is stamped with one ``clock()`` call taken just before the readings. A read slower than
the period is not caught up in a burst: the next read is scheduled one period after it.

Errors. The optional readings (SM clock, power, process memory) degrade to ``None`` / ``None`` /
``0`` if the backend raises. If a required reading (utilization, memory used) raises,
:meth:`Sampler.sample_once` raises; the thread instead counts it (``errors``, ``last_error``),
records no sample and keeps going.

Not modelled: the sampler's own cost on the measured job (NVML calls release the GIL, but the
Python between them does not: run the sampler in a process other than the measured one when the
job is dispatch-bound), per-MIG-instance utilization, and clock skew between processes (use one
clock per window).

Percentiles here are numpy's default (``method="linear"``, Hyndman and Fan type 7).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["Sample", "Sampler", "summarize", "step_stats"]


@dataclass(frozen=True)
class Sample:
    """One NVML reading. ``t`` is the sampler's clock; sizes in bytes; ``None``: not reported."""

    t: float
    util_pct: float
    mem_used_bytes: int
    proc_mem_bytes: int
    sm_clock_mhz: float | None
    power_w: float | None


class Sampler:
    """Reads ``backend`` every ``1/rate_hz`` s on a daemon thread between ``start`` and ``stop``.

    ``pids``: the processes whose NVML compute memory is summed into ``proc_mem_bytes``.
    ``clock``: stamps samples; pass the clock the caller uses to mark windows.
    The backend is the caller's: the sampler never closes it.
    """

    def __init__(
        self,
        backend,
        rate_hz: float = 50.0,
        pids: Iterable[int] = (),
        clock: Callable[[], float] = time.monotonic,
        pace_clock: Callable[[], float] = time.monotonic,
        pace_wait: Callable[[float], bool] | None = None,
    ):
        if not rate_hz > 0:
            raise ValueError(f"rate_hz must be > 0, got {rate_hz!r}")
        self.backend = backend
        self.rate_hz = float(rate_hz)
        self.pids = tuple(int(p) for p in pids)
        self.clock = clock
        self.pace_clock = pace_clock
        self._pace_wait = pace_wait
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = 0
        self._last_error: str | None = None

    # -- reading ---------------------------------------------------------------------------

    def sample_once(self) -> Sample:
        """Read the backend once, record the sample and return it (required readings may raise)."""
        b = self.backend
        t = self.clock()
        util = float(b.utilization_gpu())
        mem = int(b.memory_used())
        proc = _optional(lambda: int(b.process_memory(self.pids)), 0) if self.pids else 0
        sm = _optional(lambda: b.sm_clock_mhz(), None)
        power = _optional(lambda: b.power_w(), None)
        sample = Sample(
            t=float(t),
            util_pct=util,
            mem_used_bytes=mem,
            proc_mem_bytes=proc,
            sm_clock_mhz=None if sm is None else float(sm),
            power_w=None if power is None else float(power),
        )
        with self._lock:
            self._samples.append(sample)
        return sample

    def _run(self) -> None:
        period = 1.0 / self.rate_hz
        wait = self._pace_wait or self._stop.wait
        next_at = self.pace_clock()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a required reading failed: count it, keep sampling
                with self._lock:
                    self._errors += 1
                    self._last_error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            next_at += period
            now = self.pace_clock()
            if next_at < now:  # fell behind: no burst, restart the schedule from now
                next_at = now
            wait(next_at - now)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "Sampler":
        """Start the thread (one sample is taken at once). A sampler starts only once."""
        if self._thread is not None:
            raise RuntimeError("Sampler already started")
        self._thread = threading.Thread(target=self._run, name="gpucast-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and join it. Idempotent; a no-op if never started."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)
            if thread.is_alive():  # pragma: no cover - a backend call hung
                raise RuntimeError(f"NVML sampler thread did not stop within {timeout} s")

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- results ---------------------------------------------------------------------------

    @property
    def samples(self) -> list[Sample]:
        """A copy of every sample so far, in the order taken."""
        with self._lock:
            return list(self._samples)

    @property
    def errors(self) -> int:
        """Thread reads that failed on a required reading (no sample recorded for them)."""
        return self._errors

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def achieved_hz(self) -> float:
        """Samples per second of ``clock`` over the span of all samples; 0.0 with fewer than 2."""
        return achieved_hz(self.samples)

    def window(self, t0: float, t1: float) -> list[Sample]:
        """Samples with ``t0 <= t <= t1``, in the order taken."""
        return [s for s in self.samples if t0 <= s.t <= t1]


def _optional(read, default):
    try:
        return read()
    except Exception:
        return default


def achieved_hz(samples: Sequence[Sample]) -> float:
    """``(n - 1) / (t_last - t_first)`` over ``samples``; 0.0 with fewer than 2 or no span."""
    if len(samples) < 2:
        return 0.0
    span = samples[-1].t - samples[0].t
    return (len(samples) - 1) / span if span > 0 else 0.0


def _pcts(values, qs) -> list[float]:
    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), qs)]


def summarize(samples: Sequence[Sample]) -> dict:
    """The row's NVML columns for ``samples`` (usually one window); ``None`` where nothing was read.

    ``proc_mem_max_bytes`` is ``None`` when every sample read 0: NVML listed none of the watched
    pids (none given, or a container's PID namespace hides them), which is not a measurement.
    """
    out = dict.fromkeys(
        (
            "util_mean_pct", "util_p5_pct", "util_p50_pct", "util_p95_pct", "util_samples",
            "mem_used_max_bytes", "proc_mem_max_bytes", "sm_clock_mean_mhz", "power_mean_w",
        )
    )
    out["util_samples"] = len(samples)
    if not samples:
        return out
    util = [s.util_pct for s in samples]
    out["util_mean_pct"] = float(np.mean(util))
    out["util_p5_pct"], out["util_p50_pct"], out["util_p95_pct"] = _pcts(util, [5, 50, 95])
    out["mem_used_max_bytes"] = int(max(s.mem_used_bytes for s in samples))
    proc = max(s.proc_mem_bytes for s in samples)
    out["proc_mem_max_bytes"] = int(proc) if proc > 0 else None
    clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None]
    power = [s.power_w for s in samples if s.power_w is not None]
    out["sm_clock_mean_mhz"] = float(np.mean(clocks)) if clocks else None
    out["power_mean_w"] = float(np.mean(power)) if power else None
    return out


def step_stats(step_times_s: Sequence[float]) -> dict:
    """The row's step-time columns. ``std`` is the sample standard deviation (``ddof=1``),
    ``None`` for fewer than two steps; everything is ``None`` for no steps."""
    out = dict.fromkeys(("step_time_mean_s", "step_time_p5_s", "step_time_p50_s", "step_time_p95_s", "step_time_std_s"))
    times = np.asarray(list(step_times_s), dtype=float)
    if times.size == 0:
        return out
    if not np.all(np.isfinite(times)):
        raise ValueError("step times must be finite")
    out["step_time_mean_s"] = float(times.mean())
    out["step_time_p5_s"], out["step_time_p50_s"], out["step_time_p95_s"] = _pcts(times, [5, 50, 95])
    out["step_time_std_s"] = float(times.std(ddof=1)) if times.size >= 2 else None
    return out
