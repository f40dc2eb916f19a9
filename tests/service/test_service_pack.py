"""POST /v1/pack over real HTTP (the session's uvicorn server): the answer gpucast.pack gives, the
cache, one-line 422 refusals."""

from __future__ import annotations

import gpucast

REQ = {"jobs": [{"workload": "mlp-small"}, {"workload": "resnet18", "batch_size": 64}], "gpu": "a100-40gb"}


def test_pack_answers_what_the_api_answers(client):
    r = client.post("/v1/pack", json=REQ)
    assert r.status_code == 200, r.text
    d = r.json()
    p = gpucast.pack([gpucast.Job("mlp-small"), gpucast.Job("resnet18", batch_size=64)], "a100-40gb")
    assert d == p.to_dict()
    again = client.post("/v1/pack", json=REQ)
    assert again.status_code == 200 and again.content == r.content


def test_pack_refuses_with_one_line(client):
    for body, words in [
        ({"jobs": [{"workload": "mlp-small"}]}, "pack takes 2 to 7 jobs, got 1"),
        ({"jobs": [{"workload": "mlp-small"}] * 50}, "pack takes 2 to 7 jobs, got 50"),
        ({"jobs": [{"workload": "mlp-small"}] * 2, "gpu": "a100-80gb:3g.40gb"}, "is a MIG slice"),
        ({"jobs": [{"workload": "mlp-small"}] * 2, "gpu": "my-gpu.yaml"}, "spec file"),
        ({"jobs": [{"model": "module:train:make_model"}, {"workload": "mlp-small"}]}, "'module:' models are code"),
        ({"jobs": [{"workload": "mlp-small", "gpus": 2}, {"workload": "mlp-small"}]}, "pack places one-GPU jobs"),
    ]:
        r = client.post("/v1/pack", json=body)
        assert r.status_code == 422, (body, r.status_code, r.text)
        detail = r.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and words in detail, (body, detail)
    bad = client.post("/v1/pack", json={"jobs": "mlp-small"})
    assert bad.status_code == 422
