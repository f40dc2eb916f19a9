"""``POST /v1/admission/mutate`` over real HTTP, with AdmissionReview bodies built from the
kubernetes client's models: the service's cached predictor sizes the pod (the webhook's own
rules are tested in tests/integrations/test_kubernetes.py)."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from conftest import metric

k8s = pytest.importorskip("gpucast.integrations.kubernetes")
client_models = pytest.importorskip("kubernetes.client")


def _review(annotations: dict | None) -> dict:
    m = client_models
    pod = m.V1Pod(api_version="v1", kind="Pod",
                  metadata=m.V1ObjectMeta(name="train", namespace="default", annotations=annotations),
                  spec=m.V1PodSpec(containers=[m.V1Container(
                      name="trainer", image="pytorch/pytorch:latest",
                      resources=m.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]))
    body = m.ApiClient().sanitize_for_serialization(pod)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "operation": "CREATE", "namespace": "default", "object": body}}


def test_annotated_pod_gets_hami_limits_from_the_cached_prediction(client):
    spec = {"model": "mlp-small", "batch_size": 32}
    hits = metric(client, "gpucast_prediction_cache_hits_total")
    review = _review({k8s.JOB_ANNOTATION: json.dumps(spec), k8s.GPU_ANNOTATION: "t4"})
    r = client.post("/v1/admission/mutate", json=review)
    assert r.status_code == 200, r.text
    resp = r.json()["response"]
    assert resp["uid"] == review["request"]["uid"] and resp["allowed"] is True
    patch = json.loads(base64.b64decode(resp["patch"]))
    paths = {op["path"]: op.get("value") for op in patch}
    assert any(p.endswith("nvidia.com~1gpumem") for p in paths)
    assert any(p.endswith("nvidia.com~1gpucores") for p in paths)
    predicted = client.post("/v1/predict", json={"workload": "mlp-small", "batch_size": 32, "gpu": "t4"}).json()
    note = json.loads(paths["/metadata/annotations/gpucast.ai~1prediction"])
    assert json.dumps(predicted["gpu_util_pct"]) in json.dumps(note)
    assert metric(client, "gpucast_prediction_cache_hits_total") >= hits + 2  # the webhook read the cache too


def test_pod_without_the_annotation_passes_unchanged(client):
    r = client.post("/v1/admission/mutate", json=_review({"team": "vision"}))
    assert r.status_code == 200
    resp = r.json()["response"]
    assert resp["allowed"] is True and "patch" not in resp


def test_bad_annotation_is_denied_with_the_reason(client):
    r = client.post("/v1/admission/mutate", json=_review({k8s.JOB_ANNOTATION: json.dumps({"model": "resnet5O"})}))
    assert r.status_code == 200
    resp = r.json()["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    assert "unknown zoo workload 'resnet5O'" in resp["status"]["message"]


def test_a_body_that_is_not_a_review_is_400(client):
    r = client.post("/v1/admission/mutate", json={"kind": "AdmissionReview"})
    assert r.status_code == 400 and "request.uid" in r.json()["detail"]
