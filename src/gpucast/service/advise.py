"""``POST /v1/advise``: cost-benefit advice (:func:`gpucast.advisor.advise`) behind the service's limits.

The job is read as ``/v1/predict`` reads it (:func:`gpucast.service.jobs.job_from_spec`: code,
server files and spec files refused with 422); GPU names are catalog names only; a price table is a
packaged name or the entries themselves, never a path on the server. The search is bounded
(:data:`MAX_BATCHES`, :data:`MAX_COUNTS`, :data:`MAX_PLANS`, and the GPU types by
``max_gpus_per_request``). A job with a ``parallel`` group is advised on parallel plans
(:mod:`gpucast.advisor.plans`); the plan search's own fields (``plans``, ``shardings``, ...) pass
through where the request carries them. A ``mode: serve`` job is advised as ``gpucast advise --serve``
advises it (:func:`gpucast.advisor.serving.advise_serving`: GPU types, ``tensors``, ``precisions``,
``engines``, the ``ttft_s``/``tpot_s`` targets, up to ``replicas`` copies (:data:`MAX_REPLICAS`), ``layouts``,
draft counts ``spec_tokens`` and prefill degrees ``prefill_tensors``, at most :data:`MAX_SERVING_VALUES` of each).

Answers are cached by the request's content (the job's key and the search's fields) in an LRU
of their JSON bytes, so a repeated request is answered without a thread or torch; identical
requests computing at once share one computation; waiting is bounded by
``prediction_timeout_s`` (408; the computation finishes in the background and is cached): the
service's one keyed cache, :class:`gpucast.service.keyed.KeyedFutures`, as for predictions.
Captures are cached by ``gpucast.api`` across requests, so a new search over a captured job
costs estimates only.
"""

from __future__ import annotations

import hashlib
import json
import time

from gpucast.service.cache import ServiceError, failure
from gpucast.service.keyed import KeyedFutures, within
from gpucast.service.jobs import gpu_names, job_from_spec
from gpucast.service.limits import Settings

MAX_BATCHES = 8
MAX_COUNTS = 8
CACHE_SIZE = 512
_SEARCH_FIELDS = ("gpu", "counts", "max_gpus", "batches", "keep_global_batch", "precisions", "share", "prices",
                  "provider", "samples_per_epoch", "epochs", "deadline_s", "budget_usd")
# The plan search's fields (gpucast.advisor.plans), passed through where the request schema has them.
_PLAN_FIELDS = ("plans", "shardings", "tensors", "pipelines", "recomputes", "max_plans", "contexts", "experts",
                "virtual_pipelines", "sequence_parallel", "global_batch")
MAX_PLANS = 400
# A mode 'serve' job's search (gpucast.advisor.serving): its own fields, and the shared ones it reads.
_SERVING_FIELDS = ("engines", "ttft_s", "tpot_s", "replicas", "layouts", "spec_tokens", "prefill_tensors")
MAX_SERVING_VALUES = 16   # draft counts or prefill degrees a request may ask the serving search to try
MAX_REPLICAS = 64   # copies of a deployment a request may ask the serving search to try


