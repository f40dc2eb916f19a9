"""Kubernetes with HAMi: a mutating admission webhook that sizes a pod's GPU share.

:func:`mutate` takes an ``AdmissionReview`` (``admission.k8s.io/v1``) request body as a dict and
returns the ``AdmissionReview`` response dict. It is pure and framework-free: the HTTP service
(``gpucast serve``) mounts it and injects its cached predictor as ``predict_fn``.

What a pod asks for
    ``metadata.annotations["gpucast.ai/job"]``: a JSON job spec, e.g.
    ``{"model": "resnet50", "batch_size": 64}`` (the fields of :class:`gpucast.job.Job`).
    ``metadata.annotations["gpucast.ai/gpu"]``: the GPU type the node pool has, a catalog name
    (``gpucast gpus``); default ``a100-80gb``. File paths are refused in both (an ``onnx:`` model
    or a GPU spec file would be read on the webhook's machine, not the user's).

What the webhook writes (a JSON patch, RFC 6902, base64 in ``response.patch``)
    The share comes from :func:`gpucast.integrations.resources.gpu_share` (the one rule), spelled
    in HAMi's resource names (HAMi docs, "GPU Partitioning with HAMi",
    https://project-hami.io/tutorials/labs/gpu-partitioning: ``nvidia.com/gpu`` = number of
    vGPUs, ``nvidia.com/gpumem`` = memory per vGPU in MiB, ``nvidia.com/gpumem-percentage`` =
    memory per vGPU as a percentage of the card, ``nvidia.com/gpucores`` = compute per vGPU as a
    percentage of the card):

    * a shared job: ``nvidia.com/gpumem`` = ceil(share.memory_bytes / MiB) and
      ``nvidia.com/gpucores`` = share x 100;
    * an exclusive job: ``nvidia.com/gpucores: 100`` and ``nvidia.com/gpumem-percentage: 100``
      (the whole card, whatever memory the node's card reports; a MiB count from the catalog
      could exceed what HAMi registered for the real card and leave the pod unschedulable);
    * ``nvidia.com/gpu`` = the job's ``gpus`` if the container does not set it (HAMi applies
      gpumem and gpucores to each of them, as gpucast's share is per GPU);
    * a job whose parallel plan spans nodes (``GpuShare.whole_nodes``) runs as one pod per node
      (the workers of a PyTorchJob, JobSet or LeaderWorkerSet, each carrying the same job
      annotation): each pod gets whole GPUs (the exclusive limits above, never gpumem/gpucores
      fractions) and ``nvidia.com/gpu`` = the plan's GPUs per node, set even where the container
      asks for another count (with a warning); annotations ``gpucast.ai/nodes`` (how many such
      pods the job needs) and ``gpucast.ai/gpus-per-node``. :func:`node_pods` spells the whole
      set of pod resources for a caller that builds the pods itself. A plan inside one node is
      one exclusive pod of its ``gpus`` GPUs (also set over another count, with a warning);
    * the other of gpumem / gpumem-percentage is removed, so the two never conflict;
    * a pod annotated with a MIG slice (``gpucast.ai/gpu: a100-80gb:1g.10gb``, :mod:`gpucast.mig`)
      gets the device plugin's resource of that slice, ``nvidia.com/mig-1g.10gb: 1`` (its "mixed"
      strategy's names), and loses ``nvidia.com/gpu`` and HAMi's keys: the slice is its whole
      device. A job on more than one GPU is denied (400): slices have no peer access;
    * a pod annotated ``gpucast.ai/sharing: mps | timeslice | runai`` (default ``hami``: the limits
      above) gets its cluster's sharing mode's requests instead of HAMi's
      (:mod:`gpucast.integrations.k8s_sharing`): MPS replicas with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``
      and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` in the container's environment, time-slicing
      replicas, or Run:ai's ``gpu-fraction`` pod annotation; an unknown mode is denied (400);
    * annotations ``gpucast.ai/prediction`` (JSON: utilization, its interval, peak memory, its
      interval, step time, its interval, the share) and ``gpucast.ai/model-version``.

    Limits go to ``resources.limits`` (Kubernetes takes extended resources there; requests
    default to limits). Where the container also lists the same key in ``resources.requests``,
    it is set to the same value (extended resources must have requests equal to limits).

Which containers
    Every container (``spec.containers``, not init containers) that asks for ``nvidia.com/gpu``
    in its limits or requests; if none does, the first container. Each gets the same share: the
    annotation describes one job.

Outcomes
    * No ``gpucast.ai/job`` annotation, not a Pod, or not a CREATE: allowed, no patch (the pod
      passes unchanged).
    * A bad annotation (not JSON, not an object, an unknown model, field or GPU, a graph that
      cannot be captured): **denied**, ``status.code`` 400 and a one-line message. The pod asked
      to be sized by gpucast; admitting it without limits would let it take a whole shared GPU
      unnoticed, so it is refused with the reason, and the user fixes the annotation.
    * The predictor failing for another reason: denied with code 500 and the message.
    * A job predicted not to fit in the GPU's memory: admitted exclusive, with a ``warnings``
      entry saying so (kubectl prints it).

A request body without ``request.uid`` cannot be answered: :func:`mutate` raises ``ValueError``
(the HTTP layer answers 400).
"""

