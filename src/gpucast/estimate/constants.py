"""The analytic estimator's constants: each with its value, unit and source, all overridable.

:class:`EstimatorConfig` is a frozen dataclass; every field carries its documentation and
source in ``field(metadata=...)``. Override fields in code (``EstimatorConfig().replace(
python_op_s=8e-6)``) or from a YAML/JSON file of ``name: value`` pairs
(:meth:`EstimatorConfig.load`). The constants of a cluster's hosts and stack (loader costs,
loop habits, CUDA context) are :class:`~gpucast.estimate.environment.Environment`'s. Later calibration (``gpucast.learn``) fits these against
measurements; until then they are the published or commonly observed figures cited below.

Nothing here is fitted to a measurement of ours; where our H200 runs (``data/measurements``) check
or bound a value, its source says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path


def _c(value, unit: str, source: str):
    return field(default=value, metadata={"unit": unit, "source": source})


class NamedConstants:
    """What a frozen dataclass of ``_c`` constants shares: ``replace`` by name (an unknown name is a
    one-line ValueError naming the kind) and ``describe`` (name, default, unit, source)."""

    _KIND = "estimator"

    def replace(self, **changes):
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown {self._KIND} constant {sorted(unknown)[0]!r}")
        return replace(self, **changes)

    @classmethod
    def describe(cls) -> list[dict]:
        """Every constant: name, default, unit, source (for docs and `gpucast explain`)."""
        return [{"name": f.name, "value": f.default, "unit": f.metadata["unit"], "source": f.metadata["source"]}
                for f in fields(cls)]


@dataclass(frozen=True)
class EstimatorConfig(NamedConstants):
    # ---------------------------------------------------------------- GPU kernels
    kernel_floor_s: float = _c(
        2.5e-6, "s",
        "Shortest time one kernel occupies the GPU, back to back (launch + drain of an empty "
        "kernel): 2-3 us on Volta..Hopper in CUDA launch-latency microbenchmarks (e.g. NVIDIA "
        "CUDA Graphs blog, 2019: ~2.5 us per small kernel without graphs).")
    kernel_floor_old_s: float = _c(
        4.5e-6, "s", "Same floor on Kepler/Pascal, whose launch path is slower (~4-5 us).")
    tile_reuse_half: float = _c(
        16.0, "operand elements",
        "A GEMM tile's operand reuse w = m n / (m + n) (multiply-adds per loaded element per k step) at "
        "which it runs at half the rate its reuse would allow (gpucast.estimate.tiles: rate w / (w + w0) "
        "relative to the architecture's largest tile). 16 puts a 64x64 tile at 0.79 and a 128x128 at "
        "0.95 of a 128x256's: larger tiles reuse more data and run faster (NVIDIA Deep Learning "
        "Performance Guide, 'Matrix Multiplication Background', 'Tile Quantization'); an assumption "
        "checked by benchmarks/kernel_checks.py against published GEMM throughputs.")
    compute_ramp_s: float = _c(
        3e-6, "s",
        "Fixed time a math kernel loses filling its SMs' pipelines and draining them (prologue and "
        "epilogue), on top of its waves of tiles (gpucast.estimate.tiles): a few microseconds per "
        "kernel, which is what keeps a small GEMM well below peak beside its partly filled wave.")
    bandwidth_efficiency: float = _c(
        0.85, "fraction of peak",
        "Streaming kernels reach 80-92% of DRAM peak (STREAM-like copy on V100/A100/H100, "
        "e.g. Jia et al. 2018 'Dissecting the Volta GPU architecture').")
    half_bytes_per_sm: float = _c(
        48 * 1024, "bytes per SM",
        "Bytes a memory-bound kernel must move to reach half its bandwidth efficiency, per "
        "SM (enough blocks in flight to cover DRAM latency; Little's law at ~0.5-1 us).")
    cudnn_fp32_uses_tf32: bool = _c(
        True, "bool",
        "torch.backends.cudnn.allow_tf32 defaults to True: fp32 convolutions run on TF32 "
        "tensor cores on Ampere and later (PyTorch docs, 'TensorFloat-32 (TF32) on Ampere'), and so "
        "do cuDNN's RNNs, whose descriptor takes the same flag (aten/src/ATen/native/cudnn/RNN.cpp, "
        "allowTF32CuDNN).")
    # ---------------------------------------------------------------- host dispatch (eager)
    python_op_s: float = _c(
        9e-6, "s",
        "Host time for one aten op issued from Python that launches a kernel: Python + "
        "dispatcher + cudaLaunchKernel, 5-15 us in PyTorch eager (PyTorch dev-discuss "
        "'Overhead of eager mode', and Horace He, 'Making Deep Learning Go Brrrr', 2022).")
    python_view_s: float = _c(
        2.5e-6, "s", "Host time for a view/metadata op issued from Python (no launch).")
    engine_op_s: float = _c(
        5e-6, "s",
        "Host time for an op the autograd engine issues in backward (C++, no Python): "
        "dispatcher + launch, ~3-6 us.")
    engine_view_s: float = _c(1.0e-6, "s", "A view op in backward.")
    cpp_op_s: float = _c(
        3.5e-6, "s", "An op issued from a fused C++ loop (cuDNN RNN steps): launch cost only.")
    host_op_s: float = _c(
        1.5e-6, "s", "An op on host tensors (optimizer step counters, .item() on CPU).")
    launch_s: float = _c(
        2.5e-6, "s", "cudaLaunchKernel cost of each extra kernel an op launches.")
    module_call_s: float = _c(
        4e-6, "s", "Python overhead of one nn.Module.__call__ (hooks, forward dispatch).")
    autograd_record_factor: float = _c(
        1.36, "factor",
        "A small op recording autograd takes this much longer on the host than the same op without "
        "(PyTorch issue #41383: 6.8 against 5 us per scalar op with and without grad recording; "
        "gpucast.probe.host's mul_small primitives). An inference step (no_grad / inference_mode) "
        "records none: its Python-issued ops cost python_op_s less launch_s, and python_view_s, "
        "divided by it.")
    step_overhead_s: float = _c(
        150e-6, "s",
        "Per-step host work outside the traced ops: the training loop, the data loader's "
        "next(), zero_grad's loop, loss.item() and its sync.")
    infer_step_overhead_s: float = _c(
        5e-6, "s",
        "Per-step host work of an inference loop outside the traced ops, in place of step_overhead_s "
        "(no zero_grad, no optimizer, no loss.item()): reading the outputs, a stream synchronize, took "
        "6.3-12.4 us on the VMs of our H200 runs (data/measurements/kernels, 'synchronize_idle'), 2-4 us "
        "on the reference core at their host speed (0.32), plus the loop's own Python call (~1 us).")
    param_overhead_s: float = _c(
        0.4e-6, "s", "Per parameter tensor per training step: zero_grad(set_to_none) and optimizer "
        "bookkeeping loops in Python (an inference step runs neither).")
    step_end_sync: bool = _c(
        True, "bool",
        "A training loop reads the loss on the host every step (logging), so the host waits "
        "for the GPU at the end of each step.")
    # ---------------------------------------------------------------- input and multi-GPU
    host_link_efficiency: float = _c(
        0.8, "fraction of peak", "Pinned host-to-device copies reach ~80% of PCIe peak.")
    nccl_efficiency: float = _c(
        0.7, "fraction of peak", "Ring all-reduce bus bandwidth vs link peak (nccl-tests).")
    comm_overlap: float = _c(
        0.8, "fraction",
        "Share of the backward pass that DDP's bucketed all-reduce can hide behind (PyTorch "
        "DDP paper, Li et al. VLDB 2020).")
    ddp_bucket_bytes: int = _c(
        25 * 2**20, "bytes", "DistributedDataParallel's default bucket_cap_mb=25 (PyTorch docs).")
    # ---------------------------------------------------------------- memory beyond tensors
    cublas_workspace_bytes: int = _c(
        32 * 2**20, "bytes",
        "cuBLAS workspace PyTorch allocates per (handle, stream) on Hopper and Blackwell: "
        "CUBLAS_WORKSPACE_CONFIG's default ':4096:8' = 4096 KiB x 8 (aten/src/ATen/cuda/"
        "CublasHandlePool.cpp, parseChosenWorkspaceSize: '32MiB for Hopper'); the larger of the two "
        "defaults, which estimate.parallel uses for every GPU.")
    cublas_workspace_pre_hopper_bytes: int = _c(
        4096 * 1024 * 2 + 16 * 1024 * 8, "bytes",
        "The same default before Hopper (Kepler..Ada): ':4096:2:16:8' = 4096 KiB x 2 + 16 KiB x 8 "
        "= 8,519,680 bytes (CublasHandlePool.cpp, parseChosenWorkspaceSize).")
    cublaslt_workspace_bytes: int = _c(
        1024 * 1024, "bytes",
        "cuBLASLt workspace PyTorch >= 2.0 keeps per (handle, stream) beside cuBLAS's for the GEMMs it runs "
        "through cuBLASLt (addmm with a bias epilogue): CUBLASLT_WORKSPACE_SIZE's default 1024 KiB "
        "(CublasHandlePool.cpp, parseCUDABlasLtWorkspaceSize, after pytorch/pytorch#73328), allocated "
        "through the caching allocator (getNewCUDABlasLtWorkspace).")
    cublas_handles_train: int = _c(
        2, "handles",
        "cuBLAS handles (each with its workspace) a training step holds: PyTorch keeps one handle per "
        "thread and device (CublasHandlePool.cpp, DeviceThreadHandlePool) and the autograd engine runs "
        "backward on its own device thread, so forward and backward GEMMs use two; inference one.")
    cudnn_heuristic_workspace_ratio: float = _c(
        1.0, "workspace bytes per fp32 byte of a convolution's operands",
        "With cudnn.benchmark off PyTorch takes the first algorithm cuDNN's heuristics rank "
        "(cudnnGetConvolutionForwardAlgorithm_v7, aten/src/ATen/native/cudnn/Conv_v7.cpp) and "
        "allocates its workspace at every call, as with benchmark on "
        "(Environment.cudnn_benchmark_workspace_ratio); the heuristics favour implicit-precomputed "
        "GEMM and fused Winograd, whose workspaces are index buffers and tiles rather than whole "
        "transformed operands. Checked on our H200 runs, the one measured set whose convnets ran "
        "without benchmark (h200-v1: torch 2.11.0+cu130, cuDNN 9.19; benchmarks/h200_memory.py): with "
        "the workspaces replayed through the caching allocator, 1.0 is the best of 0-2 (memory MdAPE of "
        "the 108 CNN, GAN and PointNet runs 3.9 %; 0.5: 4.8 %, 2: 6.8 %) and each family held out picks it "
        "from the others' runs (CNN 2.7 %, GAN 5.9 %, PointNet 3.9 % held out). Other stacks keep it: "
        "no other set measures convnets without benchmark.")
    # ---------------------------------------------------------------- intervals
    kernel_time_range: tuple[float, float] = _c(
        (0.75, 1.45), "factor", "Plausible error of the kernel-time model, low and high.")
    host_time_range: tuple[float, float] = _c(
        (0.6, 1.7), "factor", "Host CPUs differ by ~2-3x in eager dispatch speed.")
    memory_range: tuple[float, float] = _c(
        (0.92, 1.25), "factor", "Allocator fragmentation and workspaces vary upwards.")

    @classmethod
    def load(cls, path: str | Path) -> "EstimatorConfig":
        return cls().replace(**read_constants_file(path))


def read_constants_file(path: str | Path) -> dict:
    """A YAML/JSON file of ``name: value`` pairs (lists become tuples); a ValueError if it is not
    a mapping."""
    path = Path(path)
    text = path.read_text()
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text) or {}
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("must be a mapping of constant names to values")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}


DEFAULT = EstimatorConfig()
OLD_ARCHITECTURES = ("kepler", "maxwell", "pascal")
