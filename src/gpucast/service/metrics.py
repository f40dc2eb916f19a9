"""Prometheus metrics of one service instance (its own registry, so apps do not collide).

=============================================  =========  ======================================
name                                           type       labels / meaning
=============================================  =========  ======================================
``gpucast_http_requests_total``                counter    ``route`` (the path template),
                                                          ``method``, ``status``
``gpucast_http_request_duration_seconds``      histogram  ``route``, ``method``
``gpucast_prediction_cache_hits_total``        counter    answers served from the cache
``gpucast_prediction_cache_misses_total``      counter    answers that had to be computed
``gpucast_prediction_dedup_waits_total``       counter    requests that joined a prediction
                                                          another request had started
``gpucast_predictions_in_flight``              gauge      predictions computing now
``gpucast_prediction_seconds``                 histogram  time of one prediction (capture +
                                                          estimate), failures included
``gpucast_prediction_cache_entries``           gauge      answers held in the cache
=============================================  =========  ======================================
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_PREDICTION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 60, 120)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("gpucast_http_requests", "HTTP requests answered", ("route", "method", "status"),
                                registry=r)
        self.latency = Histogram("gpucast_http_request_duration_seconds", "HTTP request latency",
                                 ("route", "method"), buckets=_LATENCY_BUCKETS, registry=r)
        self.cache_hits = Counter("gpucast_prediction_cache_hits", "Predictions served from the cache", registry=r)
        self.cache_misses = Counter("gpucast_prediction_cache_misses", "Predictions that had to be computed",
                                    registry=r)
        self.dedup_waits = Counter("gpucast_prediction_dedup_waits",
                                   "Requests that awaited a prediction another request started", registry=r)
        self.in_flight = Gauge("gpucast_predictions_in_flight", "Predictions computing now", registry=r)
        self.prediction_seconds = Histogram("gpucast_prediction_seconds", "Time of one prediction",
                                            buckets=_PREDICTION_BUCKETS, registry=r)
        self.cache_entries = Gauge("gpucast_prediction_cache_entries", "Answers held in the cache", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware: count and time every HTTP request by route template, method and status."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            label = scope.get("gpucast.route") or getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.requests.labels(label, scope["method"], str(status)).inc()
            self.metrics.latency.labels(label, scope["method"]).observe(time.perf_counter() - t0)
