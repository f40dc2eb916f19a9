"""How fast a job runs on each MIG slice of a GPU, relative to the whole GPU, as gpucast predicts it.

For zoo workloads of different kinds (compute-bound convolutions and transformers, a
memory-bound recommender, a host-bound small MLP), every MIG profile of the A100-40GB and the
H200 (:mod:`gpucast.mig`): the predicted step time on the slice over the whole GPU's (``speed``,
1 = as fast as the whole GPU), whether the job fits the slice's memory, and the slice's shares of
SMs and memory bandwidth. Checked (printed, not asserted: benchmarks are not tests; the tests
check the same on two models): ``speed`` is monotone in the slice (a slice with at least the
compute and memory slices of another is at least as fast) and lies between the smaller of the
two shares and 1.

What decides it: a job whose kernel time is dominated by math slows with the slice's share of
SMs (the peaks scale with the SMs), one dominated by memory traffic with its share of bandwidth
(the memory slices), and one whose step is mostly host time (Python, the loader, launches) hardly
slows at all: the GPU was idle most of the step anyway. Analytic predictions, not measurements.

    .venv/bin/python benchmarks/mig_slices.py [--out benchmarks/results/mig_slices.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GPUS = ["a100-40gb", "h200"]
JOBS = [  # (label, Job fields)
    ("resnet50 b64 amp-bf16", dict(model="resnet50", batch_size=64, precision="amp-bf16")),
    ("bert-base b32 s128 amp-bf16", dict(model="bert-base", batch_size=32, seq_len=128, precision="amp-bf16")),
    ("gpt2 b8 s512 amp-bf16", dict(model="gpt2", batch_size=8, seq_len=512, precision="amp-bf16")),
    ("dlrm-small b2048", dict(model="dlrm-small", batch_size=2048)),
    ("resnet18-cifar b128", dict(model="resnet18-cifar", batch_size=128)),
    ("mlp-small b256", dict(model="mlp-small", batch_size=256)),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "mig_slices.md")
    args = ap.parse_args(argv)

    from rich.progress import track

    import gpucast
    from gpucast import Job, mig
    from gpucast.hardware import get_gpu

    rows, problems = [], []
    work = [(label, fields, gpu) for label, fields in JOBS for gpu in GPUS]
    for label, fields, gpu in track(work, description="predicting", transient=True):
        job = Job(**fields)
        whole = gpucast.predict(job, gpu=gpu)
        speed = {}
        for p in mig.profiles(gpu):
            s = get_gpu(p.full_name)
            pred = gpucast.predict(job, gpu=p.full_name)
            sm, bw = s.sm_count / get_gpu(gpu).sm_count, p.memory_slices / p.of_memory
            speed[p.name] = whole.step_time_s / pred.step_time_s
            if not min(sm, bw) * (1 - 1e-9) <= speed[p.name] <= 1 + 1e-9:
                problems.append(f"{label} on {p.full_name}: speed {speed[p.name]:.3f} outside [{min(sm, bw):.3f}, 1]")
            rows.append((label, gpu, p.name, sm, bw, speed[p.name], pred.step_time_s, pred.fits_in_memory,
                         pred.bottleneck, whole.bottleneck))
        for a in mig.profiles(gpu):
            for b in mig.profiles(gpu):
                if (a.compute_slices <= b.compute_slices and a.memory_slices <= b.memory_slices
                        and speed[a.name] > speed[b.name] + 1e-9):
                    problems.append(f"{label} on {gpu}: {a.name} faster than {b.name}")

    lines = ["## MIG slices: predicted speed relative to the whole GPU", "",
             f"Command: `python benchmarks/mig_slices.py`. Analytic predictions (`gpucast.mig` slices of the "
             "catalog GPUs), not measurements. `speed` = the whole GPU's step time over the slice's (1: as fast "
             "as the whole GPU); `SM share` and `BW share`: the slice's shares of SMs and memory bandwidth.", "",
             "| job | GPU | profile | SM share | BW share | speed | step ms | fits | bottleneck on the slice | on the whole GPU |",
             "|---|---|---|---:|---:|---:|---:|---|---|---|"]
    for label, gpu, prof, sm, bw, sp, step, fits, bn, bw_whole in rows:
        lines.append(f"| {label} | {gpu} | {prof} | {sm:.3f} | {bw:.3f} | {sp:.3f} | {step * 1e3:.1f} | "
                     f"{'yes' if fits else 'no'} | {bn} | {bw_whole} |")
    lines += ["", f"Monotone in the slice and within [min(SM share, BW share), 1]: "
              + ("yes, every job and profile." if not problems else "NO: " + "; ".join(problems)), "",
              f"Machine: `nproc` = {os.cpu_count()}, Python {platform.python_version()} (CPU only: no GPU is used).", ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
