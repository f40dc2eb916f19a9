"""A client of the prediction service: ``predict_remote(job, gpu, url)`` asks a running
``gpucast serve`` instead of capturing the model here.

What it does: sends a :class:`~gpucast.job.Job` to the service (``gpucast.service.app``) and
rebuilds the :class:`~gpucast.prediction.Prediction` from its JSON answer. Zoo jobs and
Hugging Face jobs (``hf:``; their config travels as ``hf_config``, the content the job carries)
go to ``POST {url}/v1/predict``; ONNX jobs (``onnx:``) upload the file's bytes to
``POST {url}/v1/predict/onnx`` (multipart; the bytes sent are checked against the job's
``model_digest``). The answer to an ONNX upload names the service's copy of the file, so the
Prediction carries the caller's job (``job``, ``job_key``) after the digests are compared.
Standard library only (``urllib.request``, ``json``), and no torch: the point is to answer in
the time of one HTTP round trip when the service has the prediction cached.

Failures are two kinds, so that a caller can choose what to do:

* :class:`ServiceRefused` (a ``ValueError``): the service refused the job itself (HTTP 400,
  413, 415 or 422, with the service's one-line ``detail``): predicting it locally would not help.
* :class:`ServiceUnavailable`: the service could not answer (connection refused, no answer
  within ``timeout`` seconds, a 5xx, 408 (its prediction time limit), 429 (too many predictions
  computing), any other status, or an answer that is not a prediction). A local prediction
  may still work; ``gpucast slurm --service`` falls back to it unless told not to.

What it does not do: ``module:`` jobs and jobs naming their own ``data.dataset``/``collate``/
``environment`` are code and never go to the service (a ``ValueError``, no request); it does not retry, does not cache, sends no credentials and ignores proxy
environment variables (``http_proxy``...): the service is expected on the local network,
typically on the same host. GPU spec files are refused by the service (catalog names only).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import uuid
from dataclasses import fields, replace
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import ProxyHandler, Request, build_opener

from gpucast.job import Job, JobError
from gpucast.prediction import Prediction
from gpucast.surroundings import CODE_FIELDS

DEFAULT_TIMEOUT_S = 5.0
# Statuses by which the service refuses the job itself (gpucast.service: bad request, over a
# size limit, a pickle instead of ONNX, a job that fails validation or capture).
JOB_REFUSALS = frozenset({400, 413, 415, 422})
_TUPLES = ("gpu_util_interval", "memory_interval", "step_time_interval", "notes")
_JOB_FIELDS = ("batch_size", "seq_len", "input_shape", "precision", "mode", "optimizer", "input_pipeline_s", "gpus")


class ServiceRefused(ValueError):
    """The service refused the job (4xx): the message is its one-line detail."""


class ServiceUnavailable(Exception):
    """The service gave no usable answer (unreachable, timed out, 5xx, busy, not a prediction)."""


def check_url(url: str) -> str:
    """The service's base URL without a trailing ``/``; a ValueError unless it is ``http://`` or
    ``https://`` with a host (a path prefix is kept, a query or fragment refused)."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("the service URL is empty (give http://HOST:PORT)")
    url = url.strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
    except ValueError as exc:
        raise ValueError(f"the service URL {url!r} is not valid: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"the service URL must start with http:// or https://, got {url!r}")
    if not parts.hostname:
        raise ValueError(f"the service URL {url!r} has no host (give http://HOST:PORT)")
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"the service URL {url!r} must be http(s)://HOST[:PORT][/PATH], without user, query "
                         f"or fragment")
    if any(c.isspace() for c in url):
        raise ValueError(f"the service URL {url!r} contains white space")
    return url.rstrip("/")


