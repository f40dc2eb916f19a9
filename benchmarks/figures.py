"""The docs' pictures, drawn with matplotlib from the benchmarks' result files (and, where a picture shows a
prediction rather than a check, from gpucast's API), written as SVG to ``docs/figures/``.

    .venv/bin/python benchmarks/figures.py            # every figure
    .venv/bin/python benchmarks/figures.py serving    # only those named

=====================  ======================================================================  ===================
figure                 what                                                                    from
=====================  ======================================================================  ===================
``accuracy_scatter``   predicted against measured, per set, log-log, the 1:1 line, +-10 %      results/*.json
``accuracy_by_gpu``    time MdAPE per set and GPU beside the floor (median measurement)        accuracy_gate.json
``plan_step``          a multi-GPU training step's time by kind: compute, each communication   gpucast.predict
                       kind, the pipeline bubble, host, optimizer (predicted)
``serving_load``       TTFT and TPOT against concurrency for a served model (predicted)        gpucast.predict
``colocation``         two jobs on one H200: predicted against measured speed                  h200_colocation.json
``sim_load``           the simulator's queued-period utilization per policy, against the      sim_mixes.json
                       predictions' error (a queue-keeping load)
=====================  ======================================================================  ===================

matplotlib is a docs/dev extra (``pip install -e '.[docs]'``), not a runtime dependency. Nothing here is
fitted; the predicted pictures say so in their titles.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results"
OUT = REPO_ROOT / "docs" / "figures"
BAND = 0.10   # the +-10 % lines of the scatter plots


def _load(name: str):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _pairs_of_sets() -> dict[str, tuple[list[float], list[float], str]]:
    """Set -> (predicted, measured, unit) from each benchmark's result file."""
    runs = _load("h200_runs.json")["records"]
    gavel = _load("gavel_compare.json")["rows"]
    lib = _load("llm_inference_a100.json")["rows"]
    trt = [r for r in _load("trtllm_v1.json")["rows"] if r.get("predicted")]
    nemo = [r for r in _load("nemo_h100.json")["rows"] if r.get("predicted")]
    kernels = _load("h200_kernels.json")
    serving = _load("h200_serving.json")
    return {
        "our H200 training/inference steps": ([r["predicted_step_s"] for r in runs],
                                              [r["measured_step_s"] for r in runs], "s"),
        "Gavel K80/P100/V100 steps": ([r["predicted_ms"] / 1e3 for r in gavel], [r["measured_ms"] / 1e3 for r in gavel],
                                      "s"),
        "our H200 kernels": ([r["predicted_us"] / 1e6 for r in kernels], [r["measured_us"] / 1e6 for r in kernels], "s"),
        "our H200 LLM iterations": ([r["predicted_wall_ms"] / 1e3 for r in serving],
                                    [r["measured_wall_ms"] / 1e3 for r in serving], "s"),
        "LLM-Inference-Bench A100 (vLLM, TRT-LLM)": ([r["predicted_s"] for r in lib], [r["measured_s"] for r in lib],
                                                     "s"),
        "TensorRT-LLM 1.0, H100-GB200": ([r["predicted"] for r in trt], [r["total_output_tokens_per_s"] for r in trt],
                                         "tokens/s"),
        "NeMo 24.07 FP8 training, H100": ([r["predicted"] for r in nemo], [r["tokens_per_s_per_gpu"] for r in nemo],
                                          "tokens/s/GPU"),
    }


def accuracy_scatter(plt):
    sets = _pairs_of_sets()
    fig, axes = plt.subplots(2, 4, figsize=(15, 7.5))
    for ax, (name, (pred, meas, unit)) in zip(axes.flat, sets.items()):
        lo, hi = min(min(pred), min(meas)) * 0.7, max(max(pred), max(meas)) * 1.4
        ax.plot([lo, hi], [lo, hi], color="black", lw=1)
        for f in (1 - BAND, 1 + BAND):
            ax.plot([lo, hi], [lo * f, hi * f], color="grey", lw=0.8, ls="--")
        ax.scatter(meas, pred, s=10, alpha=0.6)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=f"{name} ({len(pred)})",
               xlabel=f"measured, {unit}", ylabel=f"predicted, {unit}")
        ax.title.set_fontsize(9)
    axes.flat[-1].axis("off")
    axes.flat[-1].text(0, 0.5, "black: predicted = measured\ndashed: +-10 %\n\neach set's own benchmark,\n"
                       "as it last ran (benchmarks/results/)", fontsize=10)
    fig.suptitle("gpucast predicted against measured")
    return fig