from __future__ import annotations

import base64
import json
import math
from typing import Callable

from gpucast.integrations import k8s_sharing
from gpucast.integrations.resources import GpuShare, gpu_share

JOB_ANNOTATION = "gpucast.ai/job"
GPU_ANNOTATION = "gpucast.ai/gpu"
PREDICTION_ANNOTATION = "gpucast.ai/prediction"
MODEL_VERSION_ANNOTATION = "gpucast.ai/model-version"
NODES_ANNOTATION = "gpucast.ai/nodes"
GPUS_PER_NODE_ANNOTATION = "gpucast.ai/gpus-per-node"
DEFAULT_GPU = "a100-80gb"

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PCT = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
MIB = 2**20


class AnnotationError(ValueError):
    """The pod's gpucast annotations cannot be read (a 400)."""


def escape(token: str) -> str:
    """A JSON-pointer reference token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def hami_limits(share: GpuShare) -> dict[str, str]:
    """HAMi's per-vGPU resources for a share (quantities as strings, as Kubernetes writes them)."""
    if share.exclusive:
        return {GPUCORES: "100", GPUMEM_PCT: "100"}
    return {GPUCORES: str(int(round(share.share * 100))), GPUMEM: str(math.ceil(share.memory_bytes / MIB))}


def pod_gpus(share: GpuShare) -> int:
    """``nvidia.com/gpu`` of one pod: the plan's GPUs per node for a plan across nodes (one pod
    per node), else the job's ``gpus``."""
    return share.gpus_per_node if share.whole_nodes else share.gpus


def node_pods(prediction_or_share) -> list[dict]:
    """The container resources of every pod the job needs, one per node: ``[{"limits": {...}}]``
    (``nvidia.com/gpu`` and HAMi's keys, as the webhook writes them; the last pod of a plan whose
    ``gpus`` is not a multiple of its GPUs per node asks for the rest)."""
    share = prediction_or_share if isinstance(prediction_or_share, GpuShare) else gpu_share(prediction_or_share)
    return [{"limits": {GPU: str(n), **hami_limits(share)}} for n in share.node_gpus()]


def prediction_annotation(prediction, share: GpuShare) -> str:
    """The ``gpucast.ai/prediction`` value: compact JSON of the numbers the limits came from."""
    return json.dumps({
        "gpu": prediction.gpu,
        "gpu_util_pct": prediction.gpu_util_pct,
        "gpu_util_interval": list(prediction.gpu_util_interval),
        "memory_peak_bytes": prediction.memory_peak_bytes,
        "memory_interval": list(prediction.memory_interval),
        "step_time_s": prediction.step_time_s,
        "step_time_interval": list(getattr(prediction, "step_time_interval", ()) or ()),
        "fits_in_memory": prediction.fits_in_memory,
        "share": share.share,
        "exclusive": share.exclusive,
        "memory_bytes": share.memory_bytes,
        "nodes": share.nodes,
        "whole_nodes": share.whole_nodes,
    }, sort_keys=True, separators=(",", ":"))


def _one_line(exc: BaseException) -> str:
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    msg = " ".join(str(msg).split())
    return msg or type(exc).__name__


def read_annotations(annotations: dict) -> tuple[dict, str]:
    """The job spec and GPU name a pod asks for; raises :class:`AnnotationError`."""
    from gpucast.hardware import get_gpu

    raw = annotations[JOB_ANNOTATION]
    try:
        spec = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise AnnotationError(f"annotation {JOB_ANNOTATION} is not valid JSON: {_one_line(exc)}") from None
    if not isinstance(spec, dict):
        raise AnnotationError(f"annotation {JOB_ANNOTATION} must be a JSON object of job fields, "
                              f"got {type(spec).__name__}")
    model = str(spec.get("model", ""))
    if model.startswith(("onnx:", "module:")) or "/" in model:
        raise AnnotationError(f"annotation {JOB_ANNOTATION}: model {model!r} names a file or code; use a zoo "
                              f"workload or an inline hf_config")
    gpu = annotations.get(GPU_ANNOTATION) or DEFAULT_GPU
    if not isinstance(gpu, str) or "/" in gpu or "\\" in gpu or gpu.lower().endswith((".yaml", ".yml", ".json")):
        raise AnnotationError(f"annotation {GPU_ANNOTATION} must be a GPU name (see `gpucast gpus`), got {gpu!r}")
    try:
        gpu = get_gpu(gpu).name
    except KeyError as exc:
        raise AnnotationError(f"annotation {GPU_ANNOTATION}: {_one_line(exc)}") from None
    return spec, gpu


