"""Host costs of the Python calls a training framework adds around its kernels, measured on this
machine's CPU as multiples of one eager op recorded by autograd (the quantity
``gpucast.estimate.parallel.framework`` prices them in).

Measured on CPU tensors of one element, so no kernel runs and no GPU is needed: what is timed is
Python and PyTorch's dispatcher and autograd, the same code a CUDA op runs before its launch.

* ``op``: ``x.mul(1.0)`` on a tensor that requires grad (Python, dispatcher, autograd node);
* ``function_forward``: the extra of ``Fn.apply(x)`` over that op, ``Fn`` a
  ``torch.autograd.Function`` whose forward is the same op (Megatron-LM's tensor-parallel
  linears, mappings, fused LayerNorm and softmax are such Functions);
* ``function_backward``: the extra the engine pays calling ``Fn.backward`` in Python over the
  plain op's C++ backward node (the backward's op itself counted apart);
* ``hook``: one forward hook on an ``nn.Module`` (FSDP's and DeepSpeed's unit hooks are such
  hooks, with work of their own inside);
* ``scripted``: a ``torch.jit.script`` function (Megatron-LM's ``bias_dropout_add``) over the same
  function in eager.

Each extra is the median over 41 runs of 2,000 calls of the difference between the two
variants, run alternately. Run: ``.venv/bin/python benchmarks/host_calls.py``;
writes ``benchmarks/results/host_calls.{md,json}``.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

OUT = Path(__file__).parent / "results"
N = 2000
REPS = 41


class _Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.mul(1.0)

    @staticmethod
    def backward(ctx, g):
        return g.mul(1.0)


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def _paired(base, other, reps: int = REPS) -> tuple[float, float]:
    """Seconds per call of ``base`` and of ``other`` over ``base``: medians over ``reps`` runs of
    ``N`` calls each, the two run alternately so that drift in the CPU's speed falls on both."""
    b, d = [], []
    for _ in range(reps):
        tb, to = _timed(base), _timed(other)
        b.append(tb)
        d.append(to - tb)
    return statistics.median(b) / N, statistics.median(d) / N


def _backward(make):
    """A callable that times the backward through a chain ``make()`` built untimed."""
    def run():
        y = make().sum()
        t = time.perf_counter()
        y.backward()
        return time.perf_counter() - t
    return run


def _paired_backward(base, other, reps: int = REPS) -> float:
    d = []
    for _ in range(reps):
        d.append(_backward(other)() - _backward(base)())
    return statistics.median(d) / N


def measure() -> dict:
    torch.set_num_threads(1)
    x0 = torch.ones(1, requires_grad=True)

    def chain(fn):
        def run():
            x = x0
            for _ in range(N):
                x = fn(x)
            return x
        return run

    plain, wrapped = chain(lambda x: x.mul(1.0)), chain(_Mul.apply)
    t_op, d_fn = _paired(plain, wrapped)
    d_fn_back = _paired_backward(plain, wrapped)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def bda_eager(x, bias, residual, prob: float, training: bool):
            return residual + torch.nn.functional.dropout(x + bias, p=prob, training=training)

        bda = torch.jit.script(bda_eager)
    xs = [torch.ones(4) for _ in range(3)]
    for _ in range(5):  # the profiling executor's warm-up runs
        bda(*xs, 0.1, True)
    _, d_script = _paired(lambda: [bda_eager(*xs, 0.1, True) for _ in range(N)],
                          lambda: [bda(*xs, 0.1, True) for _ in range(N)])

    a = torch.ones(1)
    bare, hooked = torch.nn.Identity(), torch.nn.Identity()
    hooked.register_forward_pre_hook(lambda m, i: None)
    hooked.register_forward_hook(lambda m, i, o: None)
    _, d_hooks = _paired(lambda: [bare(a) for _ in range(N)], lambda: [hooked(a) for _ in range(N)])

    us = {
        "op": t_op * 1e6,
        "function_forward": d_fn * 1e6,
        "function_backward": d_fn_back * 1e6,
        "hook": d_hooks / 2 * 1e6,
        "scripted": d_script * 1e6,
    }
    return {"us": us, "per_op": {k: v / us["op"] for k, v in us.items()},
            "machine": {"cpu": platform.processor() or platform.machine(), "python": sys.version.split()[0],
                        "torch": torch.__version__}}


def main() -> None:
    r = measure()
    OUT.mkdir(exist_ok=True)
    (OUT / "host_calls.json").write_text(json.dumps(r, indent=2) + "\n")
    lines = ["| call | us on this CPU | multiple of one op |", "| --- | ---: | ---: |"]
    lines += [f"| {k} | {r['us'][k]:.2f} | {r['per_op'][k]:.2f} |" for k in r["us"]]
    text = "\n".join(lines) + f"\n\n{r['machine']}\n"
    (OUT / "host_calls.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
