"""The CLI's tables of an LLM deployment's prediction (``gpucast predict --mode serve``): the serving answer
(latencies, throughput, KV capacity), then what the run does with each GPU (its busy share, memory, and one
decode iteration at the run's mean batch, which is what a served model's ``step_time_s`` is)."""

from __future__ import annotations

from rich.table import Table


def _ms(v) -> str:
    return "-" if v is None or v != v else f"{v * 1e3:.1f}"


def _tok(v) -> str:
    return "-" if v is None or v != v else f"{v:,.0f}"


def serving_table(preds) -> Table:
    """One row per GPU: engine and load, TTFT and TPOT (median, p90, p99), inter-token latency (median,
    p99), end-to-end p50/p99, output tokens/s (the deployment's, per GPU, per user), the KV tokens that
    fit, the largest batch and the preemptions."""
    t = Table(title="serving")
    for col in ("gpu", "engine", "load", "requests", "latency s", "TTFT ms (p90, p99)", "TPOT ms (p90, p99)",
                "ITL ms (p99)", "e2e p50/p99 s", "out tok/s (per GPU, per user)", "KV tokens", "max batch",
                "preempted"):
        t.add_column(col, justify="left" if col in ("gpu", "engine", "load") else "right")
    for p in preds:
        s = p.serving
        t.add_row(p.gpu, s["engine"], s["load"], str(s["requests"]), f"{s['latency_s']:.2f}",
                  f"{_ms(s['ttft_s'])} ({_ms(s['ttft_p90_s'])}, {_ms(s.get('ttft_p99_s'))})",
                  f"{_ms(s['tpot_s'])} ({_ms(s['tpot_p90_s'])}, {_ms(s.get('tpot_p99_s'))})",
                  f"{_ms(s.get('itl_p50_s'))} ({_ms(s.get('itl_p99_s'))})",
                  f"{s['e2e_p50_s']:.2f}/{s['e2e_p99_s']:.2f}",
                  f"{_tok(s['output_tokens_per_s'])} ({_tok(s.get('output_tokens_per_s_per_gpu'))}, "
                  f"{_tok(s.get('output_tokens_per_s_per_user'))})",
                  f"{s['kv_cache_tokens']:,}", str(s["max_batch"]), str(s["preemptions"]))
    return t


def iteration_table(preds) -> Table:
    """One row per GPU: the share of the run a GPU was busy, the memory it holds, whether the deployment fits,
    and one decode iteration at the run's mean batch (its time and bottleneck)."""
    t = Table(title="the run on each GPU (one decode iteration at the run's mean batch)")
    for col in ("model", "precision", "gpu", "GPU busy %", "mean batch", "decode iteration ms", "memory GiB", "fits",
                "iteration bottleneck"):
        t.add_column(col, justify="left" if col in ("model", "precision", "gpu", "iteration bottleneck") else "right")
    for p in preds:
        t.add_row(p.job["model"], p.job["precision"], p.gpu, f"{p.gpu_util_pct:.1f}", f"{p.serving['mean_batch']:g}",
                  f"{p.step_time_s * 1e3:.2f}", f"{p.memory_peak_bytes / 2**30:.2f}",
                  "yes" if p.fits_in_memory else "[red]no[/]", p.bottleneck)
    return t