def _is_bad_input(exc: BaseException) -> bool:
    from gpucast.faults import is_input_error

    return is_input_error(exc)


def _asks_for_gpu(container: dict) -> bool:
    res = container.get("resources") or {}
    return any(k == GPU or k.startswith("nvidia.com/mig-") for part in ("limits", "requests")
               for k in (res.get(part) or {}))


def mig_resource(gpu: str) -> str | None:
    """The NVIDIA device plugin's resource of a MIG slice name (``a100-80gb:1g.10gb`` ->
    ``nvidia.com/mig-1g.10gb``, the "mixed" strategy's names); None for a whole GPU."""
    if ":" not in gpu:
        return None
    from gpucast import mig

    return mig.profile(*mig.split(gpu)).resource_name


def _in_mode(share: GpuShare, slice_resource: str | None, sharing: str) -> bool:
    """Whether the share is spelled in a sharing mode other than HAMi's (not for a MIG slice, which
    has its own resource, nor for a planned gang, which gets whole GPUs)."""
    return slice_resource is None and sharing != "hami" and not share.planned


def container_patch(index: int, container: dict, share: GpuShare,
                    slice_resource: str | None = None, sharing: str = "hami") -> tuple[list[dict], list[str]]:
    """JSON-patch operations that write ``share`` into container ``index``, and warnings.
    ``slice_resource``: the pod runs on a MIG slice (:func:`mig_resource`): one of it, and no
    ``nvidia.com/gpu`` or HAMi limits (the slice is the job's whole device). ``sharing``: the
    cluster's sharing mode (:mod:`gpucast.integrations.k8s_sharing`; HAMi's limits by default)."""
    base = f"/spec/containers/{index}/resources"
    res = container.get("resources")
    limits = dict((res or {}).get("limits") or {})
    requests = (res or {}).get("requests")
    want = hami_limits(share)
    warnings = []
    gpus = limits.get(GPU, (requests or {}).get(GPU))
    if _in_mode(share, slice_resource, sharing):
        spelled = k8s_sharing.spell(share, sharing, int(gpus) if gpus is not None else share.gpus)
        ops = _write(base, res, limits, requests, spelled.limits, spelled.drop)
        return ops + k8s_sharing.env_ops(index, container, spelled.env), spelled.warnings
    if slice_resource is not None:
        want = {slice_resource: "1"}
        if gpus is not None and str(gpus) != "1":
            warnings.append(f"container {container.get('name')!r} asks for {gpus} {GPU}; a MIG slice is one "
                            f"device: set {slice_resource} = 1 instead")
    elif share.planned:
        want[GPU] = str(pod_gpus(share))     # the plan's GPUs (one pod per node across nodes)
        if gpus is not None and str(gpus) != want[GPU]:
            where = f"on each of {share.nodes} nodes" if share.whole_nodes else "on one node"
            warnings.append(f"container {container.get('name')!r} asks for {gpus} {GPU} but the job's plan runs "
                            f"{want[GPU]} GPUs {where}; set to {want[GPU]}")
    elif gpus is None:
        want[GPU] = str(share.gpus)
    elif str(gpus) != str(share.gpus):
        warnings.append(f"container {container.get('name')!r} asks for {gpus} {GPU} but the job spec has "
                        f"gpus={share.gpus}; gpucast's share is per GPU and applies to each of them")
        if GPU not in limits:
            want[GPU] = str(gpus)  # requests-only: mirror it into limits
    if slice_resource is not None:
        drop = [GPU, GPUMEM, GPUMEM_PCT, GPUCORES]
    else:
        drop = [GPUMEM_PCT] if GPUMEM in want else [GPUMEM]

    return _write(base, res, limits, requests, want, drop), warnings


