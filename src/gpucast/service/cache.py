"""Predictions by (job key, GPU): an LRU of answers, per-key de-duplication, a thread pool
(:class:`gpucast.service.keyed.KeyedFutures`, which ``/v1/advise`` uses too).

``Predictor.get(job, gpu)`` answers in one of three ways:

* **cached**: the answer (the :class:`~gpucast.prediction.Prediction` and its JSON bytes,
  made once) is returned at once, on the event loop; no thread, no torch;
* **in flight**: another request is computing the same key; this one awaits that future;
* **new**: ``gpucast.api.predict`` runs in the pool; the answer (or the 422 it raised, so a
  failing capture is not repeated) is cached. A failure that is not the input's fault
  (:mod:`gpucast.faults`: e.g. an ``AttributeError`` from a library) is a 500 with one line,
  logged with its traceback and not cached.

Captures run side by side in the pool's threads (``workers``): what a capture changes in
PyTorch is per thread (dispatch and function modes; the SDPA routing of
``gpucast.graph.mirror``), so a slow capture delays neither a cached answer (those do not touch
the pool) nor another job's capture, beyond sharing the GIL: captures are Python-bound, so
threads interleave them rather than run them faster.

Waiting is bounded by ``prediction_timeout_s`` (408); the computation itself cannot be
interrupted (a thread cannot be killed), so it finishes in the background and its answer is
cached. At most ``max_pending`` distinct predictions compute at once (429 beyond).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

from gpucast.faults import is_input_error
from gpucast.job import Job
from gpucast.service.keyed import KeyedFutures, within
from gpucast.service.limits import Settings
from gpucast.service.metrics import Metrics

log = logging.getLogger("gpucast.service")

class ServiceError(Exception):
    """A request the service answers with ``status`` and a one-line ``detail``."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Entry:
    """One cached answer: a prediction and its JSON, or the error it raised."""

    prediction: object | None = None
    body: bytes = b""
    error: ServiceError | None = None

    def result(self):
        if self.error is not None:
            raise ServiceError(self.error.status, self.error.detail)
        return self


def _one_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    text = " ".join(text.split())
    return text or type(exc).__name__


def failure(exc: Exception, subject: str) -> ServiceError:
    """The answer to a computation that raised ``exc``: a 422 with its one line when the input is
    at fault (:func:`gpucast.faults.is_input_error`), else a 500 (gpucast's fault; logged with its
    traceback, which never reaches the client)."""
    if is_input_error(exc):
        return ServiceError(422, _one_line(exc))
    log.error("%s failed", subject, exc_info=exc)
    return ServiceError(500, f"{subject} failed inside gpucast ({type(exc).__name__}: {_one_line(exc)}); not the "
                             f"request's fault: it is logged, not cached, and a retry computes it again")


class Predictor:
    def __init__(self, settings: Settings, metrics: Metrics):
        self.settings = settings
        self.metrics = metrics
        self._cache: KeyedFutures[tuple[str, str], Entry] = KeyedFutures(
            settings.cache_size, settings.workers, name="gpucast-predict", max_pending=settings.max_pending,
            busy=lambda n: ServiceError(429, f"{n} predictions are computing, the most this service runs at once "
                                             f"(max_pending); retry later"),
            on_event=self._event)
        self._lru = self._cache.values  # the answers by (job key, GPU), read by the fast path and /healthz
        self._inflight = self._cache.pending

    def _event(self, name: str, n: int) -> None:
        m = self.metrics
        if name == "hit":
            m.cache_hits.inc(n)
        elif name == "miss":
            m.cache_misses.inc(n)
        elif name == "join":
            m.dedup_waits.inc(n)
        elif name == "in_flight":
            m.in_flight.inc(n)
        elif name == "size":
            m.cache_entries.set(n)

    def close(self) -> None:
        self._cache.close()

    def cached(self, job: Job, gpu: str) -> Entry | None:
        return self._cache.cached((job.key, gpu))

    # -------------------------------------------------------------------- computing
    def _compute(self, job: Job, gpu: str) -> Entry:
        """In a pool thread: one prediction, as an Entry (input errors become a cached 422)."""
        from gpucast import api

        if job.data is not None and job.data.has_code:  # never run a user's code, whatever path the job came by
            return Entry(error=ServiceError(422, "field 'data': names code (data.dataset, data.collate or "
                                                 "data.environment), which this service never accepts"))
        t0 = time.perf_counter()
        try:
            pred = api.predict(job, gpu, env=self.settings.environment)
            body = json.dumps(pred.to_dict(), separators=(",", ":")).encode()
            return Entry(prediction=pred, body=body)
        except Exception as exc:  # noqa: BLE001 - every failure is answered: 422 (cached) or 500 (raised, not cached)
            error = failure(exc, f"prediction of {job.model} on {gpu}")
            if error.status == 500:
                raise error from None
            return Entry(error=error)
        finally:
            self.metrics.prediction_seconds.observe(time.perf_counter() - t0)

    async def get(self, job: Job, gpu: str) -> Entry:
        """The answer for ``job`` on ``gpu`` (see module docstring); raises ServiceError."""
        return (await self._cache.get((job.key, gpu), self._compute, job, gpu)).result()

    async def get_many(self, pairs: list[tuple[Job, str]]) -> list[Entry]:
        """Answers for several (job, GPU) pairs under one time limit (408 past it)."""
        entries = [self.cached(j, g) for j, g in pairs]
        if all(e is not None for e in entries):  # the fast path: no task, no timer
            self.metrics.cache_hits.inc(len(entries))
            return [e.result() for e in entries]
        limit = self.settings.prediction_timeout_s
        names = sorted({f"{j.model} on {g}" for j, g in pairs})
        return list(await within(limit, asyncio.gather(*(self.get(j, g) for j, g in pairs)), lambda: ServiceError(
            408, f"prediction of {', '.join(names[:3])}{' ...' if len(names) > 3 else ''} did not finish within "
                 f"{limit:g} s (prediction_timeout_s); it keeps running and a retry is answered from the cache once "
                 f"it is done")))

    def get_blocking(self, job: Job, gpu: str, loop: asyncio.AbstractEventLoop):
        """From a thread other than the loop's: the Prediction (for ``predict_fn`` callbacks)."""
        e = self._lru.get((job.key, gpu))
        if e is not None:
            self.metrics.cache_hits.inc()
            return e.result().prediction
        cf = asyncio.run_coroutine_threadsafe(self.get_many([(job, gpu)]), loop)
        return cf.result()[0].prediction
