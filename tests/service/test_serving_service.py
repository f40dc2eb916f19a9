"""mode 'serve' over real HTTP (the session's uvicorn server): the schema takes the ``serve`` group, the
answer carries ``serving``, and bad input is a one-line 422."""

from __future__ import annotations

LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 2048}
BODY = {"hf_config": LLAMA, "batch_size": 4, "precision": "bf16", "mode": "serve", "gpu": "a100-40gb",
        "serve": {"input_len": 128, "output_len": 16, "engine": "vllm"}}


def test_a_deployment_is_answered_with_its_serving_run(client):
    r = client.post("/v1/predict", json=BODY)
    assert r.status_code == 200, r.text
    s = r.json()["serving"]
    assert s["finished"] == 4 and 0 < s["ttft_s"] < s["latency_s"] and s["kv_cache_tokens"] > 0


def test_bad_serving_input_is_a_one_line_422(client):
    for serve, needle in (({"input_len": -1}, "serve.input_len"), ({"engine": "tgi"}, "serve.engine"),
                          ({"input_len": 2000, "output_len": 100}, "context"), ({"bogus": 1}, "bogus")):
        r = client.post("/v1/predict", json={**BODY, "serve": serve})
        assert r.status_code == 422, (serve, r.text)
        detail = r.json()["detail"]
        text = detail if isinstance(detail, str) else str(detail)
        assert needle in text and "\n" not in text, (serve, text)


def test_a_disaggregated_deployment_over_http(client):
    body = {**BODY, "gpus": 2, "serve": {**BODY["serve"], "prefill_replicas": 1, "concurrency": 4}}
    r = client.post("/v1/predict", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["serving"]["disagg"] == {**r.json()["serving"]["disagg"], "prefill_replicas": 1,
                                             "decode_replicas": 1}
    r = client.post("/v1/predict", json={**body, "gpus": 1})
    assert r.status_code == 422 and "serve.prefill_replicas" in r.text


def test_a_draft_model_over_http(client):
    drafter = {**LLAMA, "num_hidden_layers": 1}
    spec = {"spec_method": "draft", "spec_tokens": 2, "spec_acceptance": 2.0}
    r = client.post("/v1/predict", json={**BODY, "serve": {**BODY["serve"], **spec, "draft_model": drafter}})
    assert r.status_code == 200, r.text
    assert r.json()["serving"]["memory"]["draft_weight_bytes"] > 0
    r = client.post("/v1/predict", json={**BODY, "serve": {**BODY["serve"], **spec,
                                                           "draft_model": {**drafter, "vocab_size": 999}}})
    assert r.status_code == 422 and "vocab_size" in r.text
