"""Measure this host: PyTorch's dispatcher and a few data-loader primitives on this CPU, as the
constants of an environment file (``gpucast probe-host --out host.yaml``, read by ``--env``).

What is timed (CPU tensors only, one thread, no GPU needed), each the fastest of
:data:`REPEATS` timed loops after a warm-up (other work on the machine only ever adds time, so
the fastest loop is the CPU's own speed):

* dispatch primitives (:data:`DISPATCH_PRIMITIVES`): a small op from Python (``torch.mul`` of
  two 8-element tensors), the same with autograd recording (``requires_grad``), a view
  (``Tensor.view``), an ``nn.Linear(8, 8)`` module call. Each has the time it takes on the
  reference core of the constants (PyTorch >= 2.0 on a ~3 GHz server core) with its source; this
  CPU's speed is the geometric mean of reference / measured, corrected for the PyTorch release
  measured with (:func:`gpucast.estimate.stack.torch_host_factor`, so the speed is the CPU's,
  not the release's). It becomes ``host_time_factor = 1 / speed``: every host cost of a job on
  a node like this one (dispatch, loop, loader) scales with it.
* loader primitives, written as the Environment's loader constants in reference-core seconds
  (measured here times the speed, so that with ``host_time_factor`` they cost what was measured):
  a ``TensorDataset`` sample through the fetcher (``memory_sample_s``), ``default_collate``'s fixed
  cost (``collate_batch_s``) and its copy rate (``collate_bytes_per_s``), the CIFAR-style PIL
  pipeline on a 32x32 image (``small_image_sample_s``), a JPEG decode (``jpeg_decode_s_per_px``)
  and the ImageNet-style transforms of a decoded image (``image_sample_s``, without the file
  read), a pre-tokenised sample (``token_sample_s``). Primitives that need torchvision are
  skipped (and said so) when it is not installed.

What it cannot see: the CUDA launch path (``cudaLaunchKernel``, the driver: part of every
kernel-launching op's host cost, assumed to scale with the CPU like the rest), pinned-memory
copies and host-GPU syncs (``item_s``, ``copy_call_s``: they need a GPU), storage reads, an RL
environment's step (no environment here; a job names its own, see ``gpucast.probe.dataset``),
other processes contending for the cores while jobs run.

Runs on the CLI and the Python API only; the service never probes.
"""

from __future__ import annotations

import datetime
import functools
import io
import math
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Callable

# Timed loops per primitive (the median is kept) and the wall-time budget of one loop.
REPEATS = 5
LOOP_BUDGET_S = 0.05
QUICK_LOOP_BUDGET_S = 0.02


@dataclass(frozen=True)
class Primitive:
    name: str
    reference_s: float   # seconds on the reference core (PyTorch >= 2.0, ~3 GHz server core)
    source: str


# The reference core's times. The Environment's dispatch constants (EstimatorConfig.python_op_s
# etc.) are for that core; these are the same core's times for the CPU-only part of them.
DISPATCH_PRIMITIVES = (
    Primitive("mul_small", 2.0e-6,
              "torch.mul of two small CPU tensors from Python, requires_grad=False: ~2 us, about half of it "
              "Python argument parsing (PyTorch issue #41383, N. Gimelshein's measurement, 2020)"),
    Primitive("mul_small_autograd", 2.7e-6,
              "the same op recording autograd (requires_grad=True): ~1.36x the op without (PyTorch issue "
              "#41383: 6.8 us against 5 us per scalar op with and without grad recording)"),
    Primitive("view", 1.3e-6,
              "Tensor.view of a small tensor: a metadata op without a new storage, about 2/3 of a small "
              "op's time (EstimatorConfig.python_view_s against python_op_s less the launch)"),
    Primitive("linear_module", 12.0e-6,
              "nn.Linear(8, 8) called on an 8x8 tensor: Module.__call__ (~4 us, EstimatorConfig.module_call_s) "
              "plus F.linear's addmm (~5-8 us on CPU for a tiny GEMM)"),
)


