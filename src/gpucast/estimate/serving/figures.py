"""The figures a serving benchmark reports, from a simulated run's per-request times.

As ``vllm bench serve``, ``sglang.bench_serving``, genai-perf / aiperf and ``trtllm-bench`` report them,
over the requests that finished:

* **TTFT** (time to first token): first token - arrival; **TPOT** (time per output token): (finish -
  first token) / (output tokens - 1), over requests of more than one output token; **e2e**: finish -
  arrival. Each as a mean, a median and 90th/99th percentiles.
* **ITL** (inter-token latency): the gap between a request's consecutive tokens, over every gap of every
  request: each decode iteration's duration, once for each sequence it gave a token
  (:class:`gpucast.estimate.serving.run.RunResult`'s ``gap_s`` / ``gap_weight``); mean, median, p99.
  Its mean is the tokens-weighted TPOT; its tail shows the iterations a prefill chunk lengthened.
* **throughput**: output tokens and requests per second over the run's span (first arrival to last
  finish); **per GPU** over the deployment's GPUs; **per user** the mean over requests of ``1 / TPOT``
  (genai-perf's "output token throughput per user").

Not modelled: a benchmark's warm-up requests (gpucast's run starts from an empty server and has no
cold-start costs to warm up), tokenisation and detokenisation on the client.
"""

from __future__ import annotations

import numpy as np


def _quantile(a: np.ndarray, p: float) -> float:
    a = a[np.isfinite(a)]
    return float(np.percentile(a, p)) if len(a) else float("nan")


def _mean(a: np.ndarray) -> float:
    a = a[np.isfinite(a)]
    return float(a.mean()) if len(a) else float("nan")


def weighted_quantile(values: np.ndarray, weights: np.ndarray, p: float) -> float:
    """The ``p``-th percentile of ``values`` each counted ``weights`` times (the first value whose
    cumulative weight reaches ``p`` % of the total)."""
    if values is None or not len(values) or weights.sum() <= 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][min(len(values) - 1, int(np.searchsorted(cum, p / 100.0 * cum[-1])))])


def figures(arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, output: np.ndarray, gap_s, gap_weight,
            gpus: int) -> dict:
    """The module docstring's figures of a run (keys ending ``_s`` in seconds)."""
    done = np.isfinite(finish)
    ttft = (first - arrival)[done]
    many = done & (output > 1)
    tpot = ((finish - first) / np.maximum(output - 1, 1))[many]
    e2e = (finish - arrival)[done]
    span = float(np.nanmax(finish) - arrival.min()) if done.any() else float("inf")
    rate = (lambda x: float(x / span) if span > 0 else 0.0)
    out_tok = rate(output[done].sum())
    gaps = gap_s if gap_s is not None else np.array([])
    weights = gap_weight if gap_weight is not None else np.array([])
    itl_mean = float((gaps * weights).sum() / weights.sum()) if len(gaps) and weights.sum() > 0 else float("nan")
    per_user = 1.0 / tpot[tpot > 0] if len(tpot) else np.array([])
    return {
        "latency_s": span,
        "ttft_s": _quantile(ttft, 50), "ttft_mean_s": _mean(ttft), "ttft_p90_s": _quantile(ttft, 90),
        "ttft_p99_s": _quantile(ttft, 99),
        "tpot_s": _quantile(tpot, 50) if many.any() else 0.0, "tpot_mean_s": _mean(tpot) if many.any() else 0.0,
        "tpot_p90_s": _quantile(tpot, 90) if many.any() else 0.0,
        "tpot_p99_s": _quantile(tpot, 99) if many.any() else 0.0,
        "itl_mean_s": itl_mean, "itl_p50_s": weighted_quantile(gaps, weights, 50),
        "itl_p99_s": weighted_quantile(gaps, weights, 99),
        "e2e_p50_s": _quantile(e2e, 50), "e2e_p90_s": _quantile(e2e, 90), "e2e_p99_s": _quantile(e2e, 99),
        "output_tokens_per_s": out_tok, "output_tokens_per_s_per_gpu": out_tok / max(1, gpus),
        "output_tokens_per_s_per_user": _mean(per_user) if len(per_user) else float("nan"),
        "requests_per_s": rate(done.sum()), "finished": int(done.sum()),
    }
