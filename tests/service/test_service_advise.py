"""POST /v1/advise over real HTTP (the session's uvicorn server): answers, cache, refusals."""

from __future__ import annotations

import gpucast

REQ = {"workload": "mlp-small", "batch_size": 64, "gpu": ["t4", "a10"], "counts": [1, 2], "precisions": ["fp32"],
       "samples_per_epoch": 64000, "epochs": 3}


def test_advise_answers_what_the_api_answers(client):
    r = client.post("/v1/advise", json=REQ)
    assert r.status_code == 200, r.text
    d = r.json()
    a = gpucast.advise(gpucast.Job("mlp-small", batch_size=64), ["t4", "a10"], counts=[1, 2], precisions=["fp32"],
                       samples_per_epoch=64000,
                       epochs=3, batches=None)
    assert d["recommended_id"] == (a.best.id if a.best else None)
    assert [o["id"] for o in d["options"]] == [o.id for o in a.options]
    assert d["front"] == list(a.front)


def test_a_repeated_advice_is_the_same_bytes_from_the_cache(client):
    first = client.post("/v1/advise", json=dict(REQ, epochs=4))
    again = client.post("/v1/advise", json=dict(REQ, epochs=4))
    assert first.status_code == again.status_code == 200
    assert first.content == again.content


def test_inline_prices_are_used_and_checked(client):
    prices = [{"gpu": "t4", "usd_per_gpu_hour": 0.1, "provider": "gcp", "offer": "spot"},
              {"gpu": "a10", "usd_per_gpu_hour": 9.0}]
    r = client.post("/v1/advise", json=dict(REQ, prices=prices))
    assert r.status_code == 200, r.text
    assert all(o["usd_per_gpu_hour"] == (0.1 if o["gpu"] == "t4" else 9.0) for o in r.json()["options"])
    bad = client.post("/v1/advise", json=dict(REQ, prices=[{"gpu": "a1000", "usd_per_gpu_hour": 1}]))
    assert bad.status_code == 422 and "unknown GPU 'a1000'" in bad.json()["detail"]


def test_advise_refuses_code_paths_and_spec_files(client):
    for body, words in [
        ({"model": "module:train:make_model"}, "'module:' models are code"),
        ({"workload": "mlp-small", "data": {"dataset": "train.py:make"}}, "data.dataset"),
        ({"workload": "mlp-small", "prices": "/etc/prices.yaml"}, "not a packaged price table"),
        ({"workload": "mlp-small", "prices": "cloud-2024.yaml"}, "not a packaged price table"),
        ({"workload": "mlp-small", "gpu": "my-gpu.yaml"}, "spec file"),
        ({"workload": "mlp-small", "batches": list(range(1, 20))}, "over the limit"),
        ({"workload": "mlp-small", "deadline_s": -1}, "deadline must be a positive number"),
        ({"workload": "mlp-small", "gpu": "t4", "counts": [16]}, "one node"),
    ]:
        r = client.post("/v1/advise", json=body)
        assert r.status_code == 422, (body, r.status_code, r.text)
        assert words in r.json()["detail"], (body, r.json())


SERVED = {"hf_config": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
                        "max_position_embeddings": 2048},
          "batch_size": 4, "precision": "bf16", "mode": "serve",
          "serve": {"input_len": 128, "output_len": 16, "request_rate": 4.0, "num_requests": 20}}


def test_a_deployment_is_advised_as_advise_serve_advises_it(client):
    from gpucast.advisor.serving import advise_serving

    body = dict(SERVED, gpu=["a100-40gb", "h100"], tensors=[1, 2], tpot_s=0.05)
    r = client.post("/v1/advise", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    job = gpucast.Job.from_hf_config(SERVED["hf_config"], batch_size=4, precision="bf16", mode="serve",
                                     serve=SERVED["serve"])
    a = advise_serving(job, ["a100-40gb", "h100"], tensors=[1, 2], tpot_s=0.05)
    assert d["best"] == a.best and [(o["gpu"], o["tensor"]) for o in d["options"]] == \
        [(o.gpu, o.tensor) for o in a.options]
    assert d["targets"]["tpot_p90_s"] == 0.05


def test_serving_fields_need_a_deployment_and_stay_bounded(client):
    r = client.post("/v1/advise", json=dict(REQ, ttft_s=1.0))
    assert r.status_code == 422 and "field 'ttft_s' applies to a mode 'serve' job" in r.json()["detail"]
    r = client.post("/v1/advise", json=dict(SERVED, gpu="h100", replicas=10_000))
    assert r.status_code == 422 and "replicas" in r.json()["detail"]
    r = client.post("/v1/advise", json=dict(SERVED, gpu="h100", spec_tokens=list(range(1, 18))))
    assert r.status_code == 422 and "spec_tokens" in r.json()["detail"]
    r = client.post("/v1/advise", json=dict(SERVED, gpu="h100", spec_tokens=[2]))   # the job drafts nothing
    assert r.status_code == 422 and "--spec-tokens" in r.json()["detail"]


def test_draft_counts_and_disaggregated_prefill_degrees_are_searched_over_http(client):
    drafting = dict(SERVED, serve=dict(SERVED["serve"], spec_method="eagle3", spec_tokens=2, spec_acceptance=2.0))
    r = client.post("/v1/advise", json=dict(drafting, gpu="h100", tensors=[1], spec_tokens=[1, 2, 4]))
    assert r.status_code == 200, r.text
    assert [(o["spec"], o["spec_tokens"]) for o in r.json()["options"]] == \
        [("eagle3", 1), ("eagle3", 2), ("eagle3", 4), (None, None)]
    r = client.post("/v1/advise", json=dict(SERVED, gpu="h100", tensors=[1], replicas=2, layouts=["pd"],
                                            prefill_tensors=[2], tpot_s=1e-6))
    assert r.status_code == 200, r.text
    assert {o["layout"] for o in r.json()["options"]} == {"pd"}
