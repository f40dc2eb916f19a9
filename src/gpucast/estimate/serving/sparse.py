"""DeepSeek sparse attention's indexer as kernels of an engine iteration (:mod:`gpucast.graph.sparse_attention`).

Per layer and iteration the indexer scores, for each new token of each sequence, every cached token it may
see (causal: a prefill chunk of ``n`` tokens on ``c`` cached ones scores ``n c + n (n + 1) / 2`` pairs) with
``index_n_heads`` heads of ``index_head_dim`` FP8 values (``2 H D`` FLOPs a pair, plus ``2 H`` for the heads'
weighted sum), writes the scores as FP32 logits (DeepGEMM's ``fp8_mqa_logits`` / ``fp8_paged_mqa_logits``, as
vLLM's and SGLang's DSA backends call them), then a top-k kernel reads them back and writes ``index_topk``
indices a query. Reads: each sequence's cached index keys once (FP8 and a scale a token), the queries.
Two kernels. The attention that follows reads only the chosen keys (the serving estimator counts its pairs as
a window of ``index_topk``: :func:`gpucast.graph.windows.chunk_share`).

Not modelled: the indexer's projections (their GEMMs are small beside the layer's), the logits' re-reads
across query tiles of a long prefill (they are assumed to stream once).
"""

from __future__ import annotations

import dataclasses

from gpucast.graph.sparse_attention import key_bytes

LOGIT_BYTES = 4   # FP32 index logits
INDEX_BYTES = 4   # int32 top-k indices
QUERY_BYTES = 1   # FP8 index queries


def indexer(like, batch: int, new: int, ctx: int, sparse: dict, ranks: int = 1):
    """The indexer's work for ``batch`` sequences of ``new`` tokens over ``ctx`` cached ones, as an op record
    shaped after the layer's attention op ``like`` (module docstring). Every tensor-parallel rank runs the whole
    indexer (vLLM's replicated ``wq_b``), so its counts are ``ranks`` times a rank's, which the estimator's
    split divides back."""
    heads, dim, topk = sparse["heads"], sparse["dim"], sparse["topk"]
    ranks = ranks * sparse.get("share", 1.0)   # GLM-5's shared indexer layers run none of their own
    total = ctx + new
    pairs = batch * (new * ctx + new * (new + 1) // 2)
    logits = batch * new * total * LOGIT_BYTES
    return dataclasses.replace(
        like, op="dsa_indexer", category="attention", dtype="float8_e4m3fn", kernels=2,
        shapes=((batch, new, heads, dim), (batch, total, dim)), out_shapes=((batch, new, min(topk, total)),),
        flops=int(ranks * pairs * (2 * heads * dim + 2 * heads)),
        bytes_read=int(ranks * (batch * total * key_bytes(sparse) + batch * new * heads * dim * QUERY_BYTES + logits)),
        bytes_written=int(ranks * (logits + batch * new * min(topk, total) * INDEX_BYTES)))
