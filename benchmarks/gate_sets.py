"""The measured sets the accuracy gate predicts, each as records for :mod:`gpucast.learn.gate`.

One function per set: it reads the set from the repository (``data/measured/<set>``: others'
measurements; ``data/measurements/``: ours), predicts every row (or a fixed, evenly spread sample
of a heavy set, so the gate stays within its budget; the set's own benchmark runs them all) with
the constants in force, and returns records ``{"gpu", "group", "time"|"util"|"memory"|"fits"|"speed"}``.
Nothing is fitted here except what a set's own benchmark fits from the same rows' predictions
(the H200 VM's host speed, from its host-bound runs), so a change of any constant shows.

Each reuses its set's benchmark (``benchmarks/<set>.py``) or reader (``gpucast.learn``), so the
gate and the benchmark predict a row the same way.
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MEASURED = REPO_ROOT / "data" / "measured"
OURS = REPO_ROOT / "data" / "measurements"
BENCH = REPO_ROOT / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


def _bench(name: str):
    """A benchmark script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_gate_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def spread(items: list, n: int | None) -> list:
    """``n`` items evenly spread over ``items`` (all when ``n`` is None or not smaller)."""
    if n is None or n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def _fits(p) -> bool | None:
    return None if p.fits_in_memory is None else bool(p.fits_in_memory)


