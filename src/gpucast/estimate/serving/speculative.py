"""Speculative decoding: a drafter proposes ``k`` tokens, the target model verifies them in one step.

``serve.spec_method`` (vLLM's ``--speculative-config``, SGLang's ``--speculative-algorithm``,
TensorRT-LLM's ``speculative_config``), ``serve.spec_tokens`` (``k``, default 1) and
``serve.spec_acceptance`` (``a``, the mean tokens a step emits: the accepted drafts plus the target's own
token, 1 <= a <= k + 1). The acceptance depends on the drafter, the model and the data, so it is an
input, not a prediction. Per decode step of ``n`` sequences:

* **verification**: the target runs ``k + 1`` tokens of each sequence (its dense part at ``n (k + 1)``
  tokens; the attention reads each sequence's cache once, as a decode does, its queries ``k + 1`` deep:
  costed as the decode's, which bandwidth bounds);
* **drafting**, ``k`` sequential draft steps of ``n`` tokens each: ``eagle3`` (EAGLE-3's one-layer draft
  head; Li et al. 2025) and ``mtp`` (DeepSeek-V3's multi-token-prediction modules, a decoder layer each)
  cost one decoder layer with the embedding and the output head at ``n`` tokens and a decode's attention
  over one layer; ``ngram`` (prompt lookup) drafts on the host, no GPU time; ``draft`` (a separate draft
  model, ``serve.draft_model``: vLLM's ``draft_model`` method, SGLang's ``STANDALONE``, TensorRT-LLM's
  draft-target decoding) runs the whole drafter ``k`` times over the ``n`` sequences at the target's tensor
  degree (:func:`drafter_job`), its first pass also over the step's prefill chunk, since the drafter keeps a
  cache of the prompt of its own; its weights and K/V take their share of the memory
  (:mod:`gpucast.estimate.serving.deploy`);
* **tokens**: each decoding sequence advances ``a`` tokens a step on average (``tokens_this_step``: the
  whole tokens of ``a`` spread evenly over its steps), its cache growing by as many; the scheduler's
  token budget counts ``k + 1`` per decode (vLLM's ``num_spec_tokens`` lookahead).

``advise --serve`` tries other draft counts (:func:`acceptance_at`: the acceptance given at ``k`` carried to
another ``k`` as one per-draft acceptance probability).

Not modelled: tree drafts (EAGLE's dynamic trees), acceptance that varies with the batch or the position,
the rejected drafts' KV slots, a drafter at a tensor degree of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Speculation:
    method: str
    tokens: int          # k draft tokens a step
    acceptance: float    # a: mean tokens a step emits (accepted drafts + 1)
    draft: str | None = None   # ``draft``: the drafter's Hugging Face config (canonical JSON)

    @property
    def drafts_on_gpu(self) -> bool:
        return self.method != "ngram"


def of(serve) -> Speculation | None:
    """The job's speculation, or None."""
    if serve is None or serve.spec_method is None:
        return None
    return Speculation(serve.spec_method, serve.spec_tokens or 1, float(serve.spec_acceptance), serve.draft_model)


def drafter_job(job, spec: Speculation | None):
    """The drafter of ``job`` as a job of its own (the traces' view: one sequence, inference, the target's
    precision), or None when the job drafts with no separate model."""
    if spec is None or spec.draft is None:
        return None
    return job.with_(model=f"hf:{json.loads(spec.draft)['model_type']}", hf_config=spec.draft, batch_size=1,
                     mode="infer", serve=None, parallel=None, gpus=1, optimizer="none")


def acceptance_at(acceptance: float, tokens: int, other: int) -> float:
    """The mean tokens a step emits with ``other`` drafts when it emits ``acceptance`` with ``tokens``: each draft
    accepted with one probability ``p`` while the ones before it were, so ``a(k) = (1 - p^(k+1)) / (1 - p)``
    (Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative Decoding", ICML 2023,
    eq. 1); ``p`` solved from ``(tokens, acceptance)`` by bisection (``a`` grows with ``p``)."""
    a = min(max(float(acceptance), 1.0), tokens + 1.0)
    if other == tokens:
        return a

    def emitted(q: float, k: int) -> float:
        return k + 1.0 if q >= 1.0 else (1.0 - q ** (k + 1)) / (1.0 - q)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if emitted(mid, tokens) < a else (lo, mid)
    return emitted((lo + hi) / 2, other)


def tokens_this_step(acceptance: float, step: int) -> int:
    """Whole tokens a sequence emits at its ``step``-th speculative step (0-based), ``acceptance`` on average:
    floor((step + 1) a) - floor(step a), at least 1."""
    return max(1, int((step + 1) * acceptance) - int(step * acceptance))


def draft_seconds(model, spec: Speculation, ndec: int, dctx: float, ptok: int = 0, pctx: float = 0.0,
                  npre: int = 1) -> float:
    """GPU seconds of one step's ``k`` draft passes over ``ndec`` sequences at mean context ``dctx``
    (module docstring), from ``model`` (an :class:`gpucast.estimate.serving.iteration.IterationModel`); a
    draft model's (``model.drafter``, its own iteration model) with the step's prefill chunk (``ptok`` tokens
    of ``npre`` sequences over ``pctx`` cached) in its first pass. Else
    one decoder layer with the embedding and the head, traced cut to one layer where the model's layers
    are alike; else the whole model's dense part scaled by a layer's and the head's share of its
    parameters. Memoised on the model's token grid."""
    if spec.draft is not None:
        drafter = model.drafter
        first = drafter.cost(ndec + ptok, ndec, dctx, ptok, pctx, npre)[1] if ndec + ptok else 0.0
        return first + ((spec.tokens - 1) * drafter.cost(ndec, ndec, dctx, 0, 0.0)[1] if ndec else 0.0)
    if not spec.drafts_on_gpu or ndec <= 0:
        return 0.0
    shape = model.shape
    layers = max(1, shape["layers"])

    def dense(n: int) -> float:
        key = ("draft", n)
        got = model._attn.get(key)
        if got is None:
            if model.cut_to(1) is not None:
                got = model._dense_gpu(model._trace(1, n, 0, 1), 1)
            else:
                head = shape["vocab"] * shape["hidden"]
                ends = head * (1 if shape.get("tied") else 2)
                per_layer = max(0, shape["parameters"] - ends) / layers
                got = model._dense_at(n)[0] * (per_layer + head) / max(1, shape["parameters"])
            model._attn[key] = got
        return got
    attention = model._decode_attention(ndec, max(dctx, 1.0)) / layers
    return spec.tokens * (model._interp(dense, ndec) + attention)