def predict_remote(job: Job, gpu: str, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> Prediction:
    """``job``'s prediction on catalog GPU ``gpu`` from the service at ``url`` (see the module
    docstring for what goes where and what is raised)."""
    base = check_url(url)
    if not isinstance(job, Job):
        raise TypeError(f"job must be a gpucast.job.Job, got {type(job).__name__}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if job.is_module:
        raise JobError(f"field 'model': {job.model!r} is code, which the prediction service never runs; "
                       f"predict it locally or export it to ONNX")
    if job.data is not None and job.data.has_code:
        name = next(n for n in CODE_FIELDS if getattr(job.data, n) is not None)
        raise JobError(f"field 'data.{name}': {getattr(job.data, name)!r} is code, which the prediction service "
                       f"never runs; predict it locally (it is timed on this CPU)")
    if job.is_onnx:
        body, ctype = _onnx_form(job, gpu)
        answer = _post(f"{base}/v1/predict/onnx", body, ctype, base, timeout)
        pred = _prediction(answer, base)
        digest = pred.job.get("model_digest") if isinstance(pred.job, dict) else None
        if digest != job.model_digest:
            raise ServiceUnavailable(f"gpucast service at {base} answered for another ONNX file "
                                     f"(digest {digest!r}, sent {job.model_digest!r})")
        return _replace_job(pred, job)
    spec = {k: getattr(job, k) for k in _JOB_FIELDS}
    if spec["input_shape"] is not None:
        spec["input_shape"] = list(spec["input_shape"])
    for name in ("data", "loop", "stack", "parallel", "adapter"):  # the groups the job sets
        if getattr(job, name) is not None:
            spec[name] = getattr(job, name).to_dict()
    if job.is_hf:
        spec["hf_config"] = json.loads(job.hf_config)
    else:
        spec["workload"] = job.model
    spec["gpu"] = gpu
    # One spelling per request: the service's fast path answers the same bytes from its cache.
    body = json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()
    return _prediction(_post(f"{base}/v1/predict", body, "application/json", base, timeout), base)


# ---------------------------------------------------------------------- HTTP
def _post(url: str, body: bytes, content_type: str, base: str, timeout: float):
    req = Request(url, data=body, method="POST",
                  headers={"Content-Type": content_type, "Accept": "application/json"})
    opener = build_opener(ProxyHandler({}))  # a direct connection: no proxy from the environment
    try:
        with opener.open(req, timeout=timeout) as resp:
            raw = resp.read()
    except HTTPError as exc:
        with exc:
            raw = _read_quietly(exc)
        if exc.code in JOB_REFUSALS:
            raise ServiceRefused(f"the service refused the job: {_detail(raw, exc)}") from None
        raise ServiceUnavailable(f"gpucast service at {base} answered HTTP {exc.code}"
                                 f"{_busy_detail(raw, exc.code)}") from None
    except (socket.timeout, TimeoutError):
        raise ServiceUnavailable(f"gpucast service at {base} gave no answer within {timeout:g} s") from None
    except URLError as exc:
        raise ServiceUnavailable(f"gpucast service at {base} unreachable ({_reason(exc.reason, timeout)})") from None
    except (HTTPException, OSError) as exc:
        raise ServiceUnavailable(f"gpucast service at {base} unreachable ({_reason(exc, timeout)})") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise ServiceUnavailable(f"gpucast service at {base} answered something that is not JSON") from None


def _read_quietly(exc: HTTPError) -> bytes:
    try:
        return exc.read() or b""
    except (OSError, HTTPException):
        return b""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _detail(raw: bytes, exc: HTTPError) -> str:
    try:
        detail = json.loads(raw).get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail.strip():
        return _one_line(detail)
    return f"HTTP {exc.code} {_one_line(exc.reason or '')}".strip()


def _busy_detail(raw: bytes, code: int) -> str:
    # 408/429 come with the service's reason (a time limit, too many predictions); other
    # statuses (a 5xx, a 404 from something that is not gpucast) only with their number.
    if code not in (408, 429):
        return ""
    try:
        detail = json.loads(raw).get("detail")
    except (ValueError, AttributeError):
        return ""
    return f": {_one_line(detail)}" if isinstance(detail, str) and detail.strip() else ""


def _reason(reason, timeout: float) -> str:
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return _one_line(reason.strerror)
    return _one_line(str(reason) or type(reason).__name__)


# ---------------------------------------------------------------------- ONNX upload
def _onnx_form(job: Job, gpu: str) -> tuple[bytes, str]:
    """The multipart body of ``POST /v1/predict/onnx``: ``file`` and the job's fields."""
    path = job.onnx_path
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise JobError(f"field 'model': cannot read ONNX file {str(path)!r}: "
                       f"{exc.strerror or type(exc).__name__}") from None
    if _digest_of(data) != job.model_digest:
        raise JobError(f"field 'model': ONNX file {str(path)!r} changed since the job was read")
    form = {"batch_size": str(job.batch_size), "gpu": gpu, "precision": job.precision, "mode": job.mode,
            "optimizer": job.optimizer, "input_pipeline_s": repr(float(job.input_pipeline_s)), "gpus": str(job.gpus)}
    if job.seq_len is not None:
        form["seq_len"] = str(job.seq_len)
    if job.input_shape is not None:
        form["input_shape"] = ",".join(str(d) for d in job.input_shape)
    boundary = f"gpucast-{uuid.uuid4().hex}"
    parts = []
    for name, value in form.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    filename = os.path.basename(str(path)).replace('"', "_").replace("\r", "_").replace("\n", "_") or "model.onnx"
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                 f"Content-Type: application/octet-stream\r\n\r\n".encode("utf-8"))
    parts.append(data)
    parts.append(f"\r\n--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]  # as gpucast.job.file_digest


# ---------------------------------------------------------------------- the answer
def _prediction(answer, base: str) -> Prediction:
    """A Prediction from the service's JSON (its ``Prediction.to_dict()``); fields the service
    adds are ignored, a missing one makes the answer unusable."""
    if not isinstance(answer, dict):
        raise ServiceUnavailable(f"gpucast service at {base} answered {type(answer).__name__}, not a prediction")
    kwargs = {}
    for f in fields(Prediction):
        if f.name not in answer:
            if f.name == "notes":
                continue
            raise ServiceUnavailable(f"gpucast service at {base} answered without field {f.name!r} "
                                     f"(another gpucast version?)")
        value = answer[f.name]
        kwargs[f.name] = tuple(value) if f.name in _TUPLES and isinstance(value, list) else value
    try:
        return Prediction(**kwargs)
    except TypeError as exc:  # pragma: no cover - the dataclass has no validation of its own
        raise ServiceUnavailable(f"gpucast service at {base} answered a malformed prediction: {exc}") from None


def _replace_job(pred: Prediction, job: Job) -> Prediction:
    return replace(pred, job=job.to_dict(), job_key=job.key)


__all__ = ["DEFAULT_TIMEOUT_S", "ServiceRefused", "ServiceUnavailable", "check_url", "predict_remote"]
