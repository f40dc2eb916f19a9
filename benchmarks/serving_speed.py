"""How fast the serving model answers: a 10,000-request Poisson run of a 70B model on 8 GPUs.

Llama-3-70B's published shape (config.json) in bf16 under vLLM with tensor parallelism 8 on H100s,
prompts ``lognormal:2048,0.6`` and outputs ``lognormal:256,0.6`` arriving at 8 requests a second:
the first prediction in the process (cold: the model built on the meta device, its iterations traced
on demand) and the median of ``--repeats`` more of the same deployment at other request rates (warm:
the traces and the iteration costs memoised). Target (issue 38): warm <= 2 s. Then ``advise --serve``
over 56 deployments of Llama-3-8B (target: 50+ in <= 20 s), cold and asked again, and over the 2026 search of
issue 54 (target: 100+ deployments in <= 30 s): a Mixtral-8x7B-shaped mixture of experts on H100, H200 and B200,
tensor 1-8, BF16 and FP8, vLLM, SGLang and TensorRT-LLM, tensor-parallel, attention-DP + expert-parallel and
disaggregated layouts, up to 4 replicas.

    .venv/bin/python benchmarks/serving_speed.py [--repeats 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LLAMA3_70B = dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                  num_attention_heads=64, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                  rope_theta=500000.0, tie_word_embeddings=False)


def job(rate: float):
    from gpucast.job import Job

    return Job.from_hf_config(LLAMA3_70B, batch_size=1, precision="bf16", mode="serve", gpus=8,
                              parallel=dict(tensor=8),
                              serve=dict(input_len="lognormal:2048,0.6", output_len="lognormal:256,0.6",
                                         request_rate=rate, num_requests=10_000))


LLAMA3_8B = dict(LLAMA3_70B, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32)
ADVISE_GPUS = ("l4", "a10", "a100-40gb", "a100-80gb", "h100", "h200", "b200")


def advise_run() -> tuple[float, int, str]:
    """``advise --serve`` over 56 deployments of Llama-3-8B (7 GPU types x tensor 1-8 x vLLM/SGLang) at
    4 Poisson requests/s (500 requests): seconds, options, the answer."""
    from gpucast.advisor.serving import advise_serving
    from gpucast.job import Job

    job = Job.from_hf_config(LLAMA3_8B, batch_size=1, precision="bf16", mode="serve",
                             serve=dict(input_len=1024, output_len=256, request_rate=4.0, num_requests=500))
    t = time.perf_counter()
    a = advise_serving(job, ADVISE_GPUS, tensors=(1, 2, 4, 8), engines=("vllm", "sglang"), ttft_s=2.0, tpot_s=0.05)
    return time.perf_counter() - t, len(a.options), a.message


MIXTRAL = dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
               vocab_size=32000, max_position_embeddings=32768, tie_word_embeddings=False)


def advise_moe() -> tuple[float, int, int, str]:
    """``advise --serve`` over the 2026 search (module docstring) at 8 Poisson requests/s (400 requests):
    seconds, options, predictions made (replica searches included), the answer."""
    from gpucast.advisor.serving import advise_serving
    from gpucast.api import predict
    from gpucast.job import Job

    calls = [0]

    def counted(job, gpu):
        calls[0] += 1
        return predict(job, gpu)
    job = Job.from_hf_config(MIXTRAL, batch_size=1, precision="bf16", mode="serve",
                             serve=dict(input_len=1024, output_len=256, request_rate=8.0, num_requests=400))
    t = time.perf_counter()
    a = advise_serving(job, ("h100", "h200", "b200"), tensors=(1, 2, 4, 8), precisions=("bf16", "fp8"),
                       engines=("vllm", "sglang", "trtllm"), layouts=("tp", "dep", "pd"), replicas=4,
                       ttft_s=2.0, tpot_s=0.05, predict=counted)
    return time.perf_counter() - t, len(a.options), calls[0], a.message


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import gpucast

    t = time.perf_counter()
    p = gpucast.predict(job(8.0), "h100")
    cold = time.perf_counter() - t
    warm = []
    for i in range(a.repeats):
        t = time.perf_counter()
        gpucast.predict(job(8.0 + 0.25 * (i + 1)), "h100")
        warm.append(time.perf_counter() - t)
    s = p.serving
    adv_s, adv_n, adv_msg = advise_run()
    adv_warm, _, _ = advise_run()  # again in the process: the traces and the iterations' GPU times memoised
    moe_s, moe_n, moe_calls, moe_msg = advise_moe()
    text = "\n".join([
        "# Serving model speed", "",
        f"`.venv/bin/python benchmarks/serving_speed.py` on {platform.processor() or platform.machine()} "
        f"({platform.python_version()}): Llama-3-70B bf16, vLLM, tensor 8 on H100, 10,000 Poisson requests at "
        "8/s (prompts lognormal mean 2,048, outputs mean 256).", "",
        "| run | seconds | iterations | TTFT p50 s | TPOT p50 ms | output tokens/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| cold (first in the process) | {cold:.1f} | {s['iterations']} | {s['ttft_s']:.2f} | {s['tpot_s'] * 1e3:.1f} | "
        f"{s['output_tokens_per_s']:.0f} |",
        f"| warm (median of {a.repeats}, other rates) | {statistics.median(warm):.2f} | | | | |", "",
        f"`advise --serve` over {adv_n} deployments of Llama-3-8B (7 GPU types x tensor 1, 2, 4, 8 x vLLM and "
        f"SGLang; 500 Poisson requests at 4/s; TTFT p90 <= 2 s, TPOT p90 <= 50 ms), the model's traces cold: "
        f"**{adv_s:.1f} s**; asked again in the process (traces and GPU times memoised): **{adv_warm:.1f} s** "
        f"(target 20 s). Answer: {adv_msg}.", "",
        f"`advise --serve` over the 2026 search (issue 54): {moe_n} deployments of a Mixtral-8x7B-shaped mixture "
        f"of experts (H100, H200, B200 x tensor 1, 2, 4, 8 x BF16, FP8 x vLLM, SGLang, TensorRT-LLM x tensor-"
        f"parallel, attention-DP + expert-parallel, disaggregated; up to 4 replicas; 400 Poisson requests at 8/s; "
        f"TTFT p90 <= 2 s, TPOT p90 <= 50 ms), {moe_calls} predictions with the replica searches, cold: "
        f"**{moe_s:.1f} s** (target: 100+ in 30 s). Answer: {moe_msg}.", ""])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "serving_speed.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
