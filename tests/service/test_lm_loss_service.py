"""stack.loss over real HTTP (the session's uvicorn server): the schema takes it, the answer follows
it, a value it does not know is a one-line 422."""

from __future__ import annotations

GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 8000, "n_positions": 256,
        "bos_token_id": 0, "eos_token_id": 0}
BODY = {"hf_config": GPT2, "batch_size": 8, "seq_len": 256, "precision": "bf16", "gpu": "a100-40gb"}


def test_the_loss_is_taken_and_followed(client):
    own = client.post("/v1/predict", json=BODY)
    fused = client.post("/v1/predict", json={**BODY, "stack": {"loss": "fused"}})
    assert own.status_code == 200 and fused.status_code == 200, fused.text
    assert fused.json()["job"]["stack"] == {"loss": "fused"}
    assert fused.json()["memory_allocated_peak_bytes"] < own.json()["memory_allocated_peak_bytes"]


def test_an_unknown_loss_is_a_422(client):
    r = client.post("/v1/predict", json={**BODY, "stack": {"loss": "liger"}})
    assert r.status_code == 422 and "loss" in r.json()["detail"] and "\n" not in r.json()["detail"]