def accuracy_by_gpu(plt):
    cells = _load("accuracy_gate.json")["cells"]
    rows = sorted((k.rsplit("/", 1)[0], v) for k, v in cells.items() if k.endswith("/all") and "time_mdape" in v)
    names = [k for k, _ in rows]
    ours = [v["time_mdape"]["value"] for _, v in rows]
    floor = [v.get("time_floor", {}).get("value", float("nan")) for _, v in rows]
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(rows) + 1.5))
    y = range(len(rows))
    ax.barh(list(y), ours, color="tab:blue", label="gpucast")
    ax.scatter(floor, list(y), color="tab:red", marker="|", s=200, label="floor: every row at the median measurement")
    ax.set(yticks=list(y), yticklabels=names, xlabel="time (or throughput) MdAPE, %", xscale="log")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Error per measured set and GPU (the accuracy gate's baseline)")
    return fig


def plan_step(plt):
    import gpucast
    from gpucast import Job

    kinds = [("compute_s", "compute"), ("recompute_s", "recompute"), ("tensor_parallel_comm_s", "tensor-parallel comm"),
             ("context_parallel_comm_s", "context-parallel comm"), ("expert_parallel_comm_s", "expert-parallel comm"),
             ("pipeline_p2p_s", "pipeline sends"), ("data_parallel_comm_s", "data-parallel comm"),
             ("pipeline_bubble_s", "pipeline bubble"), ("optimizer_s", "optimizer"), ("host_gaps_s", "host gaps")]
    # the same global batch of 64 sequences: 8 micro-batches of 8 per step on one model replica, or 8 replicas
    plans = [("TP 8", dict(tensor=8, grad_accum=8)), ("TP 4 x PP 2", dict(tensor=4, pipeline=2, grad_accum=8)),
             ("TP 2 x PP 4", dict(tensor=2, pipeline=4, grad_accum=8)), ("FSDP 8", dict(sharding="fsdp-full"))]
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for i, (label, par) in enumerate(plans):
        job = Job.from_hf_config("llama", batch_size=8, precision="bf16", mode="train", gpus=8, seq_len=4096,
                                 optimizer="adamw", parallel=par)
        br = gpucast.predict(job, "h100").plan["step_breakdown_s"]
        left = 0.0
        for j, (key, name) in enumerate(kinds):
            w = br.get(key, 0.0)
            ax.barh(i, w, left=left, color=plt.cm.tab10(j), label=name if i == 0 else None)
            left += w
    ax.set(yticks=range(len(plans)), yticklabels=[p for p, _ in plans], xlabel="seconds of one step")
    ax.invert_yaxis()
    ax.legend(ncol=5, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title("A Llama (transformers' default config) training step on 8 x H100, 64 sequences of 4,096 tokens, "
                 "by kind (predicted)", fontsize=10)
    return fig


def serving_load(plt):
    import gpucast
    from gpucast import Job

    cfg = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192)
    clients = [1, 2, 4, 8, 16, 32, 64, 128]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    for engine in ("vllm", "sglang", "trtllm"):
        ttft, tpot = [], []
        for c in clients:
            job = Job.from_hf_config(cfg, batch_size=1, precision="bf16", mode="serve",
                                     serve=dict(engine=engine, input_len=1024, output_len=256, concurrency=c))
            s = gpucast.predict(job, "h100").serving
            ttft.append(s["ttft_s"] * 1e3)
            tpot.append(s["tpot_s"] * 1e3)
        a.plot(clients, ttft, marker="o", label=engine)
        b.plot(clients, tpot, marker="o", label=engine)
    a.set(xscale="log", yscale="log", xlabel="clients (closed loop)", ylabel="median TTFT, ms")
    b.set(xscale="log", xlabel="clients (closed loop)", ylabel="median TPOT, ms")
    a.legend()
    fig.suptitle("A Llama-3-8B-shaped model on one H100, 1,024 prompt and 256 output tokens (predicted)")
    return fig


def colocation(plt):
    pairs = _load("h200_colocation.json")["pairs"]
    meas = [m for p in pairs for m in p["measured"]]
    pred = [m for p in pairs for m in p["predicted"]["predicted/CURRENT"]]
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1.05], [0, 1.05], color="black", lw=1)
    ax.scatter(meas, pred, s=18)
    ax.set(xlim=(0, 1.05), ylim=(0, 1.05), xlabel="measured speed beside the other job (share of solo)",
           ylabel="predicted", title=f"Two jobs time-sliced on one H200 ({len(pairs)} pairs)")
    return fig


def sim_load(plt):
    sweep = _load("sim_mixes.json")["sweep"]
    fig, axes = plt.subplots(1, len(sweep), figsize=(11, 3.8), sharey=True)
    for ax, (trace, points) in zip(axes, sweep.items()):
        policies = [r["policy"] for r in points[0]["rows"]]
        for pol in policies:
            xs = [pt["factor"] for pt in points]
            ys = [next(r["gpu_util_queued_pct"] for r in pt["rows"] if r["policy"] == pol) for pt in points]
            ax.plot(xs, ys, marker="o", label=pol)
        ax.set(title=trace, xlabel="prediction error (x the error measured on our sets)",
               ylabel="GPU utilization while jobs queue, %")
    axes[0].legend()
    fig.suptitle("The cluster simulator at a queue-keeping load, 128 GPUs: one job per GPU (slot), packing by "
                 "gpucast's predictions, by the truth (oracle)")
    return fig


FIGURES = {"accuracy_scatter": accuracy_scatter, "accuracy_by_gpu": accuracy_by_gpu, "plan_step": plan_step,
           "serving_load": serving_load, "colocation": colocation, "sim_load": sim_load}


def main(argv=None) -> int:
    names = list(argv if argv is not None else sys.argv[1:]) or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"error: unknown figure {unknown[0]!r} (known: {', '.join(FIGURES)})", file=sys.stderr)
        return 2
    try:
        import matplotlib
    except ImportError:
        print("error: matplotlib is missing: pip install -e '.[docs]'", file=sys.stderr)
        return 2
    matplotlib.use("svg")
    matplotlib.rcParams["svg.hashsalt"] = "gpucast"   # the same figure, the same file
    import matplotlib.pyplot as plt

    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:
        fig = FIGURES[name](plt)
        fig.tight_layout()
        fig.savefig(OUT / f"{name}.svg", metadata={"Date": None})
        plt.close(fig)
        print(f"wrote docs/figures/{name}.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
