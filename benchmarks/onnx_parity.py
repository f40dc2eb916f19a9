"""ONNX parity: every zoo workload exported to ONNX, costed through the ONNX path, against the
PyTorch trace of the same model.

For each zoo workload: export it (gpucast.graph.onnx.export.export_zoo), predict both jobs on one
GPU at one batch size, and compare FLOPs, bytes, kernels, predicted step time and peak memory;
report op coverage (share of dispatched ops with a cost rule) over all zoo traces and all ONNX
traces. Writes benchmarks/results/onnx_parity.md.

    python benchmarks/onnx_parity.py [--gpu a100-80gb] [--batch-size 32] [--only a,b]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from gpucast.surroundings import Data, Loop

# Both sides benchmark-style (inputs on the GPU): parity is about the graph, not the loader.
BENCH = dict(data=Data(source="device"), loop=Loop.benchmark())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--only", default="")
    ap.add_argument("--max-params", type=float, default=2e8,
                    help="skip models larger than this: exporting builds real CPU weights (4 bytes each)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "onnx_parity.md"))
    args = ap.parse_args(argv)

    from rich.progress import track

    from gpucast import zoo
    from gpucast.api import explain
    from gpucast.graph.onnx.export import export_zoo
    from gpucast.job import Job

    names = [n for n in zoo.names() if not args.only or n in args.only.split(",")]
    rows, failed = [], []
    ops = {"zoo": [0, 0], "onnx": [0, 0]}
    with tempfile.TemporaryDirectory() as tmp:
        for name in track(names, description="export + predict"):
            w = zoo.get(name)
            batch = min(args.batch_size, w.default_batch_size)
            z = explain(Job(model=name, batch_size=batch, **BENCH), args.gpu)
            if z.prediction.parameters > args.max_params:
                failed.append((name, f"skipped: {z.prediction.parameters / 1e6:.0f}M parameters > --max-params"))
                continue
            try:
                path = export_zoo(name, Path(tmp) / f"{name}.onnx")
            except Exception as exc:  # the exporter's own refusal
                failed.append((name, f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"))
                continue
            try:
                o = explain(Job.from_onnx(path, batch_size=batch, **BENCH), args.gpu)
            except Exception as exc:  # reported in the table's notes, not hidden
                failed.append((name, f"ONNX path failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"))
                continue
            for key, e in (("zoo", z), ("onnx", o)):
                ops[key][0] += sum(op.costed for op in e.trace.ops)
                ops[key][1] += len(e.trace.ops)
            zp, op_ = z.prediction, o.prediction
            rows.append(dict(name=name, batch=batch, flops=op_.flops / max(1, zp.flops),
                             bytes=op_.bytes / max(1, zp.bytes), kernels=(zp.kernels, op_.kernels),
                             step=op_.step_time_s / zp.step_time_s,
                             memory=op_.memory_peak_bytes / zp.memory_peak_bytes,
                             coverage=op_.op_coverage, uncosted=op_.uncosted_ops))
    lines = [f"# ONNX parity ({args.gpu}, training step, fp32)", "",
             f"Command: `python benchmarks/onnx_parity.py --gpu {args.gpu} --batch-size {args.batch_size}`  ",
             f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}", "",
             "Ratios are ONNX path / PyTorch trace of the same zoo model (1.000 = identical).", "",
             "| model | batch | FLOPs | bytes | kernels (torch/onnx) | step time | peak memory | op coverage |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['batch']} | {r['flops']:.3f} | {r['bytes']:.3f} | "
                     f"{r['kernels'][0]}/{r['kernels'][1]} | {r['step']:.3f} | {r['memory']:.3f} | "
                     f"{r['coverage']:.1%} |")
    within = sum(abs(r["step"] - 1) <= 0.10 for r in rows)
    lines += ["", f"Step time within 10%: {within} of {len(rows)} exported models; "
              f"median |step ratio - 1| = {statistics.median(abs(r['step'] - 1) for r in rows):.3f}; "
              f"FLOPs within 1%: {sum(abs(r['flops'] - 1) <= 0.01 for r in rows)} of {len(rows)}.", "",
              f"Op coverage (dispatched ops with a cost rule): zoo traces {ops['zoo'][0] / max(1, ops['zoo'][1]):.2%} "
              f"of {ops['zoo'][1]} ops; ONNX traces {ops['onnx'][0] / max(1, ops['onnx'][1]):.2%} "
              f"of {ops['onnx'][1]} ops.", ""]
    if failed:
        lines += ["Not compared (the exporter refused them, too large to export on this machine, or the ONNX "
                  "path failed):", ""]
        lines += [f"- {n}: {why}" for n, why in failed]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
