"""Every endpoint over real HTTP: answers, refusals (4xx with one line), caching, placement."""

from __future__ import annotations

import pickle

import pytest
from conftest import WARM, metric
from onnx_files import mlp_onnx_bytes

import gpucast
from gpucast.cluster import GpuOccupancy, choose_gpu, make_policy, timeshare
from gpucast.cluster.truth import Observation
from gpucast.hardware import catalog, get_gpu
from gpucast.job import Job
from gpucast.zoo import names

PREDICTION_FIELDS = {"job", "job_key", "gpu", "gpu_util_pct", "gpu_util_interval", "memory_peak_bytes",
                     "memory_interval", "step_time_s", "step_time_interval", "gpu_busy_s", "host_time_s", "flops",
                     "bytes", "kernels", "ops", "parameters", "memory_allocated_peak_bytes", "fits_in_memory",
                     "bottleneck", "bottleneck_reason", "op_coverage", "time_coverage", "uncosted_ops",
                     "model_version", "samples_per_s", "notes", "surroundings", "loader_time_s", "util_basis",
                     "interval_basis", "gpu_idle_gaps", "gpu_held_pct", "gpu_held_interval", "gpu_syncs", "plan",
                     "serving"}


# ------------------------------------------------------------------------------ catalogs, health, docs

def test_healthz_reports_versions_and_limits(client, server):
    r = client.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["model_version"].startswith("analytic-")
    assert body["limits"]["max_onnx_bytes"] == server.settings.max_onnx_bytes
    assert body["limits"]["prediction_timeout_s"] == 60


def test_gpus_and_zoo_list_the_catalogs(client):
    gpus = client.get("/v1/gpus").json()
    assert [g["name"] for g in gpus] == list(catalog())
    assert gpus[0]["memory_bytes"] == catalog()[gpus[0]["name"]].memory_bytes
    zoo = client.get("/v1/zoo").json()
    assert [w["name"] for w in zoo] == names()
    assert {"name", "family", "description", "default_batch_size", "data", "loop", "script"} <= set(zoo[0])
    assert {w["name"]: w["data"]["source"] for w in zoo}["resnet50"] == "images"


def test_predict_takes_the_jobs_loader_loop_and_stack(client):
    body = {"workload": "mlp-small", "batch_size": 32, "gpu": "t4", "data": {"source": "memory", "num_workers": 2},
            "loop": {"item_calls": 3}, "stack": {"torch": "1.13", "cpu_speed": 0.5}}
    r = client.post("/v1/predict", json=body)
    assert r.status_code == 200, r.text
    direct = gpucast.predict(Job("mlp-small", batch_size=32, data={"source": "memory", "num_workers": 2},
                                 loop={"item_calls": 3}, stack={"torch": "1.13", "cpu_speed": 0.5}), "t4").to_dict()
    assert r.json() == direct
    assert direct["surroundings"]["stack"]["torch"] == "1.13"


def test_openapi_and_docs_are_served(client):
    spec = client.get("/openapi.json").json()
    assert {"/v1/predict", "/v1/predict/onnx", "/v1/place", "/v1/gpus", "/v1/zoo", "/healthz",
            "/metrics"} <= set(spec["paths"])
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# ------------------------------------------------------------------------------ /v1/predict

def test_predict_answers_the_prediction_of_the_python_api(client):
    r = client.post("/v1/predict", json=WARM)
    assert r.status_code == 200
    body = r.json()
    assert set(body) == PREDICTION_FIELDS
    direct = gpucast.predict(Job("mlp-small", batch_size=32), "t4").to_dict()
    assert body == direct


def test_predict_several_gpu_types_answers_a_list_in_order(client):
    # inputs on the GPU and a batch large enough for the GPU to set the pace (mlp-small's typical
    # MNIST loader, one worker, or its host dispatch at batch 32 would set both GPUs' pace)
    r = client.post("/v1/predict", json={"workload": "mlp-small", "batch_size": 4096, "gpu": ["T4", "h100"],
                                         "precision": "amp-fp16", "optimizer": "adam", "mode": "train",
                                         "data": {"source": "device"}})
    assert r.status_code == 200
    body = r.json()
    assert [p["gpu"] for p in body] == ["t4", "h100"]
    assert all(p["job"]["precision"] == "amp-fp16" and p["job"]["optimizer"] == "adam" for p in body)
    assert body[1]["step_time_s"] < body[0]["step_time_s"]


