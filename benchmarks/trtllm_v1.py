"""gpucast against NVIDIA's published TensorRT-LLM v1.0 maximum-throughput runs (H100, H200, B200, GB200, RTX PRO 6000).

Data: ``data/measured/trtllm-perf-overview-v1.0/throughput.csv`` (Apache-2.0, README beside it): 178
``trtllm-bench throughput`` runs of the PyTorch backend, every request of a fixed-length dataset queued at
once, the deployment's total output tokens/s measured. Every number here is a prediction unless it says
measured.

Each row becomes a ``mode: serve`` job as a user would write it: the model's published config.json shape
(:data:`MODELS`), ``engine: trtllm`` at ``engine_version: "1.0"``, ``batch_size`` = ``num_requests`` with no
concurrency or rate (all at once: gpucast then sizes the batch as ``trtllm-bench`` does,
:mod:`gpucast.estimate.serving.bench`), ``input_len``/``output_len`` fixed, ``parallel.tensor``/``pipeline``
= tp/pp; the page's ``kv_cache_free_gpu_mem_fraction 0.95`` as ``gpu_memory_utilization``; FP8 rows
``precision: fp8``, FP4 rows ``precision: nvfp4`` (NVIDIA's NVFP4 checkpoints), each with an FP8 KV
cache (NVIDIA's ModelOpt checkpoints quantise the KV cache too; assumed for every row, the page does not
say).

The MoE models (Qwen3-30B-A3B, Qwen3-235B-A22B, Llama-4 Scout and Maverick) ran as the page's MoE
command has them: ``--ep $ep_size`` with ``enable_attention_dp: true`` (the page nests it under
``cuda_graph_config``; taken as meant). The page does not print ``$ep_size`` per row; ``ep = tp`` is
assumed (NVIDIA's usual MoE mapping, "DEP"), so a MoE row with ``tp > 1`` is ``parallel.expert = tp`` and
``parallel.attention_dp: true``.

A row is **not answered** (:func:`unanswered`, with the reason in the table) where gpucast cannot express
it yet. What the answered rows give: output tokens/s MdAPE and median predicted / measured, per GPU and
over all; ``--limit N`` predicts every N-th answered row only.

    .venv/bin/python benchmarks/trtllm_v1.py [--data data/measured/trtllm-perf-overview-v1.0] [--limit N]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data" / "measured" / "trtllm-perf-overview-v1.0"
RESULTS = REPO_ROOT / "benchmarks" / "results"

_LLAMA3 = dict(model_type="llama", hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False,
               vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0, num_key_value_heads=8)
MODELS = {  # the models' published config.json shapes (Hugging Face hub)
    "meta-llama/Llama-3.1-8B": dict(_LLAMA3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                    num_attention_heads=32),
    "meta-llama/Llama-3.3-70B": dict(_LLAMA3, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                     num_attention_heads=64),
    "meta-llama/Llama-3.1-405B": dict(_LLAMA3, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                                      num_attention_heads=128),
}
_QWEN3_MOE = dict(model_type="qwen3_moe", hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=False,
                  vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0, num_experts=128,
                  num_experts_per_tok=8, norm_topk_prob=True, head_dim=128, num_key_value_heads=4)
_LLAMA4 = dict(model_type="llama4_text", hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False,
               vocab_size=202048, rope_theta=500000.0, hidden_size=5120, intermediate_size=8192,
               intermediate_size_mlp=16384, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
               head_dim=128, num_experts_per_tok=1, attention_chunk_size=8192)
MODELS.update({
    "Qwen/Qwen3-30B-A3B": dict(_QWEN3_MOE, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                               num_hidden_layers=48, num_attention_heads=32),
    "Qwen/Qwen3-235B-A22B": dict(_QWEN3_MOE, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
                                 num_hidden_layers=94, num_attention_heads=64),
    # Llama-4's text configs (the text_config of the published config.json)
    "meta-llama/Llama-4-Scout-17B-16E": dict(_LLAMA4, num_local_experts=16, interleave_moe_layer_step=1,
                                             max_position_embeddings=10485760, use_qk_norm=True),
    "meta-llama/Llama-4-Maverick-17B-128E": dict(_LLAMA4, num_local_experts=128, interleave_moe_layer_step=2,
                                                 max_position_embeddings=1048576, use_qk_norm=False),
})
MOE = {"Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B", "meta-llama/Llama-4-Scout-17B-16E",
       "meta-llama/Llama-4-Maverick-17B-128E"}
PRECISIONS = {"fp8": "fp8", "fp4": "nvfp4"}   # the checkpoint's format -> gpucast's precision
MEM_FRACTION = 0.95           # the page's kv_cache_free_gpu_mem_fraction


def read(data: Path = DATA) -> list[dict]:
    with open(data / "throughput.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("gpus", "tp", "pp", "input_len", "output_len", "num_requests"):
            r[k] = int(r[k])
        r["total_output_tokens_per_s"] = float(r["total_output_tokens_per_s"])
    return rows


def unanswered(row: dict) -> str | None:
    if row["model"] not in MODELS:
        return "model not described here"
    if row["precision"] not in PRECISIONS:
        return f"{row['precision']} serving (not modelled)"
    return None


def job_of(row: dict):
    from gpucast.job import Job

    par = {k: v for k, v in (("tensor", row["tp"]), ("pipeline", row["pp"])) if v > 1}
    if row["model"] in MOE and row["tp"] > 1:   # the page's MoE command: --ep with attention DP (docstring)
        par.update(expert=row["tp"], attention_dp=True)
    return Job.from_hf_config(
        MODELS[row["model"]], batch_size=row["num_requests"], mode="serve", precision=PRECISIONS[row["precision"]],
        gpus=row["gpus"], parallel=par or None,
        serve=dict(engine="trtllm", engine_version="1.0", input_len=row["input_len"], output_len=row["output_len"],
                   num_requests=row["num_requests"], kv_cache_dtype="fp8", gpu_memory_utilization=MEM_FRACTION))


def predict_rows(rows: list[dict], progress=None) -> list[dict]:
    """Each row with ``predicted`` total output tokens/s (None where not answered, with ``why``)."""
    import gpucast

    out = []
    for r in rows:
        why = unanswered(r)
        rec = dict(r, why=why, predicted=None)
        if why is None:
            p = gpucast.predict(job_of(r), r["gpu"])
            rec["predicted"] = float(p.serving["output_tokens_per_s"])
        out.append(rec)
        if progress:
            progress()
    return out


def summary(recs: list[dict]) -> dict:
    got = [r for r in recs if r["predicted"] is not None]

    def of(rs):
        q = [r["predicted"] / r["total_output_tokens_per_s"] for r in rs]
        return {"rows": len(rs), "mdape": 100 * statistics.median(abs(x - 1) for x in q) if q else None,
                "median_ratio": statistics.median(q) if q else None}
    return {"rows": len(recs), "answered": len(got), "all": of(got),
            "per_gpu": {g: of([r for r in got if r["gpu"] == g]) for g in sorted({r["gpu"] for r in got})}}


def render(recs: list[dict]) -> str:
    s = summary(recs)
    a = s["all"]
    lines = ["# TensorRT-LLM v1.0 maximum throughput (trtllm-bench): predicted vs measured", "",
             "`.venv/bin/python benchmarks/trtllm_v1.py` over `data/measured/trtllm-perf-overview-v1.0` (measured: "
             "NVIDIA's published total output tokens/s; predicted: gpucast, CPU only; the script's docstring says "
             "how each row becomes a job).", "",
             f"Answered **{s['answered']} of {s['rows']}** rows" + (
                 f"; output tokens/s MdAPE **{a['mdape']:.0f} %**, median predicted / measured "
                 f"**{a['median_ratio']:.2f}**." if a["mdape"] is not None else "."), "",
             "| GPU | rows | MdAPE % | median pred / meas |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {g} | {v['rows']} | {v['mdape']:.1f} | {v['median_ratio']:.2f} |" for g, v in s["per_gpu"].items()]
    lines += ["", "| model | GPU | TP | PP | precision | input | output | requests | measured tok/s | predicted | "
              "pred / meas |", "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in recs:
        head = (f"| {r['model']} | {r['gpu']} | {r['tp']} | {r['pp']} | {r['precision']} | {r['input_len']} | "
                f"{r['output_len']} | {r['num_requests']} | {r['total_output_tokens_per_s']:,.0f} | ")
        lines.append(head + (f"not answered: {r['why']} | |" if r["predicted"] is None else
                             f"{r['predicted']:,.0f} | {r['predicted'] / r['total_output_tokens_per_s']:.2f} |"))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--limit", type=int, default=1, help="predict every N-th row only (default: all)")
    a = ap.parse_args(argv)
    if not (a.data / "throughput.csv").exists():
        print(f"error: {a.data / 'throughput.csv'} not found (pass --data)", file=sys.stderr)
        return 2
    if a.limit < 1:
        print("error: --limit must be 1 or more", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    from rich.progress import Progress

    rows = read(a.data)[::a.limit]
    with Progress() as bar:
        task = bar.add_task("predicting", total=len(rows))
        recs = predict_rows(rows, lambda: bar.advance(task))
    text = render(recs)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "trtllm_v1.md").write_text(text)
    (a.out / "trtllm_v1.json").write_text(json.dumps({"summary": summary(recs), "rows": recs}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
