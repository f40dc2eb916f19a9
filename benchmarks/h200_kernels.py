"""Kernel-level checks against OUR measurements: the kernel model's time for each GEMM, FP8 GEMM,
fused-attention and memory-bound kernel that ``scripts/device/kernel_times.py`` timed on a real H200
(``data/measurements/kernels/*.csv``, with its provenance beside it).

Each measured row is one op at one shape (CUDA-graph replays, median; the card at its boost clock:
short replays keep it there, NVML read 1,980 MHz after the GEMM section). The model costs the same op
(FLOPs by torch.utils.flop_counter's formulas, bytes of its operands) with
gpucast.estimate.kernels.kernel_times on the catalog's ``h200`` without its sustained clock (a burst,
as in benchmarks/kernel_checks.py). SDPA backends map to the model's kernels: ``flash`` (PyTorch's
FlashAttention-2) -> ``flash2``; ``cudnn`` (cuDNN's fused attention) -> ``cudnn``; ``default`` -> the
kernel the model picks for PyTorch 2.11 on a Hopper GPU when the job names none (``stack.torch=2.11``:
cuDNN's, gpucast.estimate.achieved.attention_kernel; its rows match the ``cudnn`` ones).

The table groups rows (median and spread of predicted / measured time); the JSON has every row.

    .venv/bin/python benchmarks/h200_kernels.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
DATA = REPO_ROOT / "data" / "measurements" / "kernels"
RESULTS = REPO_ROOT / "benchmarks" / "results"

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32", "fp8": "float8_e4m3fn"}
PRECISION = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp32": "fp32", "fp8": "fp8"}
ATTENTION = {"flash": "flash2", "cudnn": "cudnn", "default": None}  # None: stack.torch 2.11's default


def _trace(op, precision):
    from gpucast.graph.trace import MemoryReport, Trace

    return Trace("check", "check", "infer", precision, 1, [op], MemoryReport(0, 0, 0, "fwd", {}, {}), 0, 0, 0)


def _memory_op(name: str, dtype: str, shape: str):
    from gpucast.graph.trace import OpRecord

    size = 2 if dtype == "bf16" else 4
    dims = tuple(int(x) for x in shape.split("x"))
    n = 1
    for d in dims:
        n *= d
    reads = {"add": 2, "copy": 1}.get(name, 1)
    aten_name = {"softmax": "_softmax", "layernorm": "native_layer_norm"}.get(name, name)
    category = {"softmax": "softmax", "layernorm": "norm"}.get(name, "elementwise")
    return OpRecord(0, "fwd", aten_name, category, (dims,) * reads, (dims,), "bfloat16" if size == 2 else "float32",
                    n if name == "add" else 0, reads * n * size, n * size, 1)


CONV_LAYERS = {  # scripts/device/kernel_times.py's layers: (cin, cout, k, stride, hw, groups)
    "r50.conv1": (3, 64, 7, 2, 224, 1), "r50.l1.3x3": (64, 64, 3, 1, 56, 1), "r50.l1.1x1up": (64, 256, 1, 1, 56, 1),
    "r50.l2.3x3": (128, 128, 3, 1, 28, 1), "r50.l3.3x3": (256, 256, 3, 1, 14, 1), "r50.l4.3x3": (512, 512, 3, 1, 7, 1),
    "r50.l4.1x1down": (2048, 512, 1, 1, 7, 1), "cifar.3x3": (64, 64, 3, 1, 32, 1),
    "mbv2.dw3x3": (144, 144, 3, 1, 56, 144), "vgg.3x3": (256, 256, 3, 1, 56, 1)}


def _recorded(build, backward: bool):
    """The ops gpucast's tracer records for what ``build()`` runs on the meta device as CUDA would run it
    (gpucast.graph.mirror; its forward, with ``backward`` then the gradient of its output), as a trace:
    the same records a traced job has."""
    import torch

    from gpucast.graph.mirror import CudaMirror
    from gpucast.graph.trace import MemoryReport, Trace
    from gpucast.graph.tracer import _Recorder

    rec = _Recorder()
    with torch.device("meta"):
        fn, inputs = build()
        with rec, CudaMirror():
            out = fn()
            if backward:
                rec.phase = "bwd"
                torch.autograd.grad(out, inputs, torch.ones_like(out))
    ops = [o for o in rec.ops if o.kernels > 0 or o.flops > 0]
    for i, o in enumerate(ops):
        o.index = i
    return Trace("check", "check", "train" if backward else "infer", "bf16", 1, ops,
                 MemoryReport(0, 0, 0, "fwd", {}, {}), 0, 0, 0)


def _module_row(row: dict):
    """(trace, precision) for a conv / batchnorm / norms / decode_attention row, or None."""
    import torch
    import torch.nn.functional as F

    section, op, dt, shape = row["section"], row["op"], row["dtype"], row["shape"]
    dtype = torch.bfloat16 if dt == "bf16" else torch.float32
    if section == "conv":
        name, n = shape.split()[:2]  # the first collection named no layout (channels-last bf16)
        cin, cout, k, st, hw, g = CONV_LAYERS[name]
        n = int(n[1:])

        fmt = torch.contiguous_format if "nchw" in shape else torch.channels_last  # no word: channels-last

        def build():  # the layout as measured (cuDNN transposes NCHW half-precision tensors: graph.layouts)
            x = torch.empty(n, cin, hw, hw, dtype=dtype).to(memory_format=fmt).requires_grad_(True)
            w = torch.empty(cout, cin // g, k, k, dtype=dtype).to(memory_format=fmt).requires_grad_(True)
            return (lambda: F.conv2d(x, w, None, st, k // 2, 1, g)), (x, w)
        return _recorded(build, op == "fwd+bwd"), "bf16" if dt == "bf16" else "fp32"
    if section == "batchnorm":
        dims = tuple(int(v) for v in shape.split()[0].split("x"))

        def build():  # autocast keeps BatchNorm in the input's dtype with fp32 parameters
            x = torch.empty(dims, dtype=dtype, requires_grad=True)
            w, b = (torch.empty(dims[1], requires_grad=True) for _ in range(2))
            rm, rv = torch.empty(dims[1]), torch.empty(dims[1])
            return (lambda: torch.relu(F.batch_norm(x, rm, rv, w, b, True))), (x, w, b)
        return _recorded(build, op.endswith("fwd+bwd")), "bf16" if dt == "bf16" else "fp32"
    if section == "norms":
        dims = tuple(int(v) for v in shape.split()[0].split("x"))

        def build():
            x = torch.empty(dims, dtype=dtype)
            if op == "softmax":
                return (lambda: torch.softmax(x, -1)), (x,)
            if op in ("layernorm", "rmsnorm"):
                w = torch.empty(dims[-1], dtype=dtype)
                if op == "layernorm":
                    return (lambda: F.layer_norm(x, dims[-1:], w, w)), (x,)
                return (lambda: F.rms_norm(x, dims[-1:], w, 1e-5)), (x,)
            if op == "relu":
                return (lambda: torch.relu(x)), (x,)
            y = torch.empty(dims, dtype=dtype)
            return (lambda: x + y), (x,)
        return _recorded(build, False), "bf16" if dt == "bf16" else "fp32"
    if section == "decode_attention" and row["backend"] in ("default", "flash"):
        b, hq_hkv, ctx, d = shape.split("x")
        hq, hkv = (int(v) for v in hq_hkv.split("/"))
        b, ctx, d = int(b), int(ctx), int(d)

        def build():
            q = torch.empty(b, hq, 1, d, dtype=dtype)
            k, v = (torch.empty(b, hkv, ctx, d, dtype=dtype) for _ in range(2))
            return (lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)), (q,)
        return _recorded(build, False), "bf16"
    return None


def predict(row: dict) -> float | None:
    """Predicted seconds for a measured row, or None where the model has no such op here."""
    import kernel_checks as kc

    from gpucast.estimate.constants import DEFAULT
    from gpucast.estimate.kernels import kernel_times
    from gpucast.hardware import get_gpu
    from gpucast.surroundings import Stack

    gpu = dataclasses.replace(get_gpu("h200"), sustained_clock_mhz=None)
    section, op, dt, shape = row["section"], row["op"], row["dtype"], row["shape"]
    stack = None
    if section == "gemm" and op in ("mm", "scaled_mm"):
        m, k, n = (int(x) for x in shape.split("x"))
        rec = kc._op("gemm", (m, n, k), DTYPES[dt])
        precision = PRECISION[dt]
    elif section == "attention" and row["backend"] in ATTENTION and op == "sdpa_fwd":
        b, h, s, d = (int(x) for x in shape.split()[0].split("x"))
        rec = kc._op("attention", (b, h, s, d), "bfloat16")
        rec = dataclasses.replace(rec, flops=rec.flops // 2)  # causal: half the scores (the measured row's count)
        kernel = ATTENTION[row["backend"]]
        precision, stack = "bf16", (Stack(attention=kernel) if kernel else Stack(torch="2.11"))
    elif section == "memory" and op in ("copy", "add", "gelu", "softmax", "layernorm"):
        rec = _memory_op(op, dt, shape)
        precision = "bf16" if dt == "bf16" else "fp32"
    else:
        got = _module_row(row)
        if got is None:
            return None
        trace, precision = got
        return float(kernel_times(trace, gpu, precision, DEFAULT, Stack()).time.sum())
    return float(kernel_times(_trace(rec, precision), gpu, precision, DEFAULT, stack or Stack()).time[0])


def group_of(row: dict) -> str:
    s, op, dt = row["section"], row["op"], row["dtype"]
    if s == "gemm":
        m = int(row["shape"].split("x")[0])
        size = "M <= 64" if m <= 64 else ("M 512-2048" if m <= 2048 else "M >= 3072")
        return f"GEMM {dt}, {size}"
    if s == "attention":
        return f"attention fwd, {row['backend']} -> {ATTENTION[row['backend']] or 'torch 2.11 default'}"
    if s == "conv":
        name, n, layout = (row["shape"].split() + ["nhwc"])[:3]
        kind = "depthwise" if name.startswith("mbv2") else ("7x7 stem" if name.endswith("conv1") else "dense")
        return f"conv {kind} {row['op']}, {dt} {layout}"
    if s == "batchnorm":
        return f"BatchNorm+ReLU {row['op'].removeprefix('bn+relu_')}, {dt} {row['shape'].split()[1]}"
    if s == "decode_attention":
        return f"decode attention (GQA), {row['backend']}"
    if s == "norms":
        return f"{op} {dt} (norms section)"
    n = 1
    for d in row["shape"].split()[0].split("x"):
        n *= int(d)
    size = "< 1M elements" if n < 2 ** 20 else ("1M-16M" if n <= 2 ** 24 else "> 16M")
    return f"{op} {dt}, {size}"


def predict_rows(files: list[Path]) -> list[dict]:
    """Every measured row of ``files`` the model has an op for, with its predicted time."""
    out = []
    for f in files:
        for row in csv.DictReader(f.open()):
            if not row["median_us"]:
                continue
            t = predict(row)
            if t is None:
                continue
            meas = float(row["median_us"]) * 1e-6
            out.append({"file": f.name, "section": row["section"], "op": row["op"], "dtype": row["dtype"],
                        "shape": row["shape"], "backend": row["backend"], "measured_us": round(meas * 1e6, 3),
                        "predicted_us": round(t * 1e6, 3), "ratio": round(t / meas, 4), "group": group_of(row)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--data", type=Path, default=DATA)
    a = ap.parse_args(argv)
    files = sorted(a.data.glob("*.csv"))
    if not files:
        print(f"error: no kernel measurements under {a.data}", file=sys.stderr)
        return 2
    out = predict_rows(files)
    groups: dict[str, list[float]] = {}
    for r in out:
        groups.setdefault(r["group"], []).append(r["ratio"])
    lines = ["# Kernel model vs kernels measured on an H200",
             "",
             f"`.venv/bin/python benchmarks/h200_kernels.py` over {', '.join(f.name for f in files)} "
             "(data/measurements/kernels: measured by scripts/device/kernel_times.py; predicted: "
             "gpucast.estimate.kernels at the boost clock). Ratio = predicted / measured time "
             "(< 1: the model is too fast).",
             "",
             "| group | rows | median ratio | min | max | within 15 % |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for g in sorted(groups, key=lambda g: (g.split()[0], g)):
        v = sorted(groups[g])
        ok = sum(abs(x - 1) <= 0.15 for x in v)
        lines.append(f"| {g} | {len(v)} | {statistics.median(v):.2f} | {v[0]:.2f} | {v[-1]:.2f} | {ok} / {len(v)} |")
    allr = [r["ratio"] for r in out]
    lines += ["", f"All {len(allr)} rows: median ratio {statistics.median(allr):.2f}, "
              f"{sum(abs(x - 1) <= 0.15 for x in allr)} within 15 %."]
    text = "\n".join(lines) + "\n"
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "h200_kernels.json").write_text(json.dumps(out, indent=1) + "\n")
    (a.out / "h200_kernels.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
