"""Over real HTTP: a failure inside gpucast is a 500 with one line (logged, not cached), a bad input
stays a 422, a burst of first Hugging Face requests is answered as the same requests one at a
time, and /v1/advise and /v1/pack answer while a long capture runs.

The race case runs ``tests/graph/import_race.py service`` in a fresh interpreter (nothing imported
yet; the interleaving at transformers' import is forced by a hook, see that script). The
failures inside gpucast are made by replacing the Hugging Face builder for one config in this
process, where the session's server runs (gpucast.faults draws the line).
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))

from test_import_race import race  # noqa: E402

# Tiny configs: the first Hugging Face job imports transformers (seconds), the rest are fast.
GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 500, "n_positions": 64,
        "bos_token_id": 0, "eos_token_id": 0}


def _broken_build(monkeypatch, n_embd: int, exc: BaseException, times: int = 1) -> list:
    """Make the Hugging Face builder raise ``exc`` for configs of width ``n_embd``, ``times`` times; the calls."""
    from gpucast.graph import hf

    build, calls = hf._build, []

    def broken(cfg):
        if getattr(cfg, "n_embd", None) == n_embd:
            calls.append(1)
            if len(calls) <= times:
                raise exc
        return build(cfg)

    monkeypatch.setattr(hf, "_build", broken)
    return calls


def test_a_failure_inside_gpucast_is_a_500_logged_and_not_cached(client, monkeypatch, caplog):
    calls = _broken_build(monkeypatch, 48, AttributeError("module 'transformers' has no attribute 'AttentionInterface'"))
    body = {"hf_config": dict(GPT2, n_embd=48), "batch_size": 2, "seq_len": 16, "gpu": "t4"}
    with caplog.at_level(logging.ERROR, logger="gpucast.service"):
        r = client.post("/v1/predict", json=body)
    assert r.status_code == 500, r.text
    detail = r.json()["detail"]
    assert "\n" not in detail and "Traceback" not in detail
    assert "inside gpucast" in detail and "AttributeError" in detail and "not the request's fault" in detail
    logged = [rec for rec in caplog.records if rec.name == "gpucast.service"]
    assert logged and logged[0].exc_info is not None  # the traceback is in the server's log
    again = client.post("/v1/predict", json=body)  # not cached: computed again, and now it works
    assert again.status_code == 200, again.text
    assert len(calls) == 2


def test_a_config_the_model_rejects_is_still_the_clients_422(client):
    # 33 is not divisible by 2 heads: transformers' attention refuses it while the model is built.
    r = client.post("/v1/predict", json={"hf_config": dict(GPT2, n_embd=33), "batch_size": 2, "seq_len": 16,
                                         "gpu": "t4"})
    assert r.status_code == 422, r.text
    assert "building the model failed" in r.json()["detail"]


def test_advise_and_pack_failures_inside_gpucast_are_500s(client, monkeypatch):
    _broken_build(monkeypatch, 40, ImportError("cannot import name 'GPT2Model'"), times=2)
    job = {"hf_config": dict(GPT2, n_embd=40), "batch_size": 2, "seq_len": 16}
    r = client.post("/v1/advise", json={**job, "gpu": ["t4"], "counts": [1], "precisions": ["fp32"]})
    assert r.status_code == 500 and "inside gpucast" in r.json()["detail"], r.text
    r = client.post("/v1/pack", json={"jobs": [job, {"workload": "mlp-small"}], "gpu": "a100-40gb"})
    assert r.status_code == 500 and "inside gpucast" in r.json()["detail"], r.text


def test_advise_and_pack_answer_while_a_long_capture_runs(client, monkeypatch):
    # The capture is held inside its forward pass (after its model was built) until the advice and
    # the packing have been answered: neither waits for it, nor for a lock it holds.
    from gpucast.graph import tracer

    stage, gate, inside = tracer._stage, threading.Event(), threading.Event()

    def held(name, fn, *args):
        if name == "the forward pass" and threading.current_thread().name.startswith("gpucast-predict"):
            inside.set()
            gate.wait(timeout=120)
        return stage(name, fn, *args)

    monkeypatch.setattr(tracer, "_stage", held)
    out = {}
    body = {"hf_config": dict(GPT2, n_embd=56), "batch_size": 2, "seq_len": 16, "gpu": "t4"}
    t = threading.Thread(target=lambda: out.setdefault("r", client.post("/v1/predict", json=body)))
    t.start()
    try:
        assert inside.wait(timeout=120)
        adv = client.post("/v1/advise", json={"workload": "mlp-small", "batch_size": 48, "gpu": ["t4"],
                                              "counts": [1], "precisions": ["fp32"]})
        pack = client.post("/v1/pack", json={"jobs": [{"workload": "mlp-small", "batch_size": 24},
                                                      {"workload": "mlp-small", "batch_size": 40}], "gpu": "a100-40gb"})
        assert "r" not in out  # the capture was still held while both were answered
    finally:
        gate.set()
    t.join(timeout=120)
    assert adv.status_code == 200, adv.text
    assert pack.status_code == 200, pack.text
    assert out["r"].status_code == 200, out["r"].text


def test_two_first_hugging_face_requests_interleaved_at_the_import(tmp_path):
    out = race("service", tmp_path)
    assert out["paused"].startswith("gpucast-predict") and out["other_blocked"], out
    assert [out["job0"][0], out["job1"][0]] == [200, 200], out
    assert out["job0"][1]["job"]["batch_size"] == 4 and out["job1"][1]["job"]["batch_size"] == 8
