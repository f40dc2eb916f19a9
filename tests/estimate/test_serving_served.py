"""A served model is resolved once (gpucast.estimate.serving.served): one prediction enters the graph's
serving module (gpucast.graph.serving) once per question and traced shape, whatever asks.

Counted at the module's door: its functions are wrapped, so a second entry with the same arguments shows,
from the deployment's memory, the iteration model's grids, a draft model or the training-style figures.
A real transformers Llama, of a size no other test uses (so every answer is computed here, not remembered)."""

from __future__ import annotations

from collections import Counter

import gpucast
import gpucast.graph.serving as graph_serving
from gpucast.job import Job

LLAMA = dict(model_type="llama", hidden_size=320, intermediate_size=864, num_hidden_layers=3, num_attention_heads=5,
             num_key_value_heads=5, vocab_size=3001, max_position_embeddings=4096)
DOORS = ("trace_iteration", "model_shape", "kv_bytes_per_token", "state_bytes_per_sequence")


def _counted(monkeypatch) -> Counter:
    seen: Counter = Counter()
    for name in DOORS:
        inner = getattr(graph_serving, name)

        def door(job, *args, _name=name, _inner=inner):
            seen[(_name, job.key, args)] += 1
            return _inner(job, *args)
        monkeypatch.setattr(graph_serving, name, door)
    return seen


def test_one_prediction_enters_the_graph_once_per_question(monkeypatch):
    seen = _counted(monkeypatch)
    drafter = dict(LLAMA, num_hidden_layers=1)
    job = Job.from_hf_config(LLAMA, batch_size=4, precision="bf16", mode="serve", gpus=2,
                             serve=dict(input_len=700, output_len=40, request_rate=6.0, num_requests=40,
                                        prefill_replicas=1, spec_method="draft", draft_model=drafter,
                                        spec_tokens=2, spec_acceptance=1.8))
    s = gpucast.predict(job, "h100").serving
    assert s["finished"] == s["requests"] == 40
    traced = {k for k in seen if k[0] == "trace_iteration"}
    assert len(traced) >= 5                                    # the iteration model's grid, at least
    assert {k[0] for k in seen} >= {"trace_iteration", "model_shape", "kv_bytes_per_token"}
    again = {k: n for k, n in seen.items() if n > 1}
    assert not again, again
