"""The HTTP service: ``create_app(settings) -> FastAPI``, a thin shell over ``gpucast.api``.

Routes: ``POST /v1/predict`` (a job spec as JSON), ``POST /v1/predict/onnx`` (an uploaded ONNX
file and form fields), ``POST /v1/advise`` (cost-benefit advice, :mod:`gpucast.service.advise`), ``POST /v1/pack`` (several
jobs on one GPU in every sharing mode, :mod:`gpucast.service.pack`), ``POST /v1/place`` (the simulator's placement rule on a live cluster's
state), ``POST /v1/admission/mutate`` (the Kubernetes/HAMi webhook of
``gpucast.integrations.kubernetes``, mounted when that module is importable), ``GET /v1/gpus``,
``GET /v1/zoo``, ``GET /healthz``, ``GET /metrics`` (Prometheus), and the OpenAPI schema at
``/openapi.json`` with its docs at ``/docs``.

Every refusal is a 4xx with ``{"detail": "<one line>"}``: the limits are in
:mod:`gpucast.service.limits`, what a job spec may hold in :mod:`gpucast.service.jobs`, the
cache, its de-duplication and time limit in :mod:`gpucast.service.cache`. A 5xx means a fault in
gpucast or a library it builds models with (:mod:`gpucast.faults` draws the line), never bad input:
one line, logged with its traceback, not cached.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from typing import Any, Optional, Union

import anyio
from fastapi import Body, FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from gpucast.version import __version__
from gpucast.job import JobError
from gpucast.service import schemas
from gpucast.service.advise import Advisor
from gpucast.service.cache import Predictor, ServiceError
from gpucast.service.fastpath import SCOPE_KEY, CachedAnswers
from gpucast.service.jobs import gpu_names, job_from_spec, refuse_code
from gpucast.service.limits import BodyLimit, Settings
from gpucast.service.metrics import Metrics, RequestMetrics
from gpucast.service.pack import Packer
from gpucast.service.place import place as _place
from gpucast.service.uploads import check_and_keep, save_upload

JSON = "application/json"


class ErrorOut(BaseModel):
    detail: str


def _errors(*codes: int) -> dict:
    return {c: {"model": ErrorOut} for c in codes}


def _validation_detail(exc: RequestValidationError) -> str:
    errs = exc.errors()
    if not errs:
        return "invalid request"
    e = errs[0]
    if e.get("type") == "json_invalid":
        why = (e.get("ctx") or {}).get("error", "")
        return " ".join(f"body is not valid JSON: {why}".split()).rstrip(": ")
    loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")]
    where = f"field '{'.'.join(loc)}': " if loc else ""
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return " ".join(f"{where}{e.get('msg', 'invalid')}{more}".split())


def _admission_module():
    try:
        from gpucast.integrations import kubernetes
    except ImportError:
        return None
    return kubernetes if callable(getattr(kubernetes, "mutate", None)) else None


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    predictor = Predictor(settings, metrics)
    advisor = Advisor(settings, metrics)
    packer = Packer(settings, metrics)
    static: dict[str, bytes] = {}

    @asynccontextmanager
    async def lifespan(app):
        app.state.loop = asyncio.get_running_loop()
        yield
        predictor.close()
        advisor.close()
        packer.close()

    app = FastAPI(title="gpucast", version=__version__, lifespan=lifespan,
                  description="Predicts a deep-learning job's GPU utilization, peak memory and step time from its "
                              "graph, without a GPU; places jobs on shared GPUs with the simulator's policies.")
    app.state.settings, app.state.metrics, app.state.predictor = settings, metrics, predictor
    app.add_middleware(CachedAnswers, predictor=predictor, metrics=metrics)
    app.add_middleware(BodyLimit, settings=settings)
    app.add_middleware(RequestMetrics, metrics=metrics)

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    @app.exception_handler(JobError)
    async def _job_error(request: Request, exc: JobError):
        return JSONResponse({"detail": " ".join(str(exc).split())}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return JSONResponse({"detail": _validation_detail(exc)}, status_code=422)

    async def answer(job, gpus: list[str], as_list: bool, request: Request | None = None) -> Response:
        entries = await predictor.get_many([(job, g) for g in gpus])
        if request is not None:  # the fast path answers these bytes from the cache next time
            request.scope[SCOPE_KEY] = (tuple((job.key, g) for g in gpus), as_list)
        body = b"[" + b",".join(e.body for e in entries) + b"]" if as_list else entries[0].body
        return Response(body, media_type=JSON)

    # ------------------------------------------------------------------ predictions
    @app.post("/v1/predict", response_model=None, tags=["predict"],
              responses={200: {"model": Union[schemas.Prediction, list[schemas.Prediction]],
                               "description": "The prediction; a list of them when `gpu` is a list."},
                         **_errors(408, 413, 422, 429)})
    async def predict(req: schemas.PredictRequest, request: Request) -> Response:
        """Predict a job (zoo workload or Hugging Face config) on one GPU type or several."""
        spec = req.model_dump()
        gpus = gpu_names(spec.pop("gpu"), settings)
        job = job_from_spec(spec, settings)
        return await answer(job, gpus, not isinstance(req.gpu, str), request)

    @app.post("/v1/predict/onnx", response_model=None, tags=["predict"],
              responses={200: {"model": Union[schemas.Prediction, list[schemas.Prediction]],
                               "description": "The prediction; a list of them when several `gpu` fields are sent."},
                         **_errors(408, 413, 415, 422, 429)})
    async def predict_onnx(file: UploadFile = File(..., description="An ONNX model (.onnx); never a pickle."),
                           batch_size: int = Form(32), gpu: list[str] = Form(["a100-80gb"]),
                           seq_len: Optional[int] = Form(None),
                           input_shape: Optional[str] = Form(None, description="Per-sample shape, e.g. 3,224,224."),
                           precision: schemas.Precision = Form("fp32"), mode: schemas.Mode = Form("train"),
                           optimizer: schemas.Optimizer = Form("sgd"), input_pipeline_s: float = Form(0.0),
                           gpus: int = Form(1),
                           data: Optional[str] = Form(None, description='The loader as a JSON object, e.g. '
                                                                        '{"source": "images", "num_workers": 8}.'),
                           loop: Optional[str] = Form(None, description='The loop habits as a JSON object.'),
                           stack: Optional[str] = Form(None, description='The stack as a JSON object.')) -> Response:
        """Predict an uploaded ONNX model (multipart: `file` plus the job's fields as form fields;
        `data`, `loop` and `stack` as JSON objects)."""
        from gpucast.job import Job, JobError

        surroundings = {}
        for name, text in (("data", data), ("loop", loop), ("stack", stack)):
            if text:
                try:
                    surroundings[name] = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise JobError(f"field {name!r}: not a JSON object ({exc.msg})") from None
        refuse_code(surroundings.get("data"))
        names = gpu_names(gpu, settings)
        tmp, head, digest = await save_upload(file, settings)
        path = await anyio.to_thread.run_sync(check_and_keep, tmp, head, digest, file.filename, settings)
        fields = dict(batch_size=batch_size, seq_len=seq_len, input_shape=input_shape or None, precision=precision,
                      mode=mode, optimizer=optimizer, input_pipeline_s=input_pipeline_s, gpus=gpus, **surroundings)
        job = await anyio.to_thread.run_sync(lambda: Job.from_onnx(path, **fields))
        return await answer(job, names, len(gpu) > 1)

    @app.post("/v1/advise", response_model=None, tags=["advise"],
              responses={200: {"description": "The advice: every option tried, the Pareto front (indices), the "
                                              "recommended option and its message (gpucast.advisor.Advice)."},
                         **_errors(408, 413, 422, 429)})
    async def advise(req: schemas.AdviseRequest) -> Response:
        """Which GPU type, how many, what batch size and precision, and whether to share: time and cost per epoch."""
        return Response(await advisor.answer(req.model_dump()), media_type=JSON)

    @app.post("/v1/pack", response_model=None, tags=["advise"],
              responses={200: {"description": "Every arrangement of the jobs on the GPU (time-slicing, HAMi core "
                                              "limits, MPS, MPS replicas, the best MIG layout) with each job's "
                                              "slowdown, the best one and why (gpucast.advisor.pack.Packing)."},
                         **_errors(408, 413, 422, 429)})
    async def pack(req: schemas.PackRequest) -> Response:
        """Several one-GPU jobs on one GPU: which sharing mode or MIG layout keeps the most of their speed."""
        return Response(await packer.answer(req.model_dump()), media_type=JSON)

    @app.post("/v1/place", response_model=schemas.PlaceResponse, tags=["place"], responses=_errors(408, 413, 422, 429))
    async def place(req: schemas.PlaceRequest):
        """Where a simulator policy would put a new job on these GPUs, and the slowdowns it expects."""
        return await _place(req.model_dump(), predictor, settings)

    # ------------------------------------------------------------------ Kubernetes webhook
    k8s = _admission_module()
    if k8s is not None:
        def predict_fn(job_spec: dict, gpu: str):
            """For ``kubernetes.mutate``, from a worker thread: a Prediction through the cache."""
            try:
                spec = dict(job_spec)
                spec.pop("gpu", None)
                if isinstance(spec.get("hf_config"), str):
                    spec["hf_config"] = json.loads(spec["hf_config"])
                if spec.get("hf_config") is not None and str(spec.get("model", "")).startswith("hf:"):
                    spec.pop("model")
                job = job_from_spec(schemas.JobSpec.model_validate(spec).model_dump(), settings)
                return predictor.get_blocking(job, gpu_names(gpu, settings)[0], app.state.loop)
            except ServiceError as exc:
                if exc.status == 408:
                    raise TimeoutError(exc.detail) from None
                if exc.status >= 500:  # gpucast's fault, not the pod's: the webhook answers 500
                    raise RuntimeError(exc.detail) from None
                raise JobError(exc.detail) from None
            except ValueError as exc:  # pydantic's ValidationError and bad JSON are ValueErrors
                raise JobError(" ".join(str(exc).split())) from None

        @app.post("/v1/admission/mutate", tags=["kubernetes"], responses=_errors(400, 413, 422))
        async def admission_mutate(review: dict[str, Any] = Body(
                description="An AdmissionReview (admission.k8s.io/v1) request; the pod's "
                            f"`{getattr(k8s, 'JOB_ANNOTATION', 'gpucast.ai/job')}` annotation holds the job spec "
                            "as JSON.")) -> dict:
            """Kubernetes mutating admission webhook: HAMi GPU-share limits from the pod's predicted job."""
            try:
                return await anyio.to_thread.run_sync(k8s.mutate, review, predict_fn)
            except ValueError as exc:  # not an AdmissionReview (no request.uid): nothing to answer to
                raise ServiceError(400, " ".join(str(exc).split())) from None

    # ------------------------------------------------------------------ catalogs, health, metrics
    def cached_json(name: str, make) -> Response:
        if name not in static:
            static[name] = json.dumps(make(), separators=(",", ":")).encode()
        return Response(static[name], media_type=JSON)

    @app.get("/v1/gpus", response_model=list[schemas.GpuInfo], tags=["catalog"])
    async def gpus(mig: bool = False):
        """The GPU catalog (names to use as `gpu`); `?mig=true`: the MIG slices of its MIG-capable
        GPUs instead, named `GPU:PROFILE` (e.g. `a100-40gb:1g.5gb`), also accepted as `gpu`."""
        from gpucast.hardware import catalog, get_gpu

        keys = schemas.GpuInfo.model_fields
        if mig:
            from gpucast import mig as mig_

            return cached_json("gpus-mig", lambda: [
                {k: getattr(s, k) for k in keys} for s in
                (get_gpu(p.full_name) for g in mig_.capable() for p in mig_.profiles(g))])
        return cached_json("gpus", lambda: [{k: getattr(s, k) for k in keys} for s in catalog().values()])

    @app.get("/v1/zoo", response_model=list[schemas.ZooEntry], tags=["catalog"])
    async def zoo():
        """The zoo's workloads (names to use as `workload`)."""
        from gpucast.zoo import workloads

        return cached_json("zoo", lambda: [{"name": w.name, "family": w.family, "source": w.source,
                                            "description": w.description, "default_batch_size": w.default_batch_size,
                                            "default_input": w.default_input, "data": w.data.to_dict(),
                                            "loop": w.loop.to_dict(), "script": w.script} for w in workloads()])

    @app.get("/healthz", response_model=schemas.Health, tags=["service"])
    async def healthz():
        """Liveness, versions, cache size and the limits in force."""
        from gpucast.api import model_version

        return {"status": "ok", "version": __version__, "model_version": model_version(settings.environment),
                "cache_entries": len(predictor._lru), "predictions_in_flight": len(predictor._inflight),
                "limits": {r["limit"]: r["value"] for r in settings.table()}}

    @app.get("/metrics", tags=["service"], response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}})
    async def prometheus():
        """Prometheus metrics (see gpucast.service.metrics)."""
        return Response(metrics.render(), media_type=metrics.content_type)

    app.state.paths = frozenset(getattr(r, "path", None) for r in app.routes)
    return app