def mlp(sample: int | None = 120, progress=None) -> list[dict]:
    """GPUMemNet's MLP training runs on an A100-40GB: utilization (DCGM) and peak memory."""
    from gpucast.api import predict
    from gpucast.learn.shared_sets import mlp_rows

    rows = mlp_rows(MEASURED / "gpumemnet-mlp" / "runs.csv")
    by_group: dict[str, list] = {}
    for r in rows:
        by_group.setdefault(r.group, []).append(r)
    per = None if sample is None else max(1, sample // len(by_group))
    rows = [r for g in sorted(by_group) for r in spread(by_group[g], per)]
    out = []
    for r in rows:
        p = predict(r.job, r.gpu)
        out.append({"gpu": r.gpu, "group": r.group, "util": (p.gpu_util_pct, r.util_pct),
                    "memory": (p.memory_peak_bytes, r.memory_mib * 2**20), "memory_hi": p.memory_interval[1],
                    "fits": _fits(p)})
        _tick(progress)
    return out


def lucid_solo(progress=None) -> list[dict]:
    """Lucid's 35 solo training runs on an RTX 3090: step time (where comparable), NVML
    utilization and memory."""
    from gpucast.api import predict
    from gpucast.learn import lucid

    out = []
    for s in lucid.singles(MEASURED / "lucid-rtx3090"):
        p = predict(s.job(), "rtx-3090")
        rec = {"gpu": "rtx-3090", "group": s.model, "util": (p.gpu_util_pct, s.gpu_util_pct),
               "memory": (p.memory_peak_bytes, s.memory_used_mib * 2**20), "memory_hi": p.memory_interval[1],
               "fits": _fits(p)}
        if s.step_time_comparable:
            rec["time"] = (p.step_time_s, s.step_time_s)
        out.append(rec)
        _tick(progress)
    return out


def lucid_pairs(progress=None) -> list[dict]:
    """Lucid's co-located pairs on an RTX 3090: each job's speed from predictions alone under the
    packaged constants (``timeshare.CURRENT``, resolved for the card)."""
    import numpy as np

    from gpucast.cluster import timeshare
    from gpucast.cluster.timeshare import pairs as tp

    solos, pairs = tp.from_lucid(MEASURED / "lucid-rtx3090")
    tls = tp.predicted_timelines(solos)
    sp, _ = tp.predict(pairs, tls, timeshare.CURRENT.on("rtx-3090"))
    out = []
    for k, p in enumerate(pairs):
        for i, (job, meas) in enumerate(((p.a, p.speed_a), (p.b, p.speed_b))):
            if not np.isnan(meas):
                out.append({"gpu": "rtx-3090", "group": job.family, "speed": (float(sp[i, k]), meas)})
    _tick(progress)
    return out


def gavel_solo(progress=None) -> list[dict]:
    """Gavel's solo training throughputs on K80, P100 and V100, as step times."""
    from gpucast.api import predict
    from gpucast.learn.shared_sets import gavel_rows

    out = []
    for r in gavel_rows(MEASURED / "gavel" / "simulation_throughputs.json"):
        p = predict(r.job, r.gpu)
        out.append({"gpu": r.gpu, "group": r.group, "time": (p.step_time_s, r.step_time_s)})
        _tick(progress)
    return out


def gavel_pairs(progress=None) -> list[dict]:
    """Gavel's co-located pairs (K80, P100, V100): each job's speed under the packaged current-GPU
    constants as gpucast resolves them for the GPU (exclusive time slices on data-center cards),
    from the simulator's timelines of Gavel's job types."""
    import numpy as np

    from gpucast.cluster import timeshare
    from gpucast.cluster.timeshare import fit as tf

    out = []
    for gpu in tf.GPUS:
        obs = tf.observations([gpu])
        ests = tf._estimates(obs)
        y = 1.0 / np.array(tf._flat(obs))
        p = 1.0 / np.array([s for q in tf.predict(obs, timeshare.CURRENT.on(gpu), ests) for s in q])
        out += [{"gpu": gpu, "group": "", "speed": (float(a), float(b))} for a, b in zip(p, y)]
    _tick(progress)
    return out


def h200_runs(progress=None) -> list[dict]:
    """Our H200 solo steps (suite h200-v1): step time, NVML utilization, process memory and whether
    each (every one ran) is predicted to fit, each
    job as the harness ran it, on the measuring VM's host speed fitted per collection from its
    host-bound runs (as benchmarks/h200_runs.py does)."""
    hr = _bench("h200_runs")
    rows = hr.load(OURS)
    host_bound = [r for r in rows if r["util_mean_pct"] is not None and r["util_mean_pct"] < hr.HOST_BOUND_UTIL_PCT]
    base = hr.predict_all(host_bound, None)
    pooled = hr.fit_cpu_speed(base)[0]
    fitted = {c: v for c, (v, _) in hr.fit_by_collection(base).items()}
    speeds = {r["collection"]: fitted.get(r["collection"], pooled) for r in rows}
    out = []
    for r in rows:
        rec = hr.predict_all([r], speeds)[0]
        group = f"{rec['family']} {'amp' if rec['precision'].startswith('amp') else rec['precision']}"
        out.append({"gpu": r["gpu_name"], "group": group,
                    "time": (rec["predicted_step_s"], rec["measured_step_s"]),
                    "util": (rec["predicted_util_pct"], rec["measured_util_pct"])
                    if rec["measured_util_pct"] is not None else None,
                    "memory": (rec["predicted_memory_bytes"], rec["measured_memory_bytes"])
                    if rec["measured_memory_bytes"] else None, "memory_hi": rec["predicted_memory_hi_bytes"],
                    "fits": rec["predicted_fits"]})
        _tick(progress)
    return out


def h200_kernels(progress=None) -> list[dict]:
    """Our H200 single kernels (GEMMs, FP8, attention, convolutions, norms, memory-bound ops),
    grouped by the section they were measured in (benchmarks/h200_kernels.py groups them finer)."""
    hk = _bench("h200_kernels")
    out = [{"gpu": "h200", "group": r["section"], "time": (r["predicted_us"], r["measured_us"])}
           for r in hk.predict_rows(sorted((OURS / "kernels").glob("*.csv")))]
    _tick(progress)
    return out


def h200_serving(progress=None) -> list[dict]:
    """Our H200 LLM iterations (Hugging Face eager): the GPU's busy time per iteration (group
    ``<phase> gpu``) and the wall time (``<phase> wall``), as benchmarks/h200_serving.py predicts them."""
    hs = _bench("h200_serving")
    out = []
    for r in hs.predict_rows(hs.data_files(OURS / "serving")):
        out.append({"gpu": "h200", "group": f"{r['phase']} wall",
                    "time": (r["predicted_wall_ms"], r["measured_wall_ms"])})
        if "measured_gpu_ms" in r:
            out.append({"gpu": "h200", "group": f"{r['phase']} gpu", "time": (r["predicted_gpu_ms"], r["measured_gpu_ms"])})
    _tick(progress)
    return out


def h200_pairs(progress=None) -> list[dict]:
    """Our H200 co-located pairs: each job's speed from predictions alone (host speed per
    collection as fitted by benchmarks/h200_runs.py, read from its results file), ``CURRENT``
    constants as gpucast resolves them for the H200."""
    from gpucast.cluster import timeshare
    from gpucast.cluster.timeshare.pairs import predict, predicted_timelines

    hc = _bench("h200_colocation")
    solos, pairs, _ = hc.load(OURS)
    sp, _ = predict(pairs, predicted_timelines(solos), timeshare.CURRENT.on("h200"))
    _tick(progress)
    return [{"gpu": "h200", "group": "", "speed": (float(sp[i, k]), meas)}
            for k, p in enumerate(pairs) for i, meas in enumerate((p.speed_a, p.speed_b))]


def llm_foundry(sample: int | None = 40, progress=None) -> list[dict]:
    """llm-foundry's MPT FSDP runs on 8-128 A100-40GB: time per token per GPU (the reciprocal of
    tokens/s per GPU) and whether each run (every one ran) is predicted to fit; an even sample."""
    import gpucast
    from gpucast.learn.llm_foundry import read

    out = []
    for r in spread(read(MEASURED / "llm-foundry-a100-40gb"), sample):
        p = gpucast.predict(r.job(), "a100-40gb")
        out.append({"gpu": "a100-40gb", "group": r.model,
                    "time": (1.0 / float(p.plan["tokens_per_s_per_gpu"]), 1.0 / r.tokens_per_s_per_gpu),
                    "fits": _fits(p)})
        _tick(progress)
    return out


def llm_inference(sample: int | None = 40, progress=None) -> list[dict]:
    """LLM-Inference-Bench's static batches of vLLM and TensorRT-LLM on 1-4 A100-40GB: a batch's
    latency with the engines' prior host times (nothing fitted); an even sample per engine."""
    import gpucast

    li = _bench("llm_inference_a100")
    with open(MEASURED / "llm-inference-bench-a100" / "a100_serving.csv") as f:
        rows = [r for r in csv.DictReader(f) if li.job_of(r) is not None]
    out = []
    for eng in sorted(li.ENGINES):
        for r in spread([r for r in rows if r["framework"] == eng], None if sample is None else sample // 2):
            p = gpucast.predict(li.job_of(r), "a100-40gb")
            out.append({"gpu": "a100-40gb", "group": li.ENGINES[eng],
                        "time": (float(p.serving["latency_s"]), float(r["latency_s"]))})
            _tick(progress)
    return out


def nemo(sample: int | None = 10, progress=None) -> list[dict]:
    """NVIDIA's NeMo 24.07 FP8 training on DGX-H100: the share of recipes gpucast can express, time per
    token per GPU (the reciprocal of tokens/s per GPU) and whether each answered run (every one ran) is
    predicted to fit; an even sample (each row traces a model of 5-340 B parameters)."""
    nm = _bench("nemo_h100")
    out = []
    rows = spread(nm.read(MEASURED / "nemo-24.07-h100"), sample)
    for r in nm.predict_rows(rows, lambda: _tick(progress)):
        rec = {"gpu": nm.GPU, "group": r["task"], "answered": r["predicted"] is not None, "fits": r["fits"]}
        if r["predicted"] is not None:
            rec["time"] = (1.0 / r["predicted"], 1.0 / r["tokens_per_s_per_gpu"])
        out.append(rec)
    return out


def trtllm_v1(per_gpu: int | None = 3, progress=None) -> list[dict]:
    """TensorRT-LLM v1.0's published maximum-throughput runs (trtllm-bench): the share of rows gpucast can
    express, and over an even sample of those per GPU the deployment's time per output token (the
    reciprocal of its output tokens/s)."""
    tb = _bench("trtllm_v1")
    rows = tb.read(MEASURED / "trtllm-perf-overview-v1.0")
    expressible = [r for r in rows if tb.unanswered(r) is None]
    gpus = dict.fromkeys(r["gpu"] for r in expressible)
    picked = [q for g in gpus for q in spread([r for r in expressible if r["gpu"] == g], per_gpu)]
    out = [{"gpu": r["gpu"], "group": r["precision"], "answered": tb.unanswered(r) is None}
           for r in rows if not any(r is q for q in picked)]   # every row counts for the answered share
    for r in tb.predict_rows(picked, lambda: _tick(progress)):
        out.append({"gpu": r["gpu"], "group": r["precision"], "answered": True,
                    "time": (1.0 / max(r["predicted"], 1e-9), 1.0 / r["total_output_tokens_per_s"])})
    return out


def kernel_checks(progress=None) -> list[dict]:
    """Published GEMM and attention throughputs (each row cited in benchmarks/kernel_checks.py), as
    times (the reciprocal of TFLOP/s)."""
    kc = _bench("kernel_checks")
    out = [{"gpu": (d := kc.predict_row(row))["gpu"], "group": d["kind"],
            "time": (1.0 / d["predicted_tflops"], 1.0 / d["published_tflops"])} for row in kc.ROWS]
    _tick(progress)
    return out


def run(name: str) -> tuple[str, dict, float]:
    """One set's cells (:func:`gpucast.learn.gate.cells`) and seconds: what a worker process of the gate does."""
    import time
    import warnings

    from gpucast.learn import gate

    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    records = SETS[name][0](progress=None)
    return name, gate.cells(name, records), round(time.perf_counter() - t0, 1)


def one_thread() -> None:
    """A worker process's start: one torch thread (meta tensors compute nothing; the workers run side by side)."""
    import torch

    torch.set_num_threads(1)


def _tick(progress) -> None:
    if progress:
        progress()


# name -> (function, what it is: the table's note)
SETS = {
    "gpumemnet-mlp": (mlp, "GPUMemNet MLP training runs, A100-40GB (120 of 2,978, even per architecture)"),
    "lucid-solo": (lucid_solo, "Lucid solo training runs, RTX 3090 (35)"),
    "lucid-pairs": (lucid_pairs, "Lucid co-located pairs, RTX 3090, from predictions (335 pairs)"),
    "gavel-solo": (gavel_solo, "Gavel solo throughputs, K80/P100/V100 (78)"),
    "gavel-pairs": (gavel_pairs, "Gavel co-located pairs, K80/P100/V100"),
    "h200-runs": (h200_runs, "our H200 solo steps (228)"),
    "h200-kernels": (h200_kernels, "our H200 single kernels"),
    "h200-serving": (h200_serving, "our H200 LLM iterations, HF eager"),
    "h200-pairs": (h200_pairs, "our H200 co-located pairs (12)"),
    "llm-foundry": (llm_foundry, "llm-foundry MPT FSDP runs, 8-128 A100-40GB (40 of 78)"),
    "llm-inference-bench": (llm_inference, "LLM-Inference-Bench vLLM / TensorRT-LLM, A100-40GB (40 of 491)"),
    "nemo-h100": (nemo, "NeMo 24.07 Megatron-Core FP8 training, 8-512 H100 (10 of 18, even over pre-training, SFT, LoRA)"),
    "trtllm-v1": (trtllm_v1, "TensorRT-LLM v1.0 maximum throughput (trtllm-bench), H100-GB200 and RTX PRO 6000 "
                             "(3 of the expressible rows per GPU, every row counted for answered %)"),
    "kernel-checks": (kernel_checks, "published GEMM / attention throughputs, A100-B200"),
}
