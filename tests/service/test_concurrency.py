"""Concurrency of the prediction cache over real HTTP: a slow capture blocks no cached answer,
identical requests share one computation, and the time and in-flight limits answer 408 and 429.

Where an order matters, the slow side is held open by a gate the test releases (never by how
fast this machine is); the waits for a gate or a metric are bounded and time nothing.
"""

from __future__ import annotations

import threading
import time

from conftest import WARM, metric, serve

from gpucast.service import Settings

# A tiny BERT from its config: the first Hugging Face job imports transformers (seconds).
TINY_BERT = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
             "intermediate_size": 128, "vocab_size": 1000}


def _wait_until(cond, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _post_in_background(server, body: dict):
    """POST /v1/predict from a thread; the thread and a dict that gets r (the response) once answered."""
    out = {}

    def run():
        with server.client() as c:
            out["r"] = c.post("/v1/predict", json=body)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _held(monkeypatch, which):
    """Hold ``Predictor._compute`` for the jobs ``which(job)`` picks until the returned event is set."""
    from gpucast.service.cache import Predictor

    gate = threading.Event()
    compute = Predictor._compute

    def held(self, job, gpu):
        if which(job):
            gate.wait(timeout=120)
        return compute(self, job, gpu)

    monkeypatch.setattr(Predictor, "_compute", held)
    return gate


def test_slow_uncached_request_does_not_block_cached_ones(server, client, monkeypatch):
    # The slow capture is held open by a gate until every cached request has been answered: its
    # slowness is not left to this machine's speed (a warm process captures a tiny BERT in well
    # under a second, and once finished first). If cached answers waited for it, they would be
    # answered only after it, when the gate times out: the slow one would be answered first.
    gate = _held(monkeypatch, lambda job: job.model.startswith("hf:"))
    t, slow = _post_in_background(server, {"hf_config": TINY_BERT, "batch_size": 2, "seq_len": 32, "gpu": "a10"})
    try:
        _wait_until(lambda: metric(client, "gpucast_predictions_in_flight") >= 1)
        cached = [client.post("/v1/predict", json=WARM).status_code for _ in range(20)]
        assert "r" not in slow, "a cached answer waited for the slow capture"
    finally:
        gate.set()
    t.join(timeout=120)
    assert slow["r"].status_code == 200, slow["r"].text
    assert slow["r"].json()["job"]["model"] == "hf:bert"
    assert cached == [200] * 20


def test_identical_concurrent_requests_share_one_prediction(server, client, monkeypatch):
    # The one computation is held open until the three other requests have joined it: that they
    # come while it runs is not left to thread scheduling.
    body = {"workload": "resnet18-cifar", "batch_size": 9, "gpu": "l4"}
    gate = _held(monkeypatch, lambda job: job.batch_size == 9)
    misses = metric(client, "gpucast_prediction_cache_misses_total")
    waits = metric(client, "gpucast_prediction_dedup_waits_total")
    hits = metric(client, "gpucast_prediction_cache_hits_total")
    out = [None] * 4

    def one(i):
        with server.client() as c:
            out[i] = c.post("/v1/predict", json=body)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    _wait_until(lambda: metric(client, "gpucast_prediction_dedup_waits_total") >= waits + 3)
    gate.set()
    for t in threads:
        t.join(timeout=120)
    assert all(r.status_code == 200 for r in out)
    assert all(r.content == out[0].content for r in out)
    assert metric(client, "gpucast_prediction_cache_misses_total") == misses + 1
    assert metric(client, "gpucast_prediction_dedup_waits_total") - waits == 3  # all three joined it
    assert metric(client, "gpucast_prediction_cache_hits_total") == hits


def test_time_limit_is_408_then_the_answer_is_cached_and_pending_limit_is_429(tmp_path, monkeypatch):
    # the first prediction is held open by a gate: it outlasts the 0.05 s limit and is still
    # computing when the second comes, on any machine
    settings = Settings(data_dir=tmp_path, prediction_timeout_s=0.05, max_pending=1)
    first = {"workload": "resnet18-cifar", "batch_size": 11, "gpu": "t4"}
    second = {"workload": "resnet18-cifar", "batch_size": 13, "gpu": "t4"}
    gate = _held(monkeypatch, lambda job: job.batch_size == 11)
    with serve(settings) as s, s.client() as c:
        r = c.post("/v1/predict", json=first)
        assert r.status_code == 408, r.text
        assert "did not finish within 0.05 s" in r.json()["detail"] and "retry" in r.json()["detail"]
        busy = c.post("/v1/predict", json=second)
        assert busy.status_code == 429 and "max_pending" in busy.json()["detail"]
        gate.set()
        _wait_until(lambda: metric(c, "gpucast_predictions_in_flight") == 0)
        done = c.post("/v1/predict", json=first)
        assert done.status_code == 200 and done.json()["job"]["batch_size"] == 11


def test_slow_capture_does_not_hold_up_other_new_predictions(server, client, monkeypatch):
    """Captures run side by side (gpucast.graph.mirror's SDPA routing is per thread): quick new
    jobs are captured and answered while another capture is held open in the middle of its
    forward pass (its recorder and mirror active on its thread) by a gate the test releases; its
    slowness is not left to this machine's speed."""
    from gpucast.graph import tracer
    from gpucast.service.cache import Predictor

    mine, mid, release = threading.local(), threading.Event(), threading.Event()
    compute, dispatch = Predictor._compute, tracer._Recorder.__torch_dispatch__

    def marked(self, job, gpu):  # the slow job's pool thread is marked while it computes
        mine.slow = job.model.startswith("hf:")
        try:
            return compute(self, job, gpu)
        finally:
            mine.slow = False

    def held(self, func, types, args=(), kwargs=None):
        if getattr(mine, "slow", False) and self.phase == "fwd" and not mid.is_set():
            mid.set()
            release.wait(timeout=120)
        return dispatch(self, func, types, args, kwargs)

    monkeypatch.setattr(Predictor, "_compute", marked)
    monkeypatch.setattr(tracer._Recorder, "__torch_dispatch__", held)
    # a small Llama never traced before (SDPA attention), held at its first forward op
    llama = {"model_type": "llama", "num_hidden_layers": 3, "hidden_size": 96, "intermediate_size": 192,
             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000}
    t, slow = _post_in_background(server, {"hf_config": llama, "batch_size": 1, "seq_len": 32, "gpu": "h100"})
    try:
        assert mid.wait(timeout=120), "the slow capture never reached its forward pass"
        quick = []
        for bs in (17, 19, 23):  # never predicted before: each is a capture of its own
            quick.append(client.post("/v1/predict", json={"workload": "mlp-small", "batch_size": bs, "gpu": "l4"}))
        assert "r" not in slow, "the slow capture was not held"
    finally:
        release.set()
    t.join(timeout=180)
    assert slow["r"].status_code == 200, slow["r"].text
    assert slow["r"].json()["job"]["model"] == "hf:llama"
    assert all(r.status_code == 200 and r.json()["job"]["batch_size"] == bs for r, bs in zip(quick, (17, 19, 23)))
