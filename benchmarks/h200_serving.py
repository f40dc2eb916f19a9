"""LLM inference iterations measured on our H200 against the serving model's traced iterations.

``data/measurements/serving/*.csv`` (scripts/device/serving.py on a real H200; provenance in
data/measurements/README.md): Hugging Face transformers (eager, ``DynamicCache``, SDPA; random bf16
weights in Llama-3-8B, Llama-3.2-1B and Qwen1.5-MoE-A2.7B shapes) running

* ``prefill``: one forward of B prompts of T tokens (last-token logits), wall time;
* ``decode``: one step of B sequences on a cache of L tokens: the device's busy time per step
  (torch.profiler: the kernels' sum, what the GPU itself spends) and the wall time (eager host included).

Each is predicted from :func:`gpucast.graph.serving.trace_iteration` at the same shape with HF's own
cache (``dynamic``): the kernels' sum by gpucast.estimate.kernels (against the device busy time) and
the eager step by gpucast's estimator (against the wall time; the measuring VM's host at the speed
benchmarks/h200_runs.py fitted for its collections, 0.32 of the reference core). The H200 at its boost
clock (the card held 1,980 MHz in these runs).

    .venv/bin/python benchmarks/h200_serving.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data" / "measurements" / "serving"
RESULTS = REPO_ROOT / "benchmarks" / "results"
VM_CPU_SPEED = 0.32  # benchmarks/results/h200_runs.json: the measuring VM's host, both sessions' fits
SHAPES = {  # scripts/device/serving.py's MODELS
    "llama-3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256),
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
    "qwen1.5-moe-a2.7b": dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                              num_attention_heads=16, num_key_value_heads=16, vocab_size=151936,
                              moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
                              num_experts_per_tok=4),
}


def predict_rows(files: list[Path]) -> list[dict]:
    """Every prefill/decode row of ``files`` with its predicted wall and GPU time (ms)."""
    from gpucast.estimate import estimate
    from gpucast.estimate.constants import DEFAULT
    from gpucast.estimate.kernels import kernel_times
    from gpucast.graph.serving import trace_iteration
    from gpucast.hardware import get_gpu
    from gpucast.job import Job
    from gpucast.surroundings import Data, Loop, Stack

    gpu = dataclasses.replace(get_gpu("h200"), sustained_clock_mhz=None)
    out = []
    for f in files:
        for r in csv.DictReader(f.open()):
            if r["phase"] not in ("prefill", "decode") or not r["median_ms"] or r["model"] not in SHAPES:
                continue
            b = int(r["batch"])
            new, ctx = (int(r["tokens_in"]), 0) if r["phase"] == "prefill" else (1, int(r["context"]))
            job = Job.from_hf_config(SHAPES[r["model"]], batch_size=b, precision="bf16", mode="infer",
                                     data=Data(source="device"), loop=Loop.benchmark(),
                                     stack=Stack(cpu_speed=VM_CPU_SPEED))
            tr = trace_iteration(job, b, new, ctx, "dynamic")
            gpu_s = float(kernel_times(tr, gpu, "bf16", DEFAULT).time.sum())
            wall_s = float(estimate(tr, job, gpu, DEFAULT).step_time_s)
            rec = {"file": f.name, "model": r["model"], "phase": r["phase"], "batch": b, "tokens": new, "context": ctx,
                   "measured_wall_ms": float(r["median_ms"]), "predicted_wall_ms": round(wall_s * 1e3, 3),
                   "predicted_gpu_ms": round(gpu_s * 1e3, 3)}
            if r.get("device_busy_ms"):
                rec["measured_gpu_ms"] = float(r["device_busy_ms"])
            out.append(rec)
    return out


def data_files(data: Path) -> list[Path]:
    return sorted(f for f in data.glob("*.csv") if not f.name.endswith(".requests.csv"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    files = data_files(a.data)
    out = predict_rows(files)
    lines = ["# LLM inference iterations on an H200 (Hugging Face eager): predicted vs measured", "",
             f"`.venv/bin/python benchmarks/h200_serving.py` over {', '.join(f.name for f in files)} "
             "(data/measurements/serving, measured by scripts/device/serving.py). Ratio = predicted / measured.", "",
             "| model | phase | rows | GPU time: median ratio (range) | wall time: median ratio (range) |",
             "| --- | --- | ---: | ---: | ---: |"]

    def cell(rs, p, m):
        v = sorted(x[p] / x[m] for x in rs if m in x)
        return f"{statistics.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f})" if v else "-"

    for model in SHAPES:
        for phase in ("prefill", "decode"):
            rs = [x for x in out if x["model"] == model and x["phase"] == phase]
            if rs:
                lines.append(f"| {model} | {phase} | {len(rs)} | {cell(rs, 'predicted_gpu_ms', 'measured_gpu_ms')} | "
                             f"{cell(rs, 'predicted_wall_ms', 'measured_wall_ms')} |")
    text = "\n".join(lines) + "\n"
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "h200_serving.json").write_text(json.dumps(out, indent=1) + "\n")
    (a.out / "h200_serving.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
