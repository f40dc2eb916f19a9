"""Speculative decoding (serve.spec_method / spec_tokens / spec_acceptance): a drafter's tokens verified in
one target step. Expected values from the scheme's arithmetic (tokens a step emits, the budget a decode
takes) and from identities (no speculation when nothing is accepted costs more than none at all), not from
the code's output. A real transformers Llama traced on the meta device."""

from __future__ import annotations

import numpy as np
import pytest

import gpucast
from gpucast.estimate.serving.run import Requests, simulate
from gpucast.estimate.serving.speculative import Speculation, tokens_this_step
from gpucast.job import Job, JobError

LLAMA = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=8192, tie_word_embeddings=False)


def _job(engine="vllm", **serve):
    if engine == "vllm":   # 0.11's synchronous scheduler: this small model's steps would hide behind 0.14's host work
        serve.setdefault("engine_version", "0.11")
    return Job.from_hf_config(LLAMA, batch_size=1, mode="serve", precision="bf16",
                              serve=dict(dict(engine=engine, input_len=512, output_len=128, concurrency=4,
                                              num_requests=16), **serve))


def test_a_step_emits_the_acceptance_on_average_in_whole_tokens():
    gains = [tokens_this_step(2.5, s) for s in range(100)]
    assert set(gains) == {2, 3} and sum(gains) == 250
    assert all(tokens_this_step(1.0, s) == 1 for s in range(10))


def test_the_run_takes_output_over_acceptance_steps_and_k_plus_1_budget_tokens():
    # a toy cost: every iteration 10 ms; 4 requests of 1 prompt token and 41 output tokens
    seen = []

    def cost(ntok, ndec, dctx, ptok, pctx, npre=1):
        seen.append((ntok, ndec))
        return 0.01, 0.01
    req = Requests(np.zeros(4), np.ones(4, dtype=np.int64), np.full(4, 41))
    res = simulate(req, cost, 8, 4096, 10**6, 16, True, "static", spec=Speculation("eagle3", 3, 2.5))
    # the prefill samples the first token; 40 more at 2.5 a step: 16 steps
    assert res.iterations == 1 + 16
    assert all(ntok == 4 * 4 for ntok, ndec in seen[1:])   # 4 decodes x (3 drafts + 1)


def test_speculation_pays_when_accepted_and_costs_when_not():
    plain = gpucast.predict(_job(), "h100").serving["tpot_s"]
    good = gpucast.predict(_job(spec_method="eagle3", spec_tokens=3, spec_acceptance=3.0), "h100").serving["tpot_s"]
    none = gpucast.predict(_job(spec_method="eagle3", spec_tokens=3, spec_acceptance=1.0), "h100").serving["tpot_s"]
    lookup = gpucast.predict(_job(spec_method="ngram", spec_tokens=3, spec_acceptance=1.0), "h100").serving["tpot_s"]
    assert good < plain / 1.5   # three tokens a step for a step a little dearer than one token's
    assert none > plain         # a step's verification and drafts, for one token
    assert plain <= lookup < none   # host-side drafting costs no GPU time, verification still does


@pytest.mark.parametrize("serve, words", [
    (dict(spec_method="eagle3", spec_tokens=2, spec_acceptance=3.5), "between 1 and spec_tokens"),
    (dict(spec_method="eagle3"), "spec_acceptance"),
    (dict(spec_tokens=2), "set serve.spec_method"),
    (dict(spec_method="medusa", spec_acceptance=2.0), "eagle3, mtp, ngram"),
])
def test_bad_speculation_is_one_error_line(serve, words):
    with pytest.raises(JobError, match=words):
        _job(**serve)


def test_speculation_needs_an_engine_with_its_own_scheduler():
    with pytest.raises(JobError, match="speculative decoding"):
        gpucast.predict(_job(engine="hf", concurrency=None, num_requests=None, spec_method="ngram",
                             spec_acceptance=1.5), "h100")


# A small drafter of the target's family (as Llama-3.2-1B drafts for Llama-3.1-8B): the same vocabulary.
DRAFTER = dict(LLAMA, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2)


def _draft(drafter=DRAFTER, **serve):
    return _job(**dict(dict(spec_method="draft", draft_model=drafter, spec_tokens=3), **serve))


def test_a_draft_model_is_a_whole_model_and_dearer_than_a_draft_head():
    # the target itself as its own drafter: every draft pass a whole forward, not one layer's
    self_draft = gpucast.predict(_draft(LLAMA, spec_acceptance=2.5), "h100").serving["tpot_s"]
    head = gpucast.predict(_job(spec_method="eagle3", spec_tokens=3, spec_acceptance=2.5), "h100").serving["tpot_s"]
    assert self_draft > head
    small = gpucast.predict(_draft(spec_acceptance=3.5), "h100").serving["tpot_s"]
    plain = gpucast.predict(_job(), "h100").serving["tpot_s"]
    assert small < plain / 1.5   # 3.5 tokens a step for a step a small drafter makes a little dearer


def test_a_draft_models_weights_and_cache_come_out_of_the_kv_pool():
    plain = gpucast.predict(_job(), "h100").serving
    drafted = gpucast.predict(_draft(spec_acceptance=2.0), "h100").serving
    # the drafter's K/V a token: 2 layers x (K and V) x 2 heads x 64 dims x 2 bytes, beside the target's
    target = 4 * 2 * 4 * 64 * 2
    assert plain["kv_bytes_per_token"] == target
    assert drafted["kv_bytes_per_token"] == target + 2 * 2 * 2 * 64 * 2
    # its weights (embedding, head, 2 layers) at 2 bytes a parameter
    layer = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256   # q and o, k and v (2 of 4 heads), MLP, norms
    params = 2 * 32000 * 256 + 2 * layer + 256
    assert drafted["memory"]["draft_weight_bytes"] == pytest.approx(2 * params, rel=0.01)
    assert drafted["kv_cache_tokens"] < plain["kv_cache_tokens"]


@pytest.mark.parametrize("serve, words", [
    (dict(spec_method="draft", spec_acceptance=2.0), "serve.draft_model"),
    (dict(spec_method="eagle3", spec_acceptance=2.0, draft_model=DRAFTER), "spec_method: draft"),
    (dict(spec_method="draft", spec_acceptance=2.0, draft_model=dict(DRAFTER, vocab_size=50000)), "vocab"),
    (dict(spec_method="draft", spec_acceptance=2.0, draft_model="no-such-architecture"), "no-such-architecture"),
])
def test_a_bad_drafter_is_one_error_line(serve, words):
    with pytest.raises(JobError, match=words) as err:
        gpucast.predict(_job(**serve), "h100")
    assert "\n" not in str(err.value)
