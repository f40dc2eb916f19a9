"""Static-batch LLM generation on A100s: gpucast's serving model against LLM-Inference-Bench's runs.

``data/measured/llm-inference-bench-a100/a100_serving.csv`` (BSD-3, README beside it): 491 measured
``generate`` calls of vLLM (2024) and TensorRT-LLM 0.11 on 1-4 A100-SXM4-40GB (NVLink, tensor
parallelism = GPUs), fp16, batch 1-64 prompts of 128-2,048 tokens each generating as many. Each row
becomes a ``mode: serve`` job (the model's published config.json shape, ``engine`` vllm / trtllm,
``batch_size`` prompts submitted together, ``parallel.tensor`` = GPUs; each engine at the release
measured: TensorRT-LLM ``engine_version`` 0.11, vLLM 0.6, gpucast's entry for 2024's vLLM) and its predicted
``serving["latency_s"]`` (the whole batch's wall time) is compared with the measured one.

One constant per engine is fitted on this set, the one it identifies: the engine's host time per
iteration (a run's latency moves by its iterations times that time). Held out by model: each model's
rows use the time fitted on the other models' rows (a grid of 0-30 ms, least MdAPE: gpucast.learn.serving_fit, which `gpucast calibrate` fits
a cluster's serving rows with). The table also
gives the errors with the engines' priors (gpucast.estimate.serving.engines) and the time fitted on all
rows. DeciLM-7B's config (remote code, per-layer KV-head counts) is read as vLLM runs it: a Llama with
the largest layer's K/V heads in every layer (gpucast.graph.hf_remote).

    .venv/bin/python benchmarks/llm_inference_a100.py [--limit N] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data" / "measured" / "llm-inference-bench-a100" / "a100_serving.csv"
RESULTS = REPO_ROOT / "benchmarks" / "results"

_LLAMA = dict(model_type="llama", hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False)
CONFIGS = {  # the models' published config.json shapes (Hugging Face hub)
    "meta-llama/Llama-2-7b-hf": dict(_LLAMA, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                                     max_position_embeddings=4096),
    "meta-llama/Llama-2-70b-hf": dict(_LLAMA, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                      num_attention_heads=64, num_key_value_heads=8, vocab_size=32000,
                                      max_position_embeddings=4096),
    "meta-llama/Meta-Llama-3-8B": dict(_LLAMA, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                       max_position_embeddings=8192, rope_theta=500000.0),
    "meta-llama/Meta-Llama-3-70B": dict(_LLAMA, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                        num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                                        max_position_embeddings=8192, rope_theta=500000.0),
    "mistralai/Mistral-7B-v0.1": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336,
                                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                      vocab_size=32000, max_position_embeddings=32768, sliding_window=4096),
    "mistralai/Mixtral-8x7B-v0.1": dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336,
                                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                        vocab_size=32000, max_position_embeddings=32768, num_local_experts=8,
                                        num_experts_per_tok=2),
    # Deci/DeciLM-7B's config.json (model_type "deci": transformers runs it with the hub's remote code)
    "Deci/DeciLM-7B": dict(model_type="deci", architectures=["DeciLMForCausalLM"], hidden_act="silu",
                           hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                           num_key_value_heads=32,
                           num_key_value_heads_per_layer=[4] * 5 + [2] * 5 + [4] + [2] * 9 + [1] * 11 + [4],
                           vocab_size=32000, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=10000.0,
                           rope_scaling={"factor": 2.0, "type": "dynamic"}, tie_word_embeddings=False),
    "Qwen/Qwen2-7B": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                          num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                          max_position_embeddings=131072, tie_word_embeddings=False),
}
ENGINES = {"vLLM": "vllm", "TensorRT-LLM": "trtllm"}


# The releases the set ran (its README): TensorRT-LLM 0.11, vLLM of 2024 (gpucast's vLLM 0.6 entry).
RELEASE = {"TensorRT-LLM": "0.11", "vLLM": "0.6"}


def job_of(row: dict):
    from gpucast.job import Job

    cfg = CONFIGS.get(row["model"])
    if cfg is None:
        return None
    gpus = int(row["gpus"])
    return Job.from_hf_config(cfg, batch_size=int(row["batch_size"]), precision="fp16", mode="serve", gpus=gpus,
                              parallel=dict(tensor=gpus) if gpus > 1 else None,
                              serve=dict(input_len=int(row["input_len"]), output_len=int(row["output_len"]),
                                         engine=ENGINES[row["framework"]],
                                         engine_version=RELEASE[row["framework"]]))


def _term(x: dict):
    """The row's latency as a function of the host time per iteration: every iteration's wall time moves
    by the difference (the run's iterations stay the same: the scheduler does not see the clock)."""
    from gpucast.learn.serving_fit import Term

    return Term(predicted=x["predicted_s"], slope=x["iterations"], prior=x["host_prior_s"], measured=x["measured_s"])


def _at(x: dict, host_s: float) -> float:
    return _term(x).at(host_s)


def fit_host(rows: list[dict]) -> float | None:
    """The host time per iteration (gpucast.learn.serving_fit.HOST_GRID_S) with the least MdAPE on ``rows``."""
    from gpucast.learn.serving_fit import best_host

    return best_host([_term(x) for x in rows])


def held_out(out: list[dict]) -> None:
    """Each model's rows predicted with its engine's host time fitted on the other models' rows."""
    for eng in ENGINES:
        rows = [x for x in out if x["framework"] == eng and "ratio" in x]
        for m in {x["model"] for x in rows}:
            h = fit_host([x for x in rows if x["model"] != m])
            for x in rows:
                if x["model"] == m and h is not None:
                    x["held_out_host_s"] = h
                    x["held_out_ratio"] = _at(x, h) / x["measured_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--limit", type=int, default=None, help="rows (a quick look)")
    ap.add_argument("--write-fit", action="store_true",
                    help="write the host times fitted on all rows to src/gpucast/data/serving_fit.json")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import gpucast
    from gpucast.estimate.serving.engines import resolve
    from gpucast.job import JobError

    rows = list(csv.DictReader(a.data.open()))[: a.limit]
    out = []
    t0 = time.monotonic()
    for i, r in enumerate(rows):
        rec = {k: r[k] for k in ("framework", "model", "gpus", "input_len", "output_len", "batch_size")}
        rec["measured_s"] = float(r["latency_s"])
        job = job_of(r)
        if job is None:
            rec["error"] = "no config for this model"
        else:
            try:
                p = gpucast.predict(job, "a100-40gb")
                rec["predicted_s"] = p.serving["latency_s"]
                rec["ratio"] = rec["predicted_s"] / rec["measured_s"]
                rec["ttft_s"], rec["tpot_s"] = p.serving["ttft_s"], p.serving["tpot_s"]
                rec["iterations"] = p.serving["iterations"]
                rec["host_prior_s"] = resolve(job.serve).host_per_iteration_s
            except JobError as exc:
                rec["error"] = str(exc)
        out.append(rec)
        print(f"\r{i + 1}/{len(rows)} rows, {time.monotonic() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    held_out(out)
    fitted = {eng: fit_host([x for x in out if x["framework"] == eng and "ratio" in x]) for eng in ENGINES}
    lines = ["# LLM generation on A100-40GB: predicted vs measured static-batch latency", "",
             f"`.venv/bin/python benchmarks/llm_inference_a100.py`: {len(rows)} rows of "
             "data/measured/llm-inference-bench-a100 (LLM-Inference-Bench, BSD-3) on 1-4 A100-SXM4-40GB. Ratio = "
             "predicted / measured latency of the whole static batch. One constant per engine is fitted, its host "
             "time per iteration: 'held out by model' predicts each model's rows with the time fitted on the other "
             "models' rows; 'packaged constants' uses src/gpucast/data/serving_fit.json (fitted on all rows, "
             "`--write-fit`); the last column is that fit.", "",
             "| engine | rows | answered | MdAPE (packaged constants) | held out by model: MdAPE | median ratio | "
             "batch 1 (decode-bound) | batch >= 16, prompts >= 1k (prefill-heavy) | host s / iteration (all rows) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def mdape(rs, key="ratio"):
        rs = [x for x in rs if key in x]
        return f"{statistics.median(abs(x[key] - 1) for x in rs):.0%}" if rs else "-"

    for eng in ENGINES:
        rs = [x for x in out if x["framework"] == eng]
        ok = [x for x in rs if "ratio" in x]
        med = f"{statistics.median(x['held_out_ratio'] for x in ok if 'held_out_ratio' in x):.2f}" if ok else "-"
        h = fitted[eng]
        lines.append(f"| {eng} | {len(rs)} | {len(ok)} | {mdape(ok)} | {mdape(ok, 'held_out_ratio')} | {med} | "
                     f"{mdape([x for x in ok if int(x['batch_size']) == 1], 'held_out_ratio')} | "
                     f"{mdape([x for x in ok if int(x['batch_size']) >= 16 and int(x['input_len']) >= 1024], 'held_out_ratio')} | "
                     f"{'-' if h is None else f'{h * 1e3:.1f} ms'} |")
    lines += ["", "| model | engine | rows | MdAPE held out | median ratio held out | unanswered |",
              "| --- | --- | ---: | ---: | ---: | --- |"]
    for m in sorted({x["model"] for x in out}):
        for eng in ENGINES:
            rs = [x for x in out if x["model"] == m and x["framework"] == eng]
            ok = [x for x in rs if "held_out_ratio" in x]
            if rs:
                med = f"{statistics.median(x['held_out_ratio'] for x in ok):.2f}" if ok else "-"
                why = sorted({x["error"][:60] for x in rs if "error" in x})
                lines.append(f"| {m} | {eng} | {len(rs)} | {mdape(ok, 'held_out_ratio')} | {med} | "
                             f"{'; '.join(why) or '-'} |")
    text = "\n".join(lines) + "\n"
    if a.write_fit:
        fit = {"host_per_iteration_s": {ENGINES[k]: (round(v, 5) if v is not None else None) for k, v in fitted.items()},
               "source": "benchmarks/llm_inference_a100.py --write-fit: least-MdAPE host time per iteration over "
                         "data/measured/llm-inference-bench-a100 (LLM-Inference-Bench, BSD-3; vLLM of 2024 and "
                         "TensorRT-LLM 0.11 on A100-SXM4-40GB, Polaris' AMD EPYC hosts), all answered rows"}
        (REPO_ROOT / "src" / "gpucast" / "data" / "serving_fit.json").write_text(json.dumps(fit, indent=1) + "\n")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "llm_inference_a100.json").write_text(json.dumps({"host_per_iteration_s": fitted, "rows": out},
                                                              indent=1) + "\n")
    (a.out / "llm_inference_a100.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
