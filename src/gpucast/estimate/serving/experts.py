"""The experts an iteration's tokens reach, and what expert parallelism puts on its busiest rank.

A mixture-of-experts layer traced on the meta device runs its experts as two ``_grouped_mm`` GEMMs of
``tokens x top_k`` rows over all ``E`` experts' weights (:mod:`gpucast.graph.serving`); with no router
values there, the trace's rule reads ``min(E, rows)`` experts' weights, an upper bound. Here, per
iteration of ``n`` tokens with each token routed to ``k`` distinct experts of ``E``, uniformly at
random (balanced routers; a trained router's skew is not modelled):

* an expert is hit with probability ``q = 1 - (1 - k/E)^n``; the weights read are those of the
  ``E q`` experts hit on average (``E q = k`` for one token, ``-> E`` for many);
* **tensor parallelism** (``parallel.expert`` unset or 1) splits every expert's width over the ``t``
  ranks: each rank reads ``1/t`` of every expert hit, for all ``n k`` rows;
* **expert parallelism** ``e`` (``parallel.expert``, a divisor of ``t``: vLLM's
  ``--enable-expert-parallel`` is ``e = t``; TensorRT-LLM's ``moe_expert_parallel_size`` with
  ``moe_tensor_parallel_size = t / e``; SGLang's ``--ep-size``) gives each group of ``t / e`` ranks
  ``E / e`` whole experts at ``e / t`` of their width. The layer waits for its busiest rank: the
  expected largest of ``e`` counts of experts hit (each ``Binomial(E/e, q)``) and of ``e`` row counts
  (each ``Binomial(n k, 1/e)``), the ranks taken as independent. The tokens' hidden states are
  replicated over the tensor-parallel group before the layer and summed after it, so the
  communication is tensor parallelism's all-reduce either way.

* **attention data parallelism** (``parallel.attention_dp``, :mod:`.stages`): each of the ``t`` ranks
  brings its own ``n`` tokens, and the MoE layer runs all ``t n`` of them over the ranks' experts as
  above (``routed(..., ranks=t)``); the tokens are gathered to the ranks and the outputs
  reduce-scattered back (:mod:`.iteration`).

Not modelled: routing skew (hot experts), redundant experts (EPLB), shared experts' separate GEMMs beyond
what the trace has.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def hit_probability(experts: int, top_k: int, tokens: float) -> float:
    """The chance that a given expert is routed at least one of ``tokens`` tokens."""
    return 1.0 - (1.0 - min(top_k, experts) / experts) ** max(0.0, tokens)


def _expected_max(trials: int, p: float, ranks: int) -> float:
    """E[max of ``ranks`` independent Binomial(trials, p)] = sum_j (1 - F(j)^ranks)."""
    if trials <= 0 or p <= 0:
        return 0.0
    if ranks == 1:
        return trials * p
    from scipy.stats import binom  # here: scipy.stats takes ~0.3 s to import, and dense models never need it

    j = np.arange(trials)
    return float(np.sum(1.0 - binom.cdf(j, trials, p) ** ranks))


@lru_cache(maxsize=4096)
def busiest(experts: int, top_k: int, tokens: int, expert_degree: int) -> tuple[float, float]:
    """(experts hit, rows) on the busiest of ``expert_degree`` expert-parallel ranks for ``tokens``
    tokens (module docstring); with one rank, the whole layer's expected experts hit and its rows."""
    q = hit_probability(experts, top_k, tokens)
    rows = tokens * min(top_k, experts)
    if expert_degree <= 1:
        return experts * q, float(rows)
    return (_expected_max(experts // expert_degree, q, expert_degree),
            _expected_max(rows, 1.0 / expert_degree, expert_degree))


def is_expert_gemm(o, shape: dict) -> bool:
    """Whether a traced op is a MoE layer's routed-experts GEMM (``_grouped_mm`` over all ``E`` experts)."""
    experts = shape.get("experts") or 0
    return (bool(experts) and o.op == "_grouped_mm" and len(o.shapes) >= 2 and len(o.shapes[0]) == 2
            and len(o.shapes[1]) == 3 and o.shapes[1][0] == experts)


def routed(trace, shape: dict, tensor: int, expert_degree: int, weight_scale: float = 1.0, ranks: int = 1):
    """``trace`` with each MoE ``_grouped_mm`` costed as the busiest rank runs it (module docstring).

    ``weight_scale``: the experts' weight bytes per fp16 byte (weight-only int8/int4: 0.5/0.25);
    ``ranks``: how many ranks' tokens the layer takes (attention data parallelism: ``tensor``; each
    traced for one rank's).
    The serving model divides a split op's FLOPs and bytes by ``tensor`` (its ``split``); an op under
    expert parallelism is stored at ``tensor`` times its busiest rank's share, so that the division
    leaves that share."""
    experts, k = shape.get("experts") or 0, shape.get("experts_per_token") or 0
    if not experts or not k:
        return trace
    ops = []
    changed = False
    for o in trace.ops:
        if is_expert_gemm(o, shape):
            rows, kdim = o.shapes[0]
            ndim = o.shapes[1][2]
            size = ITEMSIZE.get(o.dtype, 2)
            a_bytes = rows * kdim * size
            per_expert = kdim * ndim * size
            read_expert = per_expert * weight_scale
            read = min(experts, rows)
            rest = max(0, o.bytes_read - a_bytes - read * per_expert)
            tokens = max(1, rows // k) * ranks
            hit, rank_rows = busiest(experts, k, tokens, expert_degree)
            if expert_degree <= 1:
                o = dataclasses.replace(o, flops=o.flops * ranks, bytes_written=o.bytes_written * ranks,
                                        bytes_read=int(a_bytes * ranks + hit * read_expert + rest))
            else:
                width = expert_degree / tensor  # a rank's share of an expert's width
                share = rank_rows / max(1, rows)
                o = dataclasses.replace(
                    o, flops=int(o.flops * share * expert_degree),
                    bytes_read=int(tensor * (a_bytes * share + hit * read_expert * width + rest)),
                    bytes_written=int(o.bytes_written * share * expert_degree))
            changed = True
        ops.append(o)
    return dataclasses.replace(trace, ops=ops) if changed else trace