def test_model_is_an_alias_of_workload(client):
    a = client.post("/v1/predict", json=WARM).json()
    b = client.post("/v1/predict", json={"model": "mlp-small", "batch_size": 32, "gpu": "t4"}).json()
    assert a == b


@pytest.mark.parametrize("body, status, words", [
    ({"workload": "resnet5O", "batch_size": 8}, 422, "unknown zoo workload 'resnet5O'"),
    ({"workload": "mlp-small", "gpu": "a100-90gb"}, 422, "unknown GPU 'a100-90gb'"),
    ({"workload": "mlp-small", "gpu": "/etc/gpu.yaml"}, 422, "catalog names only"),
    ({"workload": "mlp-small", "batch_size": 0}, 422, "field 'batch_size' must be an integer between 1"),
    ({"workload": "mlp-small", "batch_size": "64"}, 422, "field 'batch_size'"),
    ({"workload": "mlp-small", "precision": "fp64"}, 422, "field 'precision'"),
    ({"workload": "mlp-small", "seq_len": -3}, 422, "field 'seq_len'"),
    ({"model": "module:os:system", "batch_size": 8}, 422, "never accepts"),
    ({"model": "onnx:/etc/passwd", "batch_size": 8}, 422, "upload the file"),
    ({"workload": "mlp-small", "code": "print(1)"}, 422, "field 'code': Extra inputs are not permitted"),
    ({"batch_size": 8}, 422, "field 'workload' is required"),
    ({"workload": "mlp-small", "hf_config": {"model_type": "bert"}}, 422, "one model source"),
    ({"hf_config": {"hidden_size": 8}}, 422, "no 'model_type'"),
    ({"hf_config": {"model_type": "not-a-model"}}, 422, "unknown Hugging Face architecture"),
    ({"workload": "mlp-small", "gpu": []}, 422, "at least one GPU"),
    ({"workload": "mlp-small", "gpu": ["t4"] * 17}, 422, "max_gpus_per_request"),
    ({"workload": "mlp-small", "data": {"num_workers": -2}}, 422, "field 'data.num_workers'"),
    ({"workload": "mlp-small", "data": {"source": "custom"}}, 422, "field 'data.per_sample_s' is required"),
    ({"workload": "mlp-small", "data": {"workers": 2}}, 422, "Extra inputs are not permitted"),
    ({"workload": "mlp-small", "stack": {"torch": "two"}}, 422, "field 'stack.torch'"),
])
def test_bad_input_is_a_4xx_with_one_line(client, body, status, words):
    r = client.post("/v1/predict", json=body)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert words in detail