@dataclass
class HostProbe:
    """What :func:`measure` found: this CPU's speed and the loader constants."""

    speed: float                              # single-thread speed relative to the reference core
    dispatch_s: dict[str, float]              # primitive -> measured seconds here
    loader: dict[str, float]                  # Environment field -> reference-core value
    loader_measured_s: dict[str, float]       # Environment field -> measured value here
    skipped: list[str] = field(default_factory=list)
    torch_version: str = ""
    cpu: str = ""
    cores: int = 1
    seconds: float = 0.0

    def constants(self) -> dict[str, float]:
        """The Environment constants of an environment file for nodes like this one."""
        return {"host_time_factor": 1.0 / self.speed, **self.loader}

    def document(self, label: str | None = None) -> dict:
        """An environment file (format 1, over the default constants) with this probe's provenance."""
        from gpucast.version import __version__
        from gpucast.estimate.environment_file import FORMAT

        return {
            "gpucast_environment": FORMAT,
            "gpucast_version": __version__,
            "label": label or f"host-{platform.node() or 'unknown'}",
            "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
            "base": "default",
            "provenance": {"probe": {
                "command": "gpucast probe-host", "host": platform.node(), "cpu": self.cpu,
                "cores": self.cores, "torch": self.torch_version, "python": platform.python_version(),
                "seconds": round(self.seconds, 2), "cpu_speed": round(self.speed, 4),
                "dispatch_measured_us": {k: round(v * 1e6, 3) for k, v in self.dispatch_s.items()},
                "loader_measured_s": {k: float(f"{v:.4g}") for k, v in self.loader_measured_s.items()},
                "skipped": list(self.skipped),
                "not_seen": "the CUDA launch path, pinned copies and host-GPU syncs (item_s, copy_call_s), "
                            "storage reads, RL environments, contention from other processes"}},
            "constants": {k: float(f"{v:.6g}") for k, v in self.constants().items()},
            "intervals": {},
        }


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _time_per_call(fn: Callable[[], object], budget_s: float) -> float:
    """Fastest of REPEATS loops, in seconds per call (each loop about ``budget_s``)."""
    fn()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < budget_s / 10 or n < 3:
        fn()
        n += 1
    per = max((time.perf_counter() - t0) / n, 1e-9)
    calls = max(3, int(budget_s / per))
    out = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) / calls)
    return min(out)


def _dispatch(budget_s: float) -> dict[str, float]:
    import torch

    x = torch.ones(8)
    xg = torch.ones(8, requires_grad=True)
    m = torch.nn.Linear(8, 8)
    a = torch.ones(8, 8)
    calls = {
        "mul_small": lambda: torch.mul(x, x),
        "mul_small_autograd": lambda: torch.mul(xg, xg),
        "view": lambda: x.view(2, 4),
        "linear_module": lambda: m(a),
    }
    return {p.name: _time_per_call(calls[p.name], budget_s) for p in DISPATCH_PRIMITIVES}


def speed_from(dispatch_s: dict[str, float], torch_version: str) -> float:
    """This CPU's speed relative to the reference core: the geometric mean of reference/measured,
    times the release's host factor (a 1.x release measured here is slower than its CPU)."""
    from gpucast.estimate.environment import Environment
    from gpucast.estimate.stack import torch_host_factor

    ratios = [p.reference_s / dispatch_s[p.name] for p in DISPATCH_PRIMITIVES if dispatch_s.get(p.name)]
    raw = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return raw * torch_host_factor(torch_version, Environment.default())


