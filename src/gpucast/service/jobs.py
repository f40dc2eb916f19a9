"""Request specs to :class:`~gpucast.job.Job` and GPU names: what the service refuses, and why.

Refused with 422 and one line: models that are code (``module:...``), data that is code
(``data.dataset``, ``data.collate``, ``data.environment``: ``FILE.py:FUNCTION`` factories that only
the CLI and the Python API measure, on the user's machine) or files on the server
(``onnx:...``: upload the file instead), Hugging Face configs given as names or paths (send the
config's content), configs over ``max_hf_config_bytes``, GPU spec files (``*.yaml``/``*.json``:
only catalog names), and whatever :class:`~gpucast.job.Job` refuses (its message).
"""

from __future__ import annotations

from gpucast.job import Job, JobError, canonical_json
from gpucast.surroundings import CODE_FIELDS
from gpucast.service.cache import ServiceError
from gpucast.service.limits import Settings

_JOB_FIELDS = ("batch_size", "seq_len", "input_shape", "precision", "mode", "optimizer", "input_pipeline_s", "gpus",
               "data", "loop", "stack", "parallel", "adapter", "serve")


# What each of surroundings.CODE_FIELDS names, for the refusal's message.
_CODE_WHY = {"dataset": "a dataset factory", "collate": "a collate function", "environment": "an environment factory"}


def refuse_code(data) -> None:
    """JobError (422) when a job's ``data`` (a mapping or a Data) names code to run."""
    if data is None:
        return
    get = data.get if isinstance(data, dict) else (lambda k: getattr(data, k, None))
    for name in CODE_FIELDS:
        what = _CODE_WHY[name]
        if get(name) is not None:
            flag = "--environment" if name == "environment" else "--dataset"
            raise JobError(f"field 'data.{name}': {what} is code, which this service never accepts; measure it "
                           f"where it runs (`gpucast predict {flag} FILE.py:FUNCTION`) and send the measured "
                           f"'data.per_sample_s' and 'data.sample_bytes' instead")


def job_from_spec(spec: dict, settings: Settings) -> Job:
    """A validated Job from a JobSpec's fields (a dict); ServiceError(422) otherwise."""
    try:
        return _job(spec, settings)
    except JobError as exc:
        raise ServiceError(422, " ".join(str(exc).split())) from None


def _job(spec: dict, settings: Settings) -> Job:
    fields = {k: spec[k] for k in _JOB_FIELDS if spec.get(k) is not None}
    for k in ("data", "loop", "stack", "parallel", "adapter", "serve"):  # sub-models arrive as dicts, unset fields None
        if isinstance(fields.get(k), dict):
            fields[k] = {f: v for f, v in fields[k].items() if v is not None}
    refuse_code(fields.get("data"))
    workload, model, hf = spec.get("workload"), spec.get("model"), spec.get("hf_config")
    if workload is not None and model is not None and workload != model:
        raise JobError("give the zoo name once: 'workload' or its alias 'model', not both")
    name = workload if workload is not None else model
    if name is not None and hf is not None:
        raise JobError("give one model source: 'workload' or 'hf_config', not both")
    if hf is not None:
        text = canonical_json(hf)
        if len(text) > settings.max_hf_config_bytes:
            raise JobError(f"field 'hf_config' is {len(text)} bytes of JSON, over the limit of "
                           f"{settings.max_hf_config_bytes} (max_hf_config_bytes)")
        return Job.from_hf_config(dict(hf), **fields)
    if name is None:
        raise JobError("field 'workload' is required (a zoo name, see GET /v1/zoo), or give 'hf_config'")
    if name.startswith("module:"):
        raise JobError("field 'model': 'module:' models are code, which this service never accepts; "
                       "export the model to ONNX and upload it to POST /v1/predict/onnx")
    if name.startswith("onnx:"):
        raise JobError("field 'model': 'onnx:' paths name files on the server; upload the file to "
                       "POST /v1/predict/onnx instead")
    if name.startswith("hf:"):
        raise JobError("field 'model': give a Hugging Face model as 'hf_config' (the config.json's content)")
    return Job.from_dict({"model": name, **fields})


def gpu_name(name: str) -> str:
    """The catalog name of ``name`` (case, ``_`` and NVML names tolerated); ServiceError(422)
    for unknown names and for spec files, which the service never opens."""
    from gpucast.hardware import get_gpu

    if not isinstance(name, str) or not name.strip():
        raise ServiceError(422, "field 'gpu' must be a GPU name (see GET /v1/gpus)")
    if name.strip().lower().endswith((".yaml", ".yml", ".json")) or "/" in name or "\\" in name:
        raise ServiceError(422, f"field 'gpu': {name!r} looks like a spec file; the service takes catalog "
                                f"names only (see GET /v1/gpus)")
    try:
        return get_gpu(name).name
    except (KeyError, ValueError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        msg = " ".join(str(msg).split()).replace("; or pass a .yaml/.json spec file)", ")")
        raise ServiceError(422, f"field 'gpu': {msg}") from None


def gpu_names(value, settings: Settings) -> list[str]:
    names = [value] if isinstance(value, str) else list(value)
    if not names:
        raise ServiceError(422, "field 'gpu': give at least one GPU name")
    if len(names) > settings.max_gpus_per_request:
        raise ServiceError(422, f"field 'gpu': {len(names)} GPU types, over the limit of "
                                f"{settings.max_gpus_per_request} per request (max_gpus_per_request)")
    return [gpu_name(n) for n in names]
