"""The service refuses jobs whose data is code (data.dataset, data.collate, data.environment), as it
refuses ``module:`` models: 422 with one line, on every endpoint that takes a job spec, over real
HTTP; nothing of the user's is imported and gpucast.probe is never loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import serve

from gpucast import Job
from gpucast.service import Settings
from gpucast.service.cache import Predictor
from gpucast.service.metrics import Metrics

CODE = [("dataset", {"dataset": "/tmp/evil.py:make"}),
        ("collate", {"collate": "/tmp/evil.py:c"}),
        ("environment", {"environment": "/tmp/evil.py:env"})]


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """A served app of its own, not warmed: a refusal must not need torch or a prediction."""
    with serve(Settings(data_dir=tmp_path_factory.mktemp("refuse-data"))) as running:
        with running.client(timeout=30) as c:
            yield c


def _refused(r, field: str):
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert f"field 'data.{field}'" in detail and "never accepts" in detail
    return detail


@pytest.mark.parametrize("field, data", CODE, ids=[c[0] for c in CODE])
def test_predict_refuses_data_that_is_code(bare, field, data):
    detail = _refused(bare.post("/v1/predict", json={"workload": "mlp-small", "data": data}), field)
    assert "per_sample_s" in detail  # what to send instead


@pytest.mark.parametrize("field, data", CODE, ids=[c[0] for c in CODE])
def test_place_refuses_it_for_the_new_job_and_the_running_ones(bare, field, data):
    code_job = {"workload": "mlp-small", "data": data}
    _refused(bare.post("/v1/place", json={"gpus": [{"gpu_type": "t4"}], "job": code_job}), field)
    _refused(bare.post("/v1/place", json={"gpus": [{"gpu_type": "t4", "jobs": [code_job]}],
                                          "job": {"workload": "mlp-small"}}), field)


def test_onnx_upload_refuses_it_in_the_data_form_field(bare):
    r = bare.post("/v1/predict/onnx", files={"file": ("m.onnx", b"not read")},
                  data={"data": json.dumps({"dataset": "/tmp/evil.py:make"})})
    _refused(r, "dataset")


def test_admission_webhook_denies_it(bare):
    k8s = pytest.importorskip("gpucast.integrations.kubernetes")
    pytest.importorskip("kubernetes.client")
    from test_admission import _review

    spec = {"model": "mlp-small", "data": {"environment": "/tmp/evil.py:env"}}
    r = bare.post("/v1/admission/mutate", json=_review({k8s.JOB_ANNOTATION: json.dumps(spec)}))
    assert r.status_code == 200
    resp = r.json()["response"]
    assert resp["allowed"] is False and "never accepts" in json.dumps(resp)


def test_the_predictor_itself_never_runs_it():
    """Whatever path a job took, the service's predictor answers 422 without calling the API."""
    job = Job("mlp-small", data={"dataset": "/tmp/evil.py:make"})
    entry = Predictor(Settings(data_dir="unused"), Metrics())._compute(job, "t4")
    assert entry.error is not None and entry.error.status == 422 and "never accepts" in entry.error.detail


def test_the_service_never_loads_the_probe():
    code = """
import sys
from fastapi.testclient import TestClient
from gpucast.service import Settings, create_app
with TestClient(create_app(Settings(data_dir="unused"))) as c:
    r = c.post("/v1/predict", json={"workload": "mlp-small", "data": {"dataset": "/tmp/evil.py:make"}})
    assert r.status_code == 422, r.text
sys.exit(1 if any(m.startswith("gpucast.probe") or m.startswith("gpucast_user_") for m in sys.modules) else 0)
"""
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