def test_bad_json_and_wrong_types_are_422(client):
    r = client.post("/v1/predict", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("body is not valid JSON")
    r = client.post("/v1/predict", json=[1, 2])
    assert r.status_code == 422 and isinstance(r.json()["detail"], str)


def test_too_large_body_is_413(client, server):
    big = {"workload": "mlp-small", "hf_config": {"model_type": "bert", "pad": "x" * server.settings.max_json_bytes}}
    r = client.post("/v1/predict", json=big)
    assert r.status_code == 413
    assert "over the limit of 256 KiB" in r.json()["detail"]
    assert metric(client, "gpucast_http_requests_total", route="/v1/predict", status="413") >= 1


def test_too_large_chunked_body_is_413(client, server):
    def chunks():
        for _ in range(server.settings.max_json_bytes // 65536 + 2):
            yield b" " * 65536

    r = client.post("/v1/predict", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "over the limit" in r.json()["detail"]


def test_hf_config_over_its_own_limit_is_422(tmp_path):
    from conftest import serve

    from gpucast.service import Settings

    with serve(Settings(data_dir=tmp_path, max_hf_config_bytes=64)) as s, s.client() as c:
        r = c.post("/v1/predict", json={"hf_config": {"model_type": "bert", "note": "x" * 100}})
        assert r.status_code == 422 and "max_hf_config_bytes" in r.json()["detail"]


ENV_FILE = """gpucast_environment: 1
gpucast_version: 0.1.0
label: lab
base: default
constants: {host_time_factor: 2.0, gpu_kernel_factors: {t4: 1.5}}
intervals: {step_time_s: {level: 0.8, log_halfwidth: 0.2, rows: 12}}
"""


def test_a_service_with_an_environment_answers_with_it_and_says_so(tmp_path):
    from conftest import serve

    from gpucast.learn.artifacts import load_environment
    from gpucast.service import Settings

    (tmp_path / "env.yaml").write_text(ENV_FILE)
    env, _ = load_environment(tmp_path / "env.yaml")
    with serve(Settings(data_dir=tmp_path, environment=env)) as s, s.client() as c:
        assert c.get("/healthz").json()["model_version"].endswith("+env." + env.label)
        r = c.post("/v1/predict", json=WARM)
        assert r.status_code == 200, r.text
    body = r.json()
    assert body == gpucast.predict(Job("mlp-small", batch_size=32), "t4", env=env).to_dict()
    plain = gpucast.predict(Job("mlp-small", batch_size=32), "t4")
    assert body["step_time_s"] > plain.step_time_s and body["model_version"] != plain.model_version
    assert body["interval_basis"].startswith("split-conformal 80% for step time from 12 held-out rows")


def test_cache_hits_are_counted_in_metrics(client):
    hits = metric(client, "gpucast_prediction_cache_hits_total")
    misses = metric(client, "gpucast_prediction_cache_misses_total")
    for _ in range(3):
        assert client.post("/v1/predict", json=WARM).status_code == 200
    assert metric(client, "gpucast_prediction_cache_hits_total") == hits + 3
    assert metric(client, "gpucast_prediction_cache_misses_total") == misses
    assert metric(client, "gpucast_http_requests_total", route="/v1/predict", method="POST", status="200") >= 3
    assert metric(client, "gpucast_predictions_in_flight") == 0


def test_failed_capture_is_a_422_and_cached(client):
    body = {"workload": "resnet18-cifar", "batch_size": 4, "input_shape": [5], "gpu": "t4"}
    r = client.post("/v1/predict", json=body)
    assert r.status_code == 422 and "the forward pass failed" in r.json()["detail"]
    misses = metric(client, "gpucast_prediction_cache_misses_total")
    again = client.post("/v1/predict", json=body)
    assert again.status_code == 422 and again.json() == r.json()
    assert metric(client, "gpucast_prediction_cache_misses_total") == misses  # not captured twice


# ------------------------------------------------------------------------------ /v1/predict/onnx

def test_onnx_upload_is_kept_by_content_and_cached(client, server):
    data = mlp_onnx_bytes()
    misses = metric(client, "gpucast_prediction_cache_misses_total")
    r1 = client.post("/v1/predict/onnx", files={"file": ("mlp.onnx", data)},
                     data={"batch_size": "16", "gpu": "t4", "mode": "infer"})
    assert r1.status_code == 200, r1.text
    p = r1.json()
    assert p["gpu"] == "t4" and p["job"]["mode"] == "infer" and p["parameters"] == 64 * 32 + 64 + 10 * 64 + 10
    stored = list((server.settings.data_dir / "onnx").glob("*.onnx"))
    assert len(stored) == 1 and stored[0].read_bytes() == data
    r2 = client.post("/v1/predict/onnx", files={"file": ("renamed.onnx", data)},
                     data={"batch_size": "16", "gpu": ["t4", "a10"], "mode": "infer"})
    assert r2.status_code == 200
    assert [q["gpu"] for q in r2.json()] == ["t4", "a10"] and r2.json()[0] == p
    assert metric(client, "gpucast_prediction_cache_misses_total") == misses + 2  # t4 once, a10 once
    assert len(list((server.settings.data_dir / "onnx").iterdir())) == 1  # no temporary files left


def test_pickle_upload_is_refused_with_the_readers_reason(client, server):
    for name, data in (("model.pt", pickle.dumps({"w": [1.0]})), ("model.onnx", pickle.dumps([1])),
                       ("weights.bin", b"\x00" * 64), ("ckpt.onnx", b"PK\x03\x04zipped")):
        r = client.post("/v1/predict/onnx", files={"file": (name, data)}, data={"batch_size": "4"})
        assert r.status_code == 415, (name, r.text)
        assert "unpickling runs arbitrary code" in r.json()["detail"]
    assert not list((server.settings.data_dir / "onnx").glob("*.tmp"))


def test_corrupt_and_truncated_onnx_are_422(client):
    good = mlp_onnx_bytes()
    for data in (b"not an onnx model at all", good[: len(good) // 2]):
        r = client.post("/v1/predict/onnx", files={"file": ("m.onnx", data)}, data={"batch_size": "4"})
        assert r.status_code == 422, r.text
        assert "'m.onnx' is not a valid ONNX model" in r.json()["detail"]


def test_onnx_upload_over_the_limit_is_413(client, server):
    data = b"\x08" * (server.settings.max_onnx_bytes + 1)
    r = client.post("/v1/predict/onnx", files={"file": ("big.onnx", data)}, data={"batch_size": "4"})
    assert r.status_code == 413 and "max_onnx_bytes" in r.json()["detail"]


def test_onnx_form_fields_are_validated(client):
    r = client.post("/v1/predict/onnx", files={"file": ("m.onnx", mlp_onnx_bytes())},
                    data={"batch_size": "0"})
    assert r.status_code == 422 and "batch_size" in r.json()["detail"]
    r = client.post("/v1/predict/onnx", data={"batch_size": "4"})
    assert r.status_code == 422 and "file" in r.json()["detail"]
    r = client.post("/v1/predict/onnx", files={"file": ("m.onnx", mlp_onnx_bytes())},
                    data={"batch_size": "4", "data": "{not json"})
    assert r.status_code == 422 and "field 'data'" in r.json()["detail"]
    r = client.post("/v1/predict/onnx", files={"file": ("m.onnx", mlp_onnx_bytes())},
                    data={"batch_size": "4", "loop": '{"spin": 3}'})
    assert r.status_code == 422 and "loop.spin" in r.json()["detail"]


def test_onnx_upload_takes_the_jobs_loader_loop_and_stack(client):
    r = client.post("/v1/predict/onnx", files={"file": ("m.onnx", mlp_onnx_bytes())},
                    data={"batch_size": "8", "gpu": "t4", "data": '{"source": "memory", "num_workers": 2}',
                          "loop": '{"item_calls": 3}', "stack": '{"cpu_speed": 0.5}'})
    assert r.status_code == 200, r.text
    sur = r.json()["surroundings"]
    assert (sur["data"]["source"], sur["data"]["num_workers"], sur["loop"]["item_calls"], sur["stack"]["cpu_speed"]) \
        == ("memory", 2, 3, 0.5)


# ------------------------------------------------------------------------------ /v1/place

def _obs(job: Job, gpu: str) -> Observation:
    return Observation.from_prediction(gpucast.predict(job, gpu), job)


def test_place_answers_what_choose_gpu_answers(client):
    small = {"workload": "mlp-small", "batch_size": 32}
    body = {"gpus": [{"gpu_type": "t4", "jobs": [small]}, {"gpu_type": "t4", "jobs": [small, small]},
                     {"gpu_type": "h100", "jobs": [small]}, {"gpu_type": "t4", "jobs": []}],
            "job": small, "policy": "gpucast"}
    r = client.post("/v1/place", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    j = Job("mlp-small", batch_size=32)
    state = [GpuOccupancy(0, "t4", get_gpu("t4").memory_bytes, jobs=(_obs(j, "t4"),)),
             GpuOccupancy(1, "t4", get_gpu("t4").memory_bytes, jobs=(_obs(j, "t4"),) * 2),
             GpuOccupancy(2, "h100", get_gpu("h100").memory_bytes, jobs=(_obs(j, "h100"),)),
             GpuOccupancy(3, "t4", get_gpu("t4").memory_bytes)]    # an empty GPU: some answer exists
    with timeshare.predicting_with(timeshare.CURRENT):     # gpucast's model, as the service predicts
        index, slowdowns = choose_gpu(make_policy("gpucast"), state, {"t4": _obs(j, "t4"), "h100": _obs(j, "h100")})
    assert got["gpu"] == index and got["gpu"] is not None
    assert got["predicted_slowdowns"] == pytest.approx(slowdowns)
    assert got["gpu_type"] == state[index].gpu_type and got["reason"] is None
    assert len(got["occupants"]) == len(state[index].jobs) + 1


def test_place_predicts_exclusive_slices_on_a_data_center_gpu(client):
    """Two busy jobs on an H100: the service's slowdowns are gpucast's model there (their kernels
    together hold at most the GPU), not the RTX 3090 fit's, which lets them do more."""
    big = {"workload": "resnet50", "batch_size": 64}
    r = client.post("/v1/place", json={"gpus": [{"gpu_type": "h100", "jobs": [big]}], "job": big, "policy": "gpucast"})
    assert r.status_code == 200, r.text
    o = _obs(Job("resnet50", batch_size=64), "h100")
    tl = o.timeline(upper=True)
    capped = timeshare.slowdowns([tl, tl], timeshare.CURRENT.on("h100"))
    fitted = timeshare.slowdowns([tl, tl], timeshare.MEASURED_PAIRS)
    assert capped[0] > fitted[0]
    # together they would keep 2 / 1.96 of one job's speed (our H200's saturated pairs: 0.92): below
    # the 0.2 margin of exclusive slices, so the service says no; the RTX 3090 fit would share
    assert 2.0 / capped[0] - 1.0 < 0.2
    assert r.json()["gpu"] is None and "sharing that does not pay" in r.json()["reason"]
    state = [GpuOccupancy(0, "h100", get_gpu("h100").memory_bytes, jobs=(o,))]
    assert choose_gpu(make_policy("gpucast"), state, {"h100": o})[0] == 0     # the measured-pairs world's answer


def test_place_reads_each_gpus_sharing_mode(client):
    """A GPU of MPS replicas costs a job alone its SM limit and holds at most N jobs: the answer is
    choose_gpu's with each GPU's mode, and differs from the one with every GPU time-sliced."""
    big = {"workload": "resnet50", "batch_size": 64}
    body = {"gpus": [{"gpu_type": "a100-80gb", "sharing": "mps:4"}, {"gpu_type": "a100-80gb", "sharing": "timeslice"}],
            "job": big, "policy": "gpucast"}
    r = client.post("/v1/place", json=body)
    assert r.status_code == 200, r.text
    j = Job("resnet50", batch_size=64)
    o = _obs(j, "a100-80gb")
    mem = get_gpu("a100-80gb").memory_bytes
    state = [GpuOccupancy(0, "a100-80gb", mem, mode="mps:4"), GpuOccupancy(1, "a100-80gb", mem, mode="timeslice")]
    index, slowdowns = choose_gpu(make_policy("gpucast"), state, {"a100-80gb": o})
    assert r.json()["gpu"] == index == 1       # alone under a quarter of the SMs would cost it
    assert make_policy("gpucast").score(state[0], o) > 0.0
    plain = client.post("/v1/place", json={**body, "gpus": [{"gpu_type": "a100-80gb"}] * 2}).json()
    assert plain["gpu"] == 0
    small = {"workload": "mlp-small", "batch_size": 32}
    full = client.post("/v1/place", json={"gpus": [{"gpu_type": "t4", "sharing": "mps:2", "jobs": [small, small]}],
                                          "job": small, "policy": "gpucast"}).json()
    assert full["gpu"] is None and "fewer on MPS replicas" in full["reason"]


def test_place_with_nothing_free_is_200_with_a_reason(client):
    small = {"workload": "mlp-small", "batch_size": 32}
    r = client.post("/v1/place", json={"gpus": [{"gpu_type": "t4", "jobs": [small]}], "job": small,
                                       "policy": "slot"})
    assert r.status_code == 200
    assert r.json()["gpu"] is None and "maximum of 1 job" in r.json()["reason"]


@pytest.mark.parametrize("body, words", [
    ({"gpus": [], "job": {"workload": "mlp-small"}}, "at least one GPU"),
    ({"gpus": [{"gpu_type": "t4"}], "job": {"workload": "mlp-small"}, "policy": "best"}, "unknown policy 'best'"),
    ({"gpus": [{"gpu_type": "t5"}], "job": {"workload": "mlp-small"}}, "unknown GPU 't5'"),
    ({"gpus": [{"gpu_type": "t4", "jobs": [{"workload": "nope"}]}], "job": {"workload": "mlp-small"}},
     "unknown zoo workload 'nope'"),
    ({"gpus": [{"gpu_type": "t4"}], "job": {"model": "module:evil:f"}}, "never accepts"),
    ({"gpus": [{"gpu_type": "t4"}]}, "field 'job': Field required"),
    ({"gpus": [{"gpu_type": "t4", "sharing": "mig"}], "job": {"workload": "mlp-small"}},
     "field 'gpus[0].sharing': unknown sharing mode 'mig' (timeslice, mps, mps:N)"),
    ({"gpus": [{"gpu_type": "t4", "sharing": "mps:0"}], "job": {"workload": "mlp-small"}},
     "MPS replicas must be a whole number of at least 1"),
])
def test_place_refusals(client, body, words):
    r = client.post("/v1/place", json=body)
    assert r.status_code == 422, r.text
    assert words in r.json()["detail"]


# ------------------------------------------------------------------------------ unknown routes

def test_unknown_route_and_method_are_4xx(client):
    assert client.get("/v2/nothing").status_code == 404
    assert client.get("/v1/predict").status_code == 405