class Advisor:
    """``/v1/advise``'s answers through the keyed cache (a subclass answers another request the same
    way: :class:`gpucast.service.pack.Packer`)."""

    NAME, WHAT = "gpucast-advise", "advice"

    def __init__(self, settings: Settings, metrics):
        self.settings = settings
        self.metrics = metrics
        self._cache: KeyedFutures[str, tuple[bytes, ServiceError | None]] = KeyedFutures(
            CACHE_SIZE, 2, name=self.NAME, max_pending=settings.max_pending,
            busy=lambda n: ServiceError(429, f"too many {self.WHAT} requests computing at once (max_pending); "
                                             f"retry later"))

    def close(self) -> None:
        self._cache.close()

    def _request(self, body: dict):
        """(cache key, job, advise keyword arguments) of a validated request body; ServiceError(422)."""
        search = {k: body.pop(k) for k in _SEARCH_FIELDS}
        search.update({k: v for k in _PLAN_FIELDS + _SERVING_FIELDS if (v := body.pop(k, None)) is not None})
        if search.get("replicas", 1) > MAX_REPLICAS:
            raise ServiceError(422, f"field 'replicas': {search['replicas']}, over the limit of {MAX_REPLICAS}")
        for name in ("spec_tokens", "prefill_tensors", "contexts", "experts", "virtual_pipelines"):
            if len(search.get(name) or ()) > MAX_SERVING_VALUES:
                raise ServiceError(422, f"field '{name}': {len(search[name])} values, over the limit of "
                                        f"{MAX_SERVING_VALUES}")
        if search.get("max_plans", 0) > MAX_PLANS:
            raise ServiceError(422, f"field 'max_plans': {search['max_plans']}, over the limit of {MAX_PLANS}")
        job = job_from_spec(body, self.settings)
        for name, limit in (("batches", MAX_BATCHES), ("counts", MAX_COUNTS)):
            if search[name] is not None and len(search[name]) > limit:
                raise ServiceError(422, f"field '{name}': {len(search[name])} values, over the limit of {limit}")
        gpus = gpu_names(search["gpu"], self.settings) if search["gpu"] is not None else None
        key = hashlib.sha256(json.dumps([job.key, {**search, "gpu": gpus}], sort_keys=True, default=str)
                             .encode()).hexdigest()
        return key, job, dict(search, gpu=gpus)

    def _compute(self, job, search) -> tuple[bytes, ServiceError | None]:
        """:meth:`_answer`'s JSON bytes, or the 422 its input earns; timed."""
        t0 = time.perf_counter()
        try:
            return json.dumps(self._answer(job, search), separators=(",", ":")).encode(), None
        except ServiceError as exc:
            return b"", exc
        except Exception as exc:  # noqa: BLE001 - a 422 is cached; a 500 (gpucast's fault) is raised, not cached
            error = failure(exc, self._subject(job))
            if error.status == 500:
                raise error from None
            return b"", error
        finally:
            self.metrics.prediction_seconds.observe(time.perf_counter() - t0)

    def _answer(self, job, search: dict) -> dict:
        """The advice (:func:`gpucast.advisor.advise`) as a dict."""
        from gpucast.advisor import advise
        from gpucast.advisor.prices import packaged, parse

        prices = search.pop("prices")
        if isinstance(prices, list):
            entries = [{k: v for k, v in e.items() if v is not None} for e in prices]
            prices = parse(entries, "field 'prices'", "request")
        elif isinstance(prices, str) and prices not in packaged():  # never a path on the server
            raise ServiceError(422, f"field 'prices': {prices!r} is not a packaged price table "
                                    f"({', '.join(packaged())}); or send the entries")
        gpus = search.pop("gpu")
        serving = {k: search.pop(k) for k in _SERVING_FIELDS if k in search}
        if job.mode == "serve":   # a deployment: the serving search (gpucast advise --serve)
            from gpucast.advisor.serving import DEFAULT_ENGINES, DEFAULT_GPUS, DEFAULT_TENSORS, advise_serving

            engines = serving.get("engines") or ([job.serve.engine] if job.serve and job.serve.engine
                                                 else list(DEFAULT_ENGINES))
            return advise_serving(job, gpus or list(DEFAULT_GPUS), tensors=search.get("tensors") or DEFAULT_TENSORS,
                                  precisions=search.get("precisions"), engines=engines, ttft_s=serving.get("ttft_s"),
                                  tpot_s=serving.get("tpot_s"), prices=prices, provider=search.get("provider"),
                                  replicas=serving.get("replicas", 1), layouts=serving.get("layouts"),
                                  spec_tokens=serving.get("spec_tokens"),
                                  prefill_tensors=serving.get("prefill_tensors")).to_dict()
        if serving:
            raise ServiceError(422, f"field '{next(iter(serving))}' applies to a mode 'serve' job's advice")
        return advise(job, gpus, prices=prices, env=self.settings.environment, **search).to_dict()

    def _subject(self, job) -> str:
        return f"advice for {job.model}"

    async def answer(self, body: dict) -> bytes:
        key, job, search = self._request(body)
        hit = self._cache.cached(key)
        if hit is None:
            limit = self.settings.prediction_timeout_s
            hit = await within(limit, self._cache.get(key, self._compute, job, search), lambda: ServiceError(
                408, f"{self._subject(job)} did not finish within {limit:g} s (prediction_timeout_s); it keeps "
                     f"running and a retry is answered from the cache once it is done"))
        body_bytes, error = hit
        if error is not None:
            raise ServiceError(error.status, error.detail)
        return body_bytes
