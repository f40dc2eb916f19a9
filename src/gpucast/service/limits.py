"""What the service accepts: its settings and the request-size guard.

Every limit is a :class:`Settings` field (``gpucast serve`` sets the data directory; the rest
keep their defaults unless a program builds its own ``Settings``). Past a limit the service
answers a 4xx with a one-line ``detail``; nothing is half-done.

=========================  ==========  ====================================================
limit                      default     past it
=========================  ==========  ====================================================
``max_json_bytes``         1 MiB       413: JSON request bodies (every route but the upload)
``max_onnx_bytes``         200 MiB     413: the ONNX file of ``/v1/predict/onnx``; it is
                                       also the ONNX reader's ``max_bytes`` (graph size)
``max_hf_config_bytes``    256 KiB     422: a Hugging Face config's canonical JSON
``prediction_timeout_s``   60 s        408: waiting for one request's predictions (capture
                                       + estimate); the capture keeps running and its
                                       answer is cached, so a retry gets it
``max_gpus_per_request``   16          422: GPU types in one ``/v1/predict`` request
``max_place_gpus``         1024        422: GPUs in one ``/v1/place`` request
``max_place_jobs``         4096        422: jobs on those GPUs, all together
``max_pending``            64          429: distinct predictions computing at once
=========================  ==========  ====================================================

Batch size, shapes, precision and the other job fields are bounded by
:class:`gpucast.job.Job`'s own validation (422 with its message).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from starlette.exceptions import HTTPException

MiB = 1 << 20
ONNX_ROUTE = "/v1/predict/onnx"
MULTIPART_OVERHEAD = 1 * MiB  # form fields and part headers around the ONNX file


def _default_data_dir() -> Path:
    return Path(os.environ.get("GPUCAST_DATA_DIR", Path.home() / ".cache" / "gpucast" / "service"))


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=_default_data_dir)  # uploaded ONNX files, content-addressed
    max_json_bytes: int = 1 * MiB
    max_onnx_bytes: int = 200 * MiB
    max_hf_config_bytes: int = 256 * 1024
    prediction_timeout_s: float = 60.0
    max_gpus_per_request: int = 16
    max_place_gpus: int = 1024
    max_place_jobs: int = 4096
    max_pending: int = 64
    cache_size: int = 4096        # (job key, GPU) answers kept, least recently used dropped
    workers: int = 4              # threads that run predictions
    # The Environment every prediction uses (``gpucast serve --env FILE``); None: the default.
    environment: object = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))

    def table(self) -> list[dict]:
        """The limits as rows (for ``GET /healthz`` and the README)."""
        return [{"limit": k, "value": v} for k, v in (
            ("max_json_bytes", self.max_json_bytes), ("max_onnx_bytes", self.max_onnx_bytes),
            ("max_hf_config_bytes", self.max_hf_config_bytes), ("prediction_timeout_s", self.prediction_timeout_s),
            ("max_gpus_per_request", self.max_gpus_per_request), ("max_place_gpus", self.max_place_gpus),
            ("max_place_jobs", self.max_place_jobs), ("max_pending", self.max_pending))]


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    unit, div = ("KiB", 1024) if n < MiB else ("MiB", MiB)
    return f"{n / div:.1f} {unit}".replace(".0 ", " ")


class BodyTooLarge(HTTPException):
    """Raised from the body stream; an HTTPException, so FastAPI's body parsing re-raises it."""

    def __init__(self, detail: str):
        super().__init__(status_code=413, detail=detail)


class BodyLimit:
    """ASGI middleware: refuse a request body over the route's limit with 413, from its
    ``Content-Length`` before reading, or as soon as a chunked body passes the limit."""

    def __init__(self, app, settings: Settings):
        self.app = app
        self.settings = settings

    def limit_for(self, path: str) -> int:
        if path == ONNX_ROUTE:
            return self.settings.max_onnx_bytes + MULTIPART_OVERHEAD
        return self.settings.max_json_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope["path"])
        what = "upload" if scope["path"] == ONNX_ROUTE else "request body"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    n = int(value)
                except ValueError:
                    return await _reject(send, 400, "invalid Content-Length header")
                if n > limit:
                    _label(scope)
                    return await _reject(send, 413, f"{what} is {_size(n)}, over the limit of {_size(limit)}")
                break
        seen = 0
        started = False

        async def counted_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(f"{what} is over the limit of {_size(limit)}")
            return message

        async def tracked_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge as exc:
            _label(scope)
            if not started:
                await _reject(send, 413, exc.detail)


def _label(scope) -> None:
    """Metrics label of a request refused before routing: its path when the app has that route."""
    paths = getattr(getattr(scope.get("app"), "state", None), "paths", ())
    if scope["path"] in paths:
        scope["gpucast.route"] = scope["path"]


async def _reject(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
