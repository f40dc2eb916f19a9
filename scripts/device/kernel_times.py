"""Kernel-level timings on the lent GPU: GEMMs, convolutions, fused attention, memory-bound ops, launches.

What it measures (one row per kernel call shape, written to a CSV as each row finishes):

* ``gemm``: ``torch.mm`` / ``torch.bmm`` in bf16, fp16, tf32 and fp32 and ``torch._scaled_mm`` in
  FP8 (E4M3 x E4M3 -> bf16) at square sizes and at the shapes of LLM layers (tokens x hidden,
  whole and split as tensor parallelism splits them, the vocabulary head), M = 1 (decode) to 16,384.
* ``conv``: cuDNN convolutions of ResNet-50/CIFAR/MobileNet layers (forward; forward + backward),
  bf16 channels-last and channels-first (autocast CNNs run channels-first) and fp32 (cuDNN's default
  TF32), ``cudnn.benchmark`` on as trainers set it.
* ``attention``: ``scaled_dot_product_attention`` (causal) per backend (flash, cuDNN, efficient and
  the default choice), forward and forward + backward.
* ``batchnorm``: training-mode BatchNorm2d + ReLU at ResNet-50's activation shapes (forward; forward +
  backward), fp32 and bf16 under autocast, channels-first and channels-last.
* ``memory``: copy, add, GELU, softmax, LayerNorm over 2^14 to 2^30 elements (how bandwidth fills).
* ``norms``: softmax over rows of 128 to 32,768 (a fixed 2^26 elements), LayerNorm and RMSNorm at
  LLM activation shapes (tokens x hidden), ReLU and a residual add at CNN activation shapes NCHW.
* ``decode_attention``: ``scaled_dot_product_attention`` of one new token per sequence against a KV
  cache of L tokens (grouped-query heads as Llama-3-8B: 32 query, 8 KV heads of 128), per backend;
  bytes are the K and V read once.
* ``launch``: a one-element add eager (host time per call) and replayed from a CUDA graph.

Method (convolutions excepted: each call timed alone between events, after cuDNN's autotuning):
warm-up calls, then the call repeated n times inside one CUDA graph (n sized so one replay
takes ~2 ms; this removes launch gaps, as a training step's back-to-back kernels have few), the
graph replayed 7 times between CUDA events; the row holds the median per call and the spread.
Inputs are random normal (METHOD.md: never zeros). Small inputs stay in L2 across repeats, as
weights do in a real step. Clocks are never changed: the SM clock NVML reads before and after each
section is recorded with every row. Analytic numbers are not written here.

Usage on the device machine: ``python3 scripts/device/kernel_times.py --out $OUT/kernels.csv``; here, on
a CPU, ``--cpu`` runs a handful of tiny shapes through the same code (a check of the script only).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
import traceback

import torch

from gpu_clock import open_nvml  # noqa: E402 - beside this script
import torch.nn.functional as F

FIELDS = ["section", "op", "dtype", "shape", "flops", "bytes", "median_us", "p10_us", "p90_us", "n_inner",
          "tflops", "gbps", "backend", "sm_clock_mhz", "note"]


class Bench:
    def __init__(self, device: str, out: str, budget_s: float):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.f = open(out, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=FIELDS)
        self.w.writeheader()
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.clock = None
        self.nvml = open_nvml() if self.cuda else None
        self.rows = 0
        self.failures = 0

    def over(self) -> bool:
        return time.monotonic() - self.t0 > self.budget_s

    def read_clock(self):
        return None if self.nvml is None else self.nvml.sm_clock_mhz()

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time_fn(self, fn, graph: bool = True) -> tuple[float, float, float, int]:
        """Median, p10, p90 microseconds per call of ``fn`` and the calls per graph replay (``graph=False``:
        each call timed alone between events, for work a CUDA graph cannot capture)."""
        for _ in range(3):
            fn()
        self.sync()
        if self.cuda and not graph:
            ts = []
            for _ in range(9):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1) * 1e3)
            ts.sort()
            return statistics.median(ts), ts[1], ts[-2], 1
        if not self.cuda:
            ts = []
            for _ in range(5):
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e6)
            ts.sort()
            return statistics.median(ts), ts[0], ts[-1], 1
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        one_ms = max(e0.elapsed_time(e1), 1e-4)
        n = int(min(max(math.ceil(2.0 / one_ms), 1), 400))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(7):
            e0.record()
            g.replay()
            e1.record()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e3 / n)
        del g
        ts.sort()
        return statistics.median(ts), ts[1], ts[-2], n

    def row(self, section, op, dtype, shape, flops, nbytes, fn, backend="", note="", graph=True):
        if self.over():
            return
        try:
            med, p10, p90, n = self.time_fn(fn, graph)
        except Exception as e:  # one shape failing (unsupported dtype, OOM) is a row, not the end
            self.failures += 1
            self.w.writerow({"section": section, "op": op, "dtype": dtype, "shape": shape, "flops": flops,
                             "bytes": nbytes, "backend": backend,
                             "note": f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"})
            self.f.flush()
            if self.cuda:
                torch.cuda.empty_cache()
            return
        sec = med * 1e-6
        self.w.writerow({"section": section, "op": op, "dtype": dtype, "shape": shape, "flops": flops,
                         "bytes": nbytes, "median_us": f"{med:.3f}", "p10_us": f"{p10:.3f}",
                         "p90_us": f"{p90:.3f}", "n_inner": n,
                         "tflops": f"{flops / sec / 1e12:.2f}" if flops else "",
                         "gbps": f"{nbytes / sec / 1e9:.1f}" if nbytes else "",
                         "backend": backend, "sm_clock_mhz": self.clock, "note": note})
        self.f.flush()
        self.rows += 1

    def section(self, name):
        self.clock = self.read_clock()
        print(f"[{time.monotonic() - self.t0:6.1f} s] {name} (SM clock {self.clock} MHz, rows so far {self.rows})",
              flush=True)


def rnd(*shape, dtype, device):
    return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)


DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}


def gemms(b: Bench, quick: bool):
    dev = b.device
    b.section("gemm")
    sizes = [256, 1024] if quick else [256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384]
    cases = [("bf16", n, n, n) for n in sizes]
    if not quick:
        cases += [(d, n, n, n) for d in ("fp16", "tf32") for n in (1024, 4096, 8192)]
        cases += [("fp32", n, n, n) for n in (1024, 4096)]
        # LLM layers: M tokens x (K -> N) for hidden h; tensor-parallel splits of 2 and 4.
        for h in (1024, 2048, 4096, 8192):
            ff = {1024: 4096, 2048: 8192, 4096: 14336, 8192: 28672}[h]
            kn = [(h, 3 * h), (h, h), (h, ff), (ff, h), (h, 3 * h // 4), (h // 4, h), (h, ff // 4), (ff // 4, h),
                  (h, 3 * h // 2), (h // 2, h)]
            for m in (1, 8, 64, 512, 2048, 8192, 16384):
                if h == 8192 and m == 16384:
                    continue
                cases += [("bf16", m, k, n) for k, n in kn]
        for h, v in ((2048, 128256), (4096, 128256), (1024, 50304)):
            cases += [("bf16", m, h, v) for m in (1, 64, 2048, 8192)]
    for dt, m, k, n in cases:
        if b.over():
            return
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        a, w = rnd(m, k, dtype=DT[dt], device=dev), rnd(k, n, dtype=DT[dt], device=dev)
        out = torch.empty(m, n, dtype=DT[dt], device=dev)
        es = a.element_size()
        b.row("gemm", "mm", dt, f"{m}x{k}x{n}", 2 * m * n * k, es * (m * k + k * n + m * n),
              lambda: torch.mm(a, w, out=out))
        del a, w, out
    torch.backends.cuda.matmul.allow_tf32 = False
    # batched GEMM as attention's unfused path runs it (B*H, S, D) x (D, S)
    for bh, s, d in ([(8, 128, 64)] if quick else [(96, 512, 64), (256, 1024, 64), (128, 2048, 128), (32, 4096, 128)]):
        a, w = rnd(bh, s, d, dtype=torch.bfloat16, device=dev), rnd(bh, d, s, dtype=torch.bfloat16, device=dev)
        b.row("gemm", "bmm", "bf16", f"{bh}x{s}x{d}x{s}", 2 * bh * s * s * d, 2 * bh * (2 * s * d + s * s),
              lambda: torch.bmm(a, w))
        del a, w
    # FP8 (Transformer Engine's forward GEMM: E4M3 x E4M3, per-tensor scales, bf16 out)
    if b.cuda and torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "float8_e4m3fn"):
        fp8 = [(n, n, n) for n in (1024, 2048, 4096, 8192, 16384)] + [(m, 4096, 14336) for m in (512, 2048, 8192)] \
            + [(m, 14336, 4096) for m in (512, 2048, 8192)] + [(m, 8192, 28672) for m in (2048, 8192)]
        one = torch.ones((), device=dev, dtype=torch.float32)
        for m, k, n in fp8:
            if b.over():
                return
            a = rnd(m, k, dtype=torch.bfloat16, device=dev).to(torch.float8_e4m3fn)
            w = rnd(n, k, dtype=torch.bfloat16, device=dev).to(torch.float8_e4m3fn).t()  # column-major
            b.row("gemm", "scaled_mm", "fp8", f"{m}x{k}x{n}", 2 * m * n * k, m * k + k * n + 2 * m * n,
                  lambda: torch._scaled_mm(a, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            del a, w


def convs(b: Bench, quick: bool):
    dev = b.device
    b.section("conv")
    torch.backends.cudnn.benchmark = True
    # (name, cin, cout, k, stride, hw, groups)
    layers = [("r50.conv1", 3, 64, 7, 2, 224, 1), ("r50.l1.3x3", 64, 64, 3, 1, 56, 1),
              ("r50.l1.1x1up", 64, 256, 1, 1, 56, 1), ("r50.l2.3x3", 128, 128, 3, 1, 28, 1),
              ("r50.l3.3x3", 256, 256, 3, 1, 14, 1), ("r50.l4.3x3", 512, 512, 3, 1, 7, 1),
              ("r50.l4.1x1down", 2048, 512, 1, 1, 7, 1), ("cifar.3x3", 64, 64, 3, 1, 32, 1),
              ("mbv2.dw3x3", 144, 144, 3, 1, 56, 144), ("vgg.3x3", 256, 256, 3, 1, 56, 1)]
    if quick:
        layers = layers[7:8]
    batches = (2,) if quick else (32, 256)
    for name, cin, cout, k, st, hw, g in layers:
        for n in batches:
            if name.startswith("cifar") and n == 32:
                n = 128
            for dt, fmt in (((("fp32", torch.contiguous_format),) if quick else
                             (("bf16", torch.channels_last), ("bf16", torch.contiguous_format),
                              ("fp32", torch.contiguous_format)))):
                if b.over():
                    return
                layout = "nhwc" if fmt == torch.channels_last else "nchw"
                x = rnd(n, cin, hw, hw, dtype=DT[dt], device=dev).to(memory_format=fmt)
                conv = torch.nn.Conv2d(cin, cout, k, st, k // 2, groups=g, bias=False).to(dev, DT[dt]).to(
                    memory_format=fmt)
                ho = (hw + 2 * (k // 2) - k) // st + 1
                flops = 2 * n * cout * ho * ho * (cin // g) * k * k
                es = x.element_size()
                nbytes = es * (x.numel() + conv.weight.numel() + n * cout * ho * ho)
                # cuDNN's autotuning (benchmark mode) and autograd do not belong in a CUDA graph
                # capture (a capture of the backward broke the RNG state on the H200, 2026-12-04):
                # each call is timed alone between events; these kernels run far past launch cost.
                with torch.no_grad():
                    b.row("conv", "fwd", dt, f"{name} n{n} {layout}", flops, nbytes, lambda: conv(x), graph=False)
                xg = x.detach().requires_grad_(True)
                y = conv(xg)
                gy = torch.randn_like(y)

                def fb():
                    torch.autograd.grad(conv(xg), (xg, conv.weight), gy)
                b.row("conv", "fwd+bwd", dt, f"{name} n{n} {layout}", 3 * flops, 3 * nbytes, fb, graph=False)
                del x, conv, xg, y, gy


def batchnorm(b: Bench, quick: bool):
    """Training-mode BatchNorm2d (+ ReLU) at ResNet-50's activation shapes, channels-first and -last,
    fp32 and bf16 inputs under autocast (its parameters stay fp32, as a CNN trained with AMP has them)."""
    dev = b.device
    b.section("batchnorm")
    shapes = [(2, 8, 8, 8)] if quick else [(128, 64, 112, 112), (128, 256, 56, 56), (128, 128, 28, 28),
                                           (128, 512, 28, 28), (128, 1024, 14, 14), (128, 2048, 7, 7),
                                           (256, 64, 32, 32)]
    for n, c, h, w in shapes:
        for dt, fmt in ((("fp32", torch.contiguous_format),) if quick else
                        (("fp32", torch.contiguous_format), ("bf16", torch.contiguous_format),
                         ("bf16", torch.channels_last))):
            if b.over():
                return
            layout = "nhwc" if fmt == torch.channels_last else "nchw"
            x = rnd(n, c, h, w, dtype=DT[dt], device=dev).to(memory_format=fmt).requires_grad_(True)
            bn = torch.nn.BatchNorm2d(c).to(dev).to(memory_format=fmt)
            es = x.element_size()
            nbytes = 2 * es * x.numel()
            amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=dt == "bf16" and b.cuda)

            def fwd():
                with amp:
                    return torch.relu(bn(x))
            y = fwd()
            gy = torch.randn_like(y)

            def fb():
                with amp:
                    out = torch.relu(bn(x))
                torch.autograd.grad(out, (x, bn.weight, bn.bias), gy)
            b.row("batchnorm", "bn+relu_fwd", dt, f"{n}x{c}x{h}x{w} {layout}", 0, nbytes, fwd, graph=False,
                  note="train-mode BatchNorm2d then ReLU; bytes: one read and one write of the activation")
            b.row("batchnorm", "bn+relu_fwd+bwd", dt, f"{n}x{c}x{h}x{w} {layout}", 0, 3 * nbytes, fb, graph=False)
            del x, bn, y, gy


def attention(b: Bench, quick: bool):
    dev = b.device
    b.section("attention")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                    ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    except Exception:
        backends = [("default", None)]
        sdpa_kernel = None
    shapes = [(2, 4, 128, 64)] if quick else [(16, 12, 512, 64), (8, 16, 1024, 64), (4, 32, 2048, 128),
                                               (2, 32, 4096, 128), (1, 32, 8192, 128), (1, 64, 2048, 128),
                                               (32, 32, 128, 128)]
    dt = torch.bfloat16 if b.cuda else torch.float32
    for bs, h, s, d in shapes:
        q, k, v = (rnd(bs, h, s, d, dtype=dt, device=dev) for _ in range(3))
        flops = 4 * bs * h * s * s * d // 2  # causal: half the score matrix
        nbytes = 4 * q.numel() * q.element_size()
        for name, be in backends:
            if b.over():
                return
            ctx = (lambda: sdpa_kernel(be)) if be is not None else None

            def fwd():
                if ctx is None:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                with ctx():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            with torch.no_grad():
                b.row("attention", "sdpa_fwd", "bf16", f"{bs}x{h}x{s}x{d} causal", flops, nbytes, fwd, backend=name)
            qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
            go = torch.randn_like(q)

            def fb():
                if ctx is None:
                    o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
                    return torch.autograd.grad(o, (qg, kg, vg), go)
                with ctx():
                    o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
                    return torch.autograd.grad(o, (qg, kg, vg), go)
            b.row("attention", "sdpa_fwd+bwd", "bf16", f"{bs}x{h}x{s}x{d} causal", int(3.5 * flops), 3 * nbytes, fb,
                  backend=name)
            del qg, kg, vg, go
        del q, k, v


def memory(b: Bench, quick: bool):
    dev = b.device
    b.section("memory")
    exps = (10, 14) if quick else (14, 16, 18, 20, 22, 24, 26, 28, 30)
    for e in exps:
        n = 2 ** e
        for dt in ("bf16", "fp32"):
            if b.over():
                return
            if dt == "fp32" and e == 30:
                continue
            x, y = rnd(n, dtype=DT[dt], device=dev), rnd(n, dtype=DT[dt], device=dev)
            out = torch.empty_like(x)
            es = x.element_size()
            b.row("memory", "copy", dt, f"{n}", 0, 2 * es * n, lambda: out.copy_(x))
            b.row("memory", "add", dt, f"{n}", n, 3 * es * n, lambda: torch.add(x, y, out=out))
            b.row("memory", "gelu", dt, f"{n}", 0, 2 * es * n, lambda: F.gelu(x))
            rows = max(n // 4096, 1)
            x2 = x.view(rows, -1)
            b.row("memory", "softmax", dt, f"{rows}x{x2.shape[1]}", 0, 2 * es * n, lambda: torch.softmax(x2, -1))
            ln = torch.nn.LayerNorm(x2.shape[1], device=dev, dtype=DT[dt])
            with torch.no_grad():
                b.row("memory", "layernorm", dt, f"{rows}x{x2.shape[1]}", 0, 2 * es * n, lambda: ln(x2))
            del x, y, out, x2, ln


def norms(b: Bench, quick: bool):
    dev = b.device
    b.section("norms")
    dt = torch.bfloat16 if b.cuda else torch.float32
    total = 2 ** 12 if quick else 2 ** 26
    for cols in ((64,) if quick else (128, 512, 1024, 4096, 8192, 32768)):
        if b.over():
            return
        x = rnd(total // cols, cols, dtype=dt, device=dev)
        b.row("norms", "softmax", "bf16", f"{total // cols}x{cols}", 0, 2 * x.element_size() * total,
              lambda: torch.softmax(x, -1))
        del x
    for tokens, hidden in (((8, 64),) if quick else ((1, 4096), (64, 4096), (2048, 4096), (8192, 4096),
                                                      (16384, 2048), (4096, 8192))):
        if b.over():
            return
        x = rnd(tokens, hidden, dtype=dt, device=dev)
        w = torch.ones(hidden, dtype=dt, device=dev)
        nbytes = 2 * x.element_size() * x.numel()
        with torch.no_grad():
            b.row("norms", "layernorm", "bf16", f"{tokens}x{hidden}", 0, nbytes,
                  lambda: F.layer_norm(x, (hidden,), w, w))
            b.row("norms", "rmsnorm", "bf16", f"{tokens}x{hidden}", 0, nbytes,
                  lambda: F.rms_norm(x, (hidden,), w, 1e-5))
        del x, w
    for n, c, hw in (((2, 4, 8),) if quick else ((128, 64, 112), (128, 256, 56), (128, 512, 28), (128, 1024, 14),
                                                 (256, 64, 32))):
        for dtn in ("fp32", "bf16"):
            if b.over():
                return
            x, y = rnd(n, c, hw, hw, dtype=DT[dtn], device=dev), rnd(n, c, hw, hw, dtype=DT[dtn], device=dev)
            es = x.element_size()
            b.row("norms", "relu", dtn, f"{n}x{c}x{hw}x{hw} nchw", 0, 2 * es * x.numel(), lambda: torch.relu(x))
            b.row("norms", "add", dtn, f"{n}x{c}x{hw}x{hw} nchw", x.numel(), 3 * es * x.numel(), lambda: x + y)
            del x, y


def decode_attention(b: Bench, quick: bool):
    dev = b.device
    b.section("decode_attention")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                    ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    except Exception:
        backends, sdpa_kernel = [("default", None)], None
    dt = torch.bfloat16 if b.cuda else torch.float32
    hq, hkv, d = (4, 2, 16) if quick else (32, 8, 128)
    cases = [(1, 64)] if quick else [(1, 512), (1, 4096), (1, 32768), (8, 2048), (8, 8192), (32, 1024),
                                     (32, 4096), (64, 2048), (128, 1024), (128, 4096), (256, 2048)]
    for bs, ctx in cases:
        q = rnd(bs, hq, 1, d, dtype=dt, device=dev)
        k, v = (rnd(bs, hkv, ctx, d, dtype=dt, device=dev) for _ in range(2))
        flops = 4 * bs * hq * ctx * d
        nbytes = 2 * k.numel() * k.element_size()
        for name, be in backends:
            if b.over():
                return

            def fwd():
                if be is None:
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            with torch.no_grad():
                b.row("decode_attention", "sdpa_decode", "bf16", f"{bs}x{hq}/{hkv}x{ctx}x{d}", flops, nbytes, fwd,
                      backend=name, note="one query token per sequence, GQA (enable_gqa), no mask")
        del q, k, v


def launches(b: Bench, quick: bool):
    dev = b.device
    b.section("launch")
    x = torch.randn(1, device=dev)
    b.row("launch", "add_1elem_graph", "fp32", "1", 0, 0, lambda: x.add_(1.0), note="per kernel inside a CUDA graph")
    # eager: host time per call, the GPU never the bound
    for _ in range(100):
        x.add_(1.0)
    b.sync()
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(2000):
            x.add_(1.0)
        b.sync()
        ts.append((time.perf_counter() - t) / 2000 * 1e6)
    ts.sort()
    b.w.writerow({"section": "launch", "op": "add_1elem_eager", "dtype": "fp32", "shape": "1",
                  "median_us": f"{statistics.median(ts):.3f}", "p10_us": f"{ts[0]:.3f}", "p90_us": f"{ts[-1]:.3f}",
                  "n_inner": 2000, "sm_clock_mhz": b.clock, "note": "host wall time per eager call, 2000 calls + sync"})
    ts = []
    for _ in range(20):
        t = time.perf_counter()
        b.sync()
        ts.append((time.perf_counter() - t) * 1e6)
    b.w.writerow({"section": "launch", "op": "synchronize_idle", "dtype": "", "shape": "",
                  "median_us": f"{statistics.median(ts):.3f}", "sm_clock_mhz": b.clock,
                  "note": "torch.cuda.synchronize() on an idle stream"})
    b.f.flush()


SECTIONS = {"gemm": gemms, "attention": attention, "memory": memory, "launch": launches, "conv": convs,
            "batchnorm": batchnorm, "norms": norms, "decode_attention": decode_attention}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU: a check of this script only")
    ap.add_argument("--budget", type=float, default=100.0, help="seconds; sections stop starting rows after it")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated, in the order to run (default: {','.join(SECTIONS)})")
    args = ap.parse_args(argv)
    unknown = [n for n in args.sections.split(",") if n not in SECTIONS]
    if unknown:
        print(f"error: unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    if not args.cpu and not torch.cuda.is_available():
        print("error: no CUDA GPU (use --cpu to check the script)", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    b = Bench("cpu" if args.cpu else "cuda", args.out, args.budget)
    if b.cuda:
        p = torch.cuda.get_device_properties(0)
        print(f"{p.name}: {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB; torch {torch.__version__} "
              f"CUDA {torch.version.cuda} cuDNN {torch.backends.cudnn.version()}", flush=True)
    # most wanted first: a budget cut loses the least informative rows
    for part in (SECTIONS[n] for n in args.sections.split(",")):
        try:
            part(b, args.cpu)
        except Exception:
            b.failures += 1
            traceback.print_exc()
            if b.cuda:
                torch.cuda.empty_cache()
    b.section("done")
    b.f.close()
    print(f"kernels: {b.rows} rows, {b.failures} failures, {time.monotonic() - b.t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
