"""MIG slices through the HTTP service (real uvicorn, tests/service/conftest.py): listed by
GET /v1/gpus?mig=true, accepted as `gpu`, and a bad profile is a 422 naming the closest one."""

from __future__ import annotations

import gpucast
from gpucast import Job, mig


def test_the_slices_are_listed_and_predicted_like_any_gpu(client):
    listed = client.get("/v1/gpus", params={"mig": "true"}).json()
    assert [g["name"] for g in listed] == [p.full_name for g in mig.capable() for p in mig.profiles(g)]
    assert {g["name"]: g["sm_count"] for g in listed}["a100-40gb:1g.5gb"] == 14
    r = client.post("/v1/predict", json={"workload": "mlp-small", "batch_size": 32, "gpu": ["A100-40GB:1g.5gb", "a100-40gb"]})
    assert r.status_code == 200, r.text
    got = r.json()
    assert [p["gpu"] for p in got] == ["a100-40gb:1g.5gb", "a100-40gb"]
    assert got[0] == gpucast.predict(Job("mlp-small", batch_size=32), "a100-40gb:1g.5gb").to_dict()


def test_a_bad_profile_is_a_422_with_the_closest_name(client):
    r = client.post("/v1/predict", json={"workload": "mlp-small", "batch_size": 32, "gpu": "a100-40gb:1g.6gb"})
    assert r.status_code == 422
    assert "did you mean a100-40gb:1g.5gb?" in r.text
