"""gpucast's HTTP service: predictions, placement and the Kubernetes webhook over FastAPI.

``create_app(settings)`` builds the app (:mod:`.app`); ``gpucast serve`` runs it with uvicorn.
Modules: ``limits`` (settings and the request-size guard), ``schemas`` (request and response
bodies), ``jobs`` (request specs to Jobs, what is refused), ``keyed`` (the one keyed cache: an
LRU of answers, identical requests sharing one computation, a thread pool, bounded waits),
``cache`` (predictions through it), ``advise`` (``/v1/advise`` through it), ``pack`` (``/v1/pack``, the same
way), ``uploads`` (ONNX files), ``place`` (``/v1/place`` over
``gpucast.cluster.choose_gpu``), ``metrics`` (Prometheus). A thin shell: no prediction or
placement logic of its own.
"""

from gpucast.service.limits import Settings


def create_app(settings: Settings | None = None):
    from gpucast.service.app import create_app as _create

    return _create(settings)


__all__ = ["Settings", "create_app"]
