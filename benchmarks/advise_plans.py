"""How fast ``gpucast advise`` searches parallel plans: a 70B-shaped Llama on H100s, up to 512 GPUs.

The job: a Llama-2/3-70B-shaped config (hidden 8192, intermediate 28672, 80 layers, 64 heads, 8
key/value heads, vocabulary 128256), sequence 4096, micro-batch 1, pure bf16, AdamW, written as it
would be trained on 64 GPUs with tensor parallelism 8 and 128 accumulated micro-batches: a global
batch of 1,024 sequences (4.2M tokens), which every plan keeps. ``gpucast.advise`` searches the
default plan space (1 GPU, then 8, 16, ..., 512; ddp, zero1, fsdp-full, fsdp-hybrid; tensor and
pipeline 1-8; recompute none/selective/full; micro-batch 1 and 2) on the H100 at the packaged
``cloud-2024`` price, 1,024,000 samples per epoch (1,000 optimizer steps).

Timed: the first call (two captures of the 80-layer graph on the meta device, one per
micro-batch, then the plans) and the warm calls after it (captures cached in the process),
median of ``--repeats``. Printed and written to ``--out`` (a Markdown file that starts with the
command): the number of plans predicted and considered, the times, the recommended plan and the
front.

Run (from the repository root)::

    .venv/bin/python benchmarks/advise_plans.py [--repeats 2] [--max-gpus 512] [--out FILE.md]

(default ``--out``: ``benchmarks/results/advise_plans.md``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LLAMA_70B = dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                 num_attention_heads=64, num_key_value_heads=8, vocab_size=128256)
SAMPLES_PER_EPOCH = 1_024_000


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-gpus", type=int, default=512)
    p.add_argument("--out", type=Path, default=RESULTS / "advise_plans.md")
    args = p.parse_args(argv)

    import gpucast
    from gpucast.advisor.units import duration, usd

    job = gpucast.Job.from_hf_config(LLAMA_70B, batch_size=1, seq_len=4096, precision="bf16", optimizer="adamw",
                                     gpus=64, parallel=dict(tensor=8, grad_accum=128))
    kw = dict(max_gpus=args.max_gpus, samples_per_epoch=SAMPLES_PER_EPOCH)
    t0 = time.perf_counter()
    a = gpucast.advise(job, ["h100"], **kw)
    first = time.perf_counter() - t0
    warm = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        again = gpucast.advise(job, ["h100"], **kw)
        warm.append(time.perf_counter() - t0)
        assert [o.id for o in again.options] == [o.id for o in a.options]  # the same search each time
    considered = next(n for n in a.notes if n.endswith("considered"))
    predicted = len(a.options)
    best = a.best
    cpu = platform.processor() or platform.machine()
    load = ", load average {:.1f}".format(os.getloadavg()[0]) if hasattr(os, "getloadavg") else ""
    command = " ".join([".venv/bin/python", "benchmarks/advise_plans.py", *argv])
    lines = [f"`{command}`", "",
             f"Machine: {os.cpu_count()} cores ({cpu}){load}, Python {platform.python_version()}, gpucast "
             f"{gpucast.__version__}. Job: 70B-shaped Llama, seq 4096, micro-batch 1, bf16, AdamW, global batch "
             f"{best.global_batch if best else '?'}; H100 at the packaged cloud-2024 price; up to {args.max_gpus} "
             f"GPUs; {SAMPLES_PER_EPOCH:,} samples per epoch. {considered}.", "",
             "| what | seconds |", "| --- | ---: |",
             f"| advise, first call (captures micro-batch 1 and 2, then {predicted} plans) | {first:.2f} |",
             f"| advise, warm (median of {args.repeats}; {predicted} plans) | {statistics.median(warm):.2f} |",
             f"| per plan, warm | {statistics.median(warm) / max(predicted, 1):.3f} |", "",
             f"{a.message}", ""]
    if best is not None:
        pl = best.plan
        lines += [f"Recommended plan: {best.gpus} H100 on {pl.nodes} nodes, tensor {pl.tensor} x pipeline "
                  f"{pl.pipeline} x data {pl.data}, {pl.sharding}, recompute {pl.recompute}, micro-batch "
                  f"{best.batch_size} x {best.accumulation} accumulated; {best.step_time_s:.2f} s per step, "
                  f"{pl.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, MFU {pl.mfu:.1%}, "
                  f"{best.memory_bytes / 2**30:.1f} GiB per GPU ({best.memory_fit}).", ""]
    lines += ["The front (time against cost per epoch):", "",
              "| plan | step s | tokens/s/GPU | MFU | epoch | $/epoch | GiB/GPU | memory |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for o in a.front_options:
        lines.append(f"| {o.id} | {o.step_time_s:.2f} | {o.plan.tokens_per_s_per_gpu:,.0f} | {o.plan.mfu:.1%} | "
                     f"{duration(o.epoch_s)} | {usd(o.cost_per_epoch)} | {o.memory_bytes / 2**30:.1f} | "
                     f"{o.memory_fit} |")
    lines += ["", "Notes:", ""] + [f"- {n}" for n in a.notes]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