def _write(base, res, limits, requests, want, drop) -> list[dict]:
    """Set ``want`` in the container's limits (and matching requests), remove ``drop``."""
    ops: list[dict] = []
    if res is None:
        ops.append({"op": "add", "path": base, "value": {"limits": want}})
    elif "limits" not in res or res["limits"] is None:
        ops.append({"op": "add", "path": f"{base}/limits", "value": want})
    else:
        for key, value in want.items():
            ops.append({"op": "add", "path": f"{base}/limits/{escape(key)}", "value": value})  # add replaces
        for key in drop:
            if key in limits:
                ops.append({"op": "remove", "path": f"{base}/limits/{escape(key)}"})
    if requests:
        for key, value in want.items():
            if key in requests and str(requests[key]) != value:
                ops.append({"op": "replace", "path": f"{base}/requests/{escape(key)}", "value": value})
        for key in drop:
            if key in requests:
                ops.append({"op": "remove", "path": f"{base}/requests/{escape(key)}"})
    return ops


def _response(uid: str, allowed: bool, *, patch: list | None = None, code: int | None = None,
              message: str | None = None, warnings: list[str] | None = None) -> dict:
    response: dict = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")
    if code is not None:
        response["status"] = {"code": code, "message": message or "", "reason": "BadRequest" if code == 400 else
                              "InternalError"}
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def mutate(review: dict, predict_fn: Callable | None = None) -> dict:
    """Answer an AdmissionReview v1 request (see the module docstring)."""
    request = review.get("request") if isinstance(review, dict) else None
    if not isinstance(request, dict) or not request.get("uid"):
        raise ValueError("not an AdmissionReview request: request.uid is missing")
    uid = request["uid"]
    pod = request.get("object")
    kind = (request.get("kind") or {}).get("kind", "Pod")
    if kind != "Pod" or not isinstance(pod, dict) or request.get("operation", "CREATE") != "CREATE":
        return _response(uid, True)
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if JOB_ANNOTATION not in annotations:
        return _response(uid, True)
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return _response(uid, False, code=400, message="gpucast: the pod has no containers to size")

    try:
        spec, gpu = read_annotations(annotations)
        sharing = k8s_sharing.parse(annotations.get(k8s_sharing.SHARING_ANNOTATION))
    except (AnnotationError, ValueError) as exc:
        return _response(uid, False, code=400, message=f"gpucast: {exc}")
    if predict_fn is None:
        from gpucast.api import predict as predict_fn
    try:
        prediction = predict_fn(spec, gpu)
        share = gpu_share(prediction)
    except Exception as exc:  # noqa: BLE001 - the webhook must answer, with the reason
        code = 400 if _is_bad_input(exc) else 500
        where = f"annotation {JOB_ANNOTATION}: " if code == 400 else "prediction failed: "
        return _response(uid, False, code=code, message=f"gpucast: {where}{_one_line(exc)}")

    slice_resource = mig_resource(gpu)
    if slice_resource is not None and (share.gpus > 1 or share.planned):
        return _response(uid, False, code=400, message=f"gpucast: annotation {GPU_ANNOTATION}: {gpu} is a MIG slice, "
                         f"one device per pod, but the job runs on {share.gpus} GPUs (data parallel runs span whole "
                         f"GPUs: slices have no peer access)")
    ops: list[dict] = []
    warnings: list[str] = []
    targets = [i for i, c in enumerate(containers) if _asks_for_gpu(c)] or [0]
    for i in targets:
        c_ops, c_warn = container_patch(i, containers[i], share, slice_resource, sharing)
        ops += c_ops
        warnings += c_warn
    notes = {PREDICTION_ANNOTATION: prediction_annotation(prediction, share),
             MODEL_VERSION_ANNOTATION: prediction.model_version}
    if share.whole_nodes:
        notes.update({NODES_ANNOTATION: str(share.nodes), GPUS_PER_NODE_ANNOTATION: str(pod_gpus(share))})
    if _in_mode(share, slice_resource, sharing):
        # pod-level requests of the mode (Run:ai's gpu-fraction), once per pod
        spelled = k8s_sharing.spell(share, sharing, share.gpus)
        notes.update(spelled.annotations)
        if k8s_sharing.RUNAI_FRACTION in spelled.annotations and \
                (pod.get("spec") or {}).get("schedulerName") != k8s_sharing.RUNAI_SCHEDULER:
            warnings.append(f"gpucast: {k8s_sharing.RUNAI_FRACTION} is read by Run:ai's scheduler: set "
                            f"spec.schedulerName: {k8s_sharing.RUNAI_SCHEDULER}")
    # The job annotation is there, so /metadata/annotations exists; "add" replaces a stale value.
    ops += [{"op": "add", "path": f"/metadata/annotations/{escape(k)}", "value": v} for k, v in notes.items()]
    if not prediction.fits_in_memory:
        warnings.append(f"gpucast: predicted peak memory {prediction.memory_peak_bytes / 2**30:.1f} GiB does not "
                        f"fit in one {gpu}; the pod gets whole GPUs and may still run out of memory")
    return _response(uid, True, patch=ops, warnings=warnings)