def _loader(budget_s: float, skipped: list[str]) -> dict[str, float]:
    """Measured seconds here per Environment loader constant (bytes/s for collate_bytes_per_s)."""
    import numpy as np
    import torch
    from torch.utils.data import TensorDataset
    from torch.utils.data._utils.collate import default_collate

    out: dict[str, float] = {}
    ds = TensorDataset(torch.randn(4096, 32), torch.randint(0, 10, (4096,)))
    idx = iter(range(10 ** 9))
    # The map-style fetcher: [dataset[i] for i in indices], per sample.
    out["memory_sample_s"] = _time_per_call(lambda: [ds[next(idx) % 4096] for _ in range(16)], budget_s) / 16
    small = [(torch.ones(4), 1) for _ in range(32)]
    out["collate_batch_s"] = _time_per_call(lambda: default_collate(small), budget_s)
    big = [torch.ones(3, 128, 128) for _ in range(16)]
    nbytes = sum(t.nbytes for t in big)
    t_big = _time_per_call(lambda: default_collate(big), budget_s)
    out["collate_bytes_per_s"] = nbytes / max(t_big - out["collate_batch_s"], 1e-9)
    tokens = np.arange(1_000_000, dtype=np.int64)
    pos = iter(range(10 ** 9))
    out["token_sample_s"] = _time_per_call(
        lambda: {"input_ids": torch.as_tensor(tokens[(next(pos) * 512) % 900_000:][:512])}, budget_s)
    try:
        from PIL import Image
        from torchvision import transforms as T
    except ImportError as exc:
        skipped.append(f"PIL/torchvision primitives (small_image_sample_s, jpeg_decode_s_per_px, "
                       f"image_sample_s): {exc}")
        return out
    rng = np.random.default_rng(0)
    cifar = rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    norm = T.Normalize((0.49, 0.48, 0.45), (0.25, 0.24, 0.26))
    cifar_tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    k = iter(range(10 ** 9))
    out["small_image_sample_s"] = _time_per_call(lambda: cifar_tf(Image.fromarray(cifar[next(k) % 64])), budget_s)
    # A 400x350 photo-like image (smooth gradients plus noise: JPEG sizes like a photo's).
    yy, xx = np.mgrid[0:350, 0:400]
    img = np.stack([(xx * 255 // 400), (yy * 255 // 350), ((xx + yy) % 256)], axis=-1).astype(np.int16)
    img = np.clip(img + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    t_dec = _time_per_call(lambda: Image.open(io.BytesIO(data)).convert("RGB"), budget_s)
    out["jpeg_decode_s_per_px"] = t_dec / (400 * 350)
    decoded = Image.open(io.BytesIO(data)).convert("RGB")
    imagenet_tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    out["image_sample_s"] = _time_per_call(lambda: imagenet_tf(decoded), budget_s)
    return out


class one_thread:
    """One intra-op thread while something is timed, as in a DataLoader worker (PyTorch sets it
    there) and the training loop's dispatch; on a busy machine a pool of several threads waits at
    every op's barrier for cores other processes hold."""

    def __enter__(self):
        import torch

        self.torch, self.threads = torch, torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        self.torch.set_num_threads(self.threads)
        return False


def measure(quick: bool = False, progress: Callable[[str], None] | None = None) -> HostProbe:
    """Time the primitives on this CPU (``quick``: dispatch only, short loops: ~0.3 s)."""
    import torch

    t0 = time.perf_counter()
    budget = QUICK_LOOP_BUDGET_S if quick else LOOP_BUDGET_S
    with one_thread():  # a training loop's dispatch and a loader worker use one core each
        if progress:
            progress("dispatch")
        dispatch = _dispatch(budget)
        speed = speed_from(dispatch, torch.__version__.split("+")[0])
        skipped: list[str] = []
        measured = {}
        if not quick:
            if progress:
                progress("loader primitives")
            measured = _loader(budget, skipped)
    loader = {k: (v / speed if k == "collate_bytes_per_s" else v * speed) for k, v in measured.items()}
    return HostProbe(speed=speed, dispatch_s=dispatch, loader=loader, loader_measured_s=measured,
                     skipped=skipped, torch_version=torch.__version__, cpu=cpu_name(),
                     cores=os.cpu_count() or 1, seconds=time.perf_counter() - t0)


@functools.lru_cache(maxsize=1)
def cpu_speed_here() -> float:
    """This CPU's single-thread speed relative to the reference core (a quick dispatch probe,
    measured once per process)."""
    return measure(quick=True).speed


def write(probe: HostProbe, path, label: str | None = None) -> dict:
    """Write the probe as an environment file (atomically) and return its document."""
    from gpucast.estimate.environment_file import save_environment

    doc = probe.document(label)
    save_environment(doc, path)
    return doc
