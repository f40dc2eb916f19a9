"""The Environment: constants that describe a cluster's hosts and stack rather than GPU physics.

Data-loader costs (per sample by source, per batch, worker start-up), host copies, the loop's
habits (``.item()``, progress bars, logging), the CUDA context and library workspaces as
nvidia-smi shows them, and the engine-active time of a kernel that starts on an idle GPU. Each
field has its value, unit and source in ``field(metadata=...)``, like
:class:`~gpucast.estimate.constants.EstimatorConfig`; ``prior_sigma`` (a log-space standard
deviation) says how far a fit may move it from its published or commonly observed value, and
fields without one are never fitted.

:meth:`Environment.default` is the priors with the values fitted by ``scripts/fit_environment.py``
(``gpucast/data/environment_fit.json``: values, rows, data sets and date) laid over them; the
fitted fields' ``source`` then says so. Override fields in code (``Environment.default().replace(
item_s=3e-5)``) or from a YAML/JSON file (``gpucast predict --constants FILE`` takes fields of
either class).

The cluster-wide speed factors (``kernel_time_factor``, ``host_time_factor``, per-GPU
``gpu_kernel_factors``) and the utilization response (``util_odds_factor``/``_exponent``) are 1
(the identity) unless a calibration (``gpucast calibrate``, :mod:`gpucast.learn.calibrate`) moved
them; ``label`` and ``conformal`` say which calibrated environment this is and its held-out
interval half-widths. Fittable parameters are named by field, per-GPU ones
``gpu_kernel_factors:<gpu>`` (:meth:`Environment.param`, :meth:`Environment.with_params`).

Nothing here is a measurement of ours but the three Hopper memory fields whose source says they
were fitted on our H200 runs (``cuda_context_lazy_hopper_bytes``, ``cublas_handle_bytes``,
``cudnn_handle_bytes``: :mod:`gpucast.estimate.memory_context`).

One module of this size because the Environment's fields, each with its unit and source, are one table (files
are :mod:`gpucast.estimate.environment_file`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields, replace
from importlib import resources


PER_GPU = "gpu_kernel_factors"
PER_ENGINE = "serving_host_s"


def _c(value, unit: str, source: str, prior_sigma: float | None = None):
    return field(default=value, metadata={"unit": unit, "source": source, "prior_sigma": prior_sigma})


@dataclass(frozen=True)
class Environment:
    # ---------------------------------------------------------------- data loader, per sample (one core)
    memory_sample_s: float = _c(
        6e-6, "s",
        "Dataset.__getitem__ of a TensorDataset plus the DataLoader fetcher's per-index Python work: "
        "two tensor indexings (~1.5-2.5 us each in eager PyTorch) and the tuple/list handling.", 0.7)
    jpeg_decode_s_per_px: float = _c(
        8e-9, "s per stored pixel",
        "PIL (libjpeg-turbo) JPEG decode + RGB convert: ~100-150 Mpixel/s per core (libjpeg-turbo "
        "project benchmarks), a ~400x350 ImageNet JPEG in ~1-1.5 ms.", 0.5)
    image_sample_s: float = _c(
        1.2e-3, "s",
        "Per ImageNet sample besides decoding: file open/read, RandomResizedCrop + flip + ToTensor + "
        "Normalize of a 224x224 crop; with decoding ~2.5 ms per image per core (NVIDIA DALI docs: "
        "PIL-based loaders need ~20+ cores to feed 8 V100s at ~1,000 img/s each).", 0.5)
    small_image_sample_s: float = _c(
        80e-6, "s",
        "CIFAR-style per-sample PIL pipeline on a 32x32 image: Image.fromarray, RandomCrop(pad 4), "
        "RandomHorizontalFlip, ToTensor, Normalize: ~5 transforms at 10-20 us each.", 0.6)
    token_sample_s: float = _c(
        10e-6, "s", "A pre-tokenised sample: list/array slice to a tensor, dict collate.", 0.7)
    env_step_s: float = _c(
        400e-6, "s",
        "One RL environment step in the main process (gym Atari with frame skip 4: ~2-5k frames/s "
        "per core, Machado et al. 2018 ALE; classic control is faster).", 0.7)
    collate_batch_s: float = _c(
        30e-6, "s", "default_collate's fixed cost per batch (torch.stack calls, dict/tuple walking).", 0.7)
    collate_bytes_per_s: float = _c(
        4e9, "bytes/s", "torch.stack copying samples into the batch tensor: a memcpy at ~3-6 GB/s per core.", 0.5)
    worker_batch_s: float = _c(
        2e-3, "s",
        "A worker's fixed cost per batch besides its samples: sampler indices through the index "
        "queue, collate's Python, putting the batch in shared memory and pickling its handles.", 0.5)
    # ---------------------------------------------------------------- data loader, per batch (main process)
    worker_batch_recv_s: float = _c(
        150e-6, "s",
        "Main process receiving one batch from a worker: multiprocessing queue get, unpickling the "
        "shared-memory tensor handles, rebuilding the tensors (PyTorch DataLoader docs, "
        "'multi-process data loading').", 0.7)
    pin_bytes_per_s: float = _c(
        6e9, "bytes/s", "The pin-memory thread copying a batch into page-locked memory (~memcpy speed).", 0.5)
    pageable_copy_efficiency: float = _c(
        0.35, "fraction of the host link",
        "A host-to-device copy from pageable memory is staged through a pinned buffer by the driver: "
        "~30-40% of the pinned rate (NVIDIA 'How to Optimize Data Transfers in CUDA C/C++', 2012).", 0.5)
    copy_call_s: float = _c(
        12e-6, "s", "Host cost of one tensor.to('cuda') call (dispatch, cudaMemcpyAsync, allocator).", 0.7)
    worker_start_s: float = _c(
        0.08, "s",
        "Starting one DataLoader worker process at each epoch (fork, dataset pickling; "
        "persistent_workers=False is the default).", 0.7)
    epoch_s: float = _c(
        2e-3, "s", "Per-epoch work of an in-loop loader: a new iterator, sampler permutation, an epoch print.", 1.0)
    # ---------------------------------------------------------------- the loop's habits
    item_s: float = _c(
        25e-6, "s",
        "One extra .item() of a GPU scalar after the GPU is idle: a 4-byte device-to-host copy, its "
        "sync and the Python call (10-30 us on PCIe hosts).", 0.7)
    progress_bar_s: float = _c(
        120e-6, "s",
        "A tqdm bar's update(1) plus set_postfix every step (set_postfix refreshes by default: "
        "formatting the bar and writing it, ~50-200 us).", 0.8)
    log_line_s: float = _c(
        100e-6, "s", "One log line: formatting metrics and a print (plus its own .item()).", 0.8)
    cudnn_heuristic_efficiency: float = _c(
        0.9, "factor",
        "Convolution speed with cudnn.benchmark off relative to on: cuDNN's heuristics pick a "
        "near-best algorithm for common shapes (NVIDIA cuDNN developer guide), autotuning gains "
        "~5-20% for convnets.")
    # ---------------------------------------------------------------- the GPU as the counter sees it
    idle_kernel_s: float = _c(
        5e-6, "s",
        "Shortest engine-active time of a kernel that starts on an idle GPU (nothing queued behind "
        "it): launch latency, block scheduling and the completion flush are no longer hidden by "
        "the next kernel (5-10 us launch-to-end for an empty kernel on an idle Volta..Ampere; Jia "
        "et al. 2018, 'Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking').", 0.8)
    nvml_tick_s: float = _c(
        5e-6, "s",
        "Tick of the busy counter behind NVML's utilization.gpu: an idle gap of the GPU shorter than "
        "this reads busy, a longer one hides this much of its idle time (gpucast.estimate.nvml). NVIDIA "
        "documents only the averaging period (1/6 s to 1 s) and describes the reading as the share of "
        "time one or more kernels ran, i.e. no tick; a few microseconds stand for the kernel's own "
        "start and end the counter may round up. Fitted on measured utilization (scripts/fit_environment.py): "
        "host-bound solo runs whose ~15-30 us gaps between kernels read idle (Lucid's RTX 3090 EfficientNet "
        "runs measure 20-45 %) bound it to a few microseconds; the co-location fit is insensitive to it "
        "(benchmarks/results/colocation_current.md).", 1.5)
    # ---------------------------------------------------------------- memory as nvidia-smi shows it
    cuda_context_lazy_bytes: int = _c(
        500 * 2**20, "bytes",
        "CUDA context + the kernels a PyTorch process has loaded lazily (CUDA_MODULE_LOADING=LAZY) "
        "on Volta..Hopper: ~300-600 MiB (NVIDIA CUDA C++ Programming Guide, 'Lazy Loading').", 0.3)
    cuda_context_eager_extra_bytes: int = _c(
        800 * 2**20, "bytes",
        "Extra context memory when every kernel image (PyTorch, cuBLAS, cuDNN) is loaded at "
        "initialisation, for a CUDA >= 12 build of PyTorch (the tier of gpucast's default stack and "
        "of the stack the GPUMemNet MLP set declares; gpucast.estimate.memory.EAGER_CONTEXT_TIERS): "
        "lazy loading saves ~0.5-1 GiB per process (NVIDIA, CUDA 11.7 release notes and the Lazy "
        "Loading section; pytorch/pytorch#86509 measured 667 MB eager vs 287 MB lazy on cu117).", 0.5)
    cuda_context_eager_extra_cu11_bytes: int = _c(
        1100 * 2**20, "bytes",
        "The same extra for a CUDA 11.x build (cu110..cu118: sm_80/sm_86 images added, cuBLAS 11 "
        "with cuBLASLt, cuDNN 8), where the eagerly loaded context is largest: `torch.Tensor(1).cuda()` "
        "shows 1,687 MiB on an RTX 3090 with 1.8.2+cu111 against 721 MiB with 1.8.2+cu101 on a GTX "
        "1080 (pytorch/pytorch#55277); 1.7.1+cu110 on an RTX 3090 ~1,490 MiB besides a 156 MiB "
        "tensor (pytorch/pytorch#49877); 'before CUDA 11.7 all kernels were loaded ..., which took "
        ">1000MB' (pytorch/pytorch#107667). Over the 500 MiB lazy part: ~1.0-1.2 GiB. Fitted on "
        "sets measured on cu11x stacks (Lucid: torch 1.11+cu113).", 0.3)
    cuda_context_eager_extra_cu10_bytes: int = _c(
        350 * 2**20, "bytes",
        "The same extra for a CUDA < 11 build (cu92..cu102, cuDNN 7, no sm_80 images): ~880 MiB "
        "in all on an RTX 2080 Ti with 1.6.0+cu101 besides a 156 MiB tensor (pytorch/pytorch#49877), "
        "300-400 MB on a V100 with torch 1.1 (pytorch/pytorch#20532), 200-700 MB on K40s with "
        "1.3.0+cu101 (pytorch/pytorch#28113).", 0.5)
    cudnn_context_eager_bytes: int = _c(
        150 * 2**20, "bytes",
        "Kernel images of cuDNN's convolution, batch-norm and RNN sub-libraries that an eagerly "
        "loading process adds when it first runs such an op: since cuDNN 8 libcudnn.so is a shim that "
        "loads the sub-libraries (cudnn_ops/cnn/adv _infer/_train) on demand (cuDNN 8 Developer Guide, "
        "'Library structure'), and eager loading then loads all of a loaded library's kernels for the "
        "GPU. A cuDNN 7 handle alone took ~750 MB on a GTX 1070 (pytorch/pytorch#12873); the sm_80/86 "
        "share of cuDNN 8's convolution libraries is smaller: an allowance, fitted on sets whose "
        "convnets and RNNs ran with eager loading (Lucid). None with lazy loading (the used kernels "
        "are in cuda_context_lazy_bytes).", 0.7)
    cuda_context_lazy_hopper_bytes: int = _c(
        613 * 2**20, "bytes",
        "The lazily loaded context on Hopper (CUDA >= 12; gpucast.estimate.memory_context), without the "
        "cuBLAS/cuDNN handles (cublas_handle_bytes, cudnn_handle_bytes): fitted on our H200's fresh-process "
        "runs (h200-v1, data/measurements/2026-12-04-h200*.parquet: torch 2.11.0+cu130, CUDA 13.0, driver "
        "580.159.04; NVML process memory - torch.cuda.max_memory_reserved, least squares with the two "
        "handle terms over the 21 runs that opened their worker process, 630-762 MiB: 613.1 MiB, with "
        "65.5 MiB per cuBLAS and 8.4 MiB per cuDNN handle; benchmarks/h200_memory.py, held out by family "
        "there). Other architectures keep the cited cuda_context_lazy_bytes.", 0.1)
    cublas_handle_bytes: int = _c(
        131 * 2**19, "bytes per handle",
        "Device memory one cuBLAS handle allocates for itself (cublasCreate, outside PyTorch's caching "
        "allocator; PyTorch's cuBLAS workspaces are inside it), where measured (Hopper, lazy CUDA >= 12): "
        "fitted with cuda_context_lazy_hopper_bytes on the same H200 runs (h200-v1: torch 2.11.0+cu130, "
        "CUDA 13.0, driver 580.159.04; benchmarks/h200_memory.py; a training step holds two handles, one "
        "per thread): 65.5 MiB; ~60 MB per cuBLAS handle on GH200 under CUDA 12 (pika-org/pika#1234).", 0.3)
    cudnn_handle_bytes: int = _c(
        8_808_038, "bytes per handle",
        "Device memory one cuDNN handle and the engine libraries it loads hold outside the caching "
        "allocator, where measured (Hopper, lazy CUDA >= 12, cuDNN 9.19): fitted with "
        "cuda_context_lazy_hopper_bytes on the same H200 runs (h200-v1: torch 2.11.0+cu130, CUDA 13.0, "
        "driver 580.159.04; benchmarks/h200_memory.py; convolutional GANs, which run no cuBLAS, "
        "630 MiB against 742 MiB for MLPs and 760-762 MiB for CNNs with a linear head): 8.4 MiB.", 0.5)
    old_gpu_context_factor: float = _c(
        0.6, "factor", "Kepler/Pascal: fewer and smaller kernel images (one or two SASS targets).")
    cudnn_benchmark_workspace_ratio: float = _c(
        2.0, "workspace bytes per fp32 byte of a convolution's operands",
        "With cudnn.benchmark PyTorch (aten/src/ATen/native/cudnn/Conv_v7.cpp) times every algorithm "
        "with the largest workspace any of them asks for, then empties the allocator's cache "
        "(emptyCache after the search): what stays is the workspace of the fastest algorithm, "
        "allocated from the caching allocator at every call of that convolution. The fastest are "
        "often FFT/FFT-tiling or non-fused Winograd, which keep transformed copies of the input, "
        "filter and output (cuDNN API reference, cudnnConvolutionFwdAlgo_t: FFT 'A significant memory "
        "workspace is needed to store intermediate results'); a 3x3 filter on an HxW map padded to "
        "the next FFT size holds ~4 fp32 bytes of spectrum per fp32 byte of the map. Workspace = "
        "ratio x 4 bytes x (input + output + filter elements), per convolution, in fp32 because "
        "PyTorch runs half convolutions with fp32 math (cudnn/Descriptors.h). Fitted on sets measured "
        "with cudnn.benchmark on (Lucid, RTX 3090, torch 1.11): 4 under the earlier allowance (live "
        "bytes + workspace over the step's reserved peak); replayed through the caching allocator "
        "(gpucast.graph.allocator), Lucid's 35 solo runs are flat from 0.5 to 2 (memory MAPE 6.9-7.0 %) "
        "and worse above (2.5: 8.7 %, 4: 10.5 %, ResNet-50 AMP over-predicted by 1.4-1.7x): 2, the "
        "largest they allow, keeps the autotuned pick above the heuristics' (EstimatorConfig."
        "cudnn_heuristic_workspace_ratio).", 0.7)
    cudnn_fp16_workspace_factor: float = _c(
        1.25, "factor",
        "Workspace of an fp16/bf16 convolution (autocast) relative to the fp32 one of the same "
        "shape under cudnn.benchmark: the fp32-math buffers are the same, and tensor-core algorithms "
        "for NCHW half tensors also transpose the operands to NHWC in the workspace (cuDNN Developer "
        "Guide, 'Tensor Core Operations'): 2 more bytes per element over the ratio's ~16 (x1.125), "
        "rounded up as an allowance. Fitted on AMP rows measured with cudnn.benchmark (Lucid).", 0.5)
    # ---------------------------------------------------------------- a run as a monitor averages it
    startup_s: float = _c(
        10.0, "s",
        "Process start to the first training step: Python and torch imports (~3-6 s), CUDA "
        "initialisation (~1-3 s), building and moving the model; nvidia-smi reads 0% meanwhile.", 0.5)

    # ---------------------------------------------------------------- a cluster's speed relative to the model
    kernel_time_factor: float = _c(
        1.0, "factor",
        "GPU kernel time relative to the roofline model (EstimatorConfig): 1 is the model as published; "
        "a calibration moves it for what the rows' cluster does differently (library versions, clocks "
        "under its power and thermal limits, drivers). Spread 0.15: where the GPU sets the pace the kernel "
        "model lands within ~5-20 % of Gavel's measured step times (ResNet-50 b128 within 1 % on P100/V100, "
        "CycleGAN 0.82-0.93; benchmarks/results/gavel_compare.md), while host-side costs vary far more, "
        "so a slow cluster is explained by its hosts first.", 0.15)
    host_time_factor: float = _c(
        1.0, "factor",
        "Host CPU time (op dispatch, loader, loop habits) relative to the reference host of the "
        "constants (a ~3 GHz server core): single-thread speed of server CPUs spans ~2x across "
        "generations (SPEC CPU2017 speed results), and older PyTorch releases dispatch ops several "
        "times slower (per-parameter optimizer loops, no fast paths), hence a wide spread.", 0.7)
    torch1_host_factor: float = _c(
        1.3, "factor",
        "Host time (dispatch, module calls, loop) of a PyTorch 1.x release relative to >= 2.0 on the same "
        "core (gpucast.estimate.stack): the C++ dispatch of a small op was ~2 us in 2020 as now (PyTorch "
        "issue #41383), while 1.x paid more Python per op (argument parsing, __torch_function__ checks "
        "from 1.5, issue #30831) and per autograd node; the per-parameter optimizer loops of 1.x are "
        "structure in the trace, not this factor. Fitted on sets measured on 1.x stacks.", 0.5)
    torch1_kernel_factor: float = _c(
        1.1, "factor",
        "GPU kernel time of the libraries PyTorch 1.x shipped (cuDNN 7.6-8.2, cuBLAS 10-11) relative to "
        "those of >= 2.0 on the same GPU (gpucast.estimate.stack): convolution and GEMM heuristics and "
        "kernels improved release by release (cuDNN 8 release notes: new convolution engines and "
        "heuristics). Fitted on sets measured on 1.x stacks.", 0.15)
    # ---------------------------------------------------------------- the counter as a monitor reports it
    util_odds_factor: float = _c(
        1.0, "factor on the odds u / (1 - u)",
        "Empirical response of a monitored utilization to the modelled steady-state busy share u: the "
        "reported value has odds util_odds_factor * (u / (1 - u)) ** util_odds_exponent (a two-parameter "
        "logistic recalibration, Platt 1999). It stands for what the steady-state step leaves out and a "
        "monitor's average keeps (sampling windows, start-up and epoch phases, samples a monitor drops); "
        "the prior is the identity, and only a calibration on measured utilization moves it.", 0.5)
    util_odds_exponent: float = _c(
        1.0, "exponent on the odds", "See util_odds_factor (prior: the identity).", 0.3)
    gpu_kernel_factors: tuple = field(default=(), metadata={
        "unit": "factor per GPU type", "prior_sigma": 0.1, "kind": "per-gpu",
        "source": "Per-GPU-type kernel time factor on top of kernel_time_factor, as (gpu, factor) pairs: a "
                  "cluster's cards may run below their boost clock or with older libraries; 1 when absent."})
    serving_host_s: tuple = field(default=(), metadata={
        "unit": "s per iteration, per engine", "kind": "per-engine",
        "source": "An LLM serving engine's host time per iteration on this cluster (scheduling, input preparation, "
                  "sampling; gpucast.estimate.serving.engines), as (engine, seconds) pairs, fitted by gpucast "
                  "calibrate on measured serving rows (gpucast.learn.serving_fit); the packaged fit or the engine's "
                  "prior when absent."})
    # ---------------------------------------------------------------- what made this environment (not constants)
    label: str = field(default="default", metadata={
        "kind": "meta", "unit": "", "source": "Name of the environment: 'default', or the label and digest of a "
                                              "calibrated environment file (gpucast calibrate)."})
    conformal: tuple = field(default=(), metadata={
        "kind": "meta", "unit": "", "source": "Split-conformal half-widths from held-out residuals, as "
                                              "(quantity, level, half-width in log space, rows) tuples."})

    def util_response(self, busy_share: float) -> float:
        """The utilization (0-1) a monitor reports for a modelled busy share (see util_odds_factor)."""
        if self.util_odds_factor == 1.0 and self.util_odds_exponent == 1.0:
            return busy_share
        u = min(max(busy_share, 1e-4), 1 - 1e-4)
        odds = self.util_odds_factor * (u / (1 - u)) ** self.util_odds_exponent
        return odds / (1 + odds)

    def kernel_factor(self, gpu: str) -> float:
        """The kernel time factor on ``gpu``: the cluster-wide one times the GPU type's own (a MIG
        slice, ``a100-40gb:1g.5gb``, takes its whole GPU's unless fitted itself)."""
        per = dict(self.gpu_kernel_factors)
        return self.kernel_time_factor * per.get(gpu, per.get(gpu.split(":", 1)[0], 1.0))

    # ---------------------------------------------------------------- named parameters for fitting
    def serving_host(self, engine: str) -> float | None:
        """The engine's host seconds per iteration fitted for this cluster (None: not fitted here)."""
        return dict(self.serving_host_s).get(engine)

    def param(self, name: str) -> float:
        """A fittable parameter's value: a field name, ``gpu_kernel_factors:<gpu>`` or
        ``serving_host_s:<engine>`` (nan when that engine has none here)."""
        if name.startswith(PER_GPU + ":"):
            return float(dict(self.gpu_kernel_factors).get(name.split(":", 1)[1], 1.0))
        if name.startswith(PER_ENGINE + ":"):
            v = self.serving_host(name.split(":", 1)[1])
            return float("nan") if v is None else float(v)
        return getattr(self, name)

    def with_params(self, values: dict) -> "Environment":
        """A copy with fittable parameters set (integers rounded for integer fields)."""
        per_gpu = dict(self.gpu_kernel_factors)
        per_engine = dict(self.serving_host_s)
        plain = {}
        meta = {f.name: f for f in fields(self)}
        for name, v in values.items():
            if name.startswith(PER_GPU + ":"):
                per_gpu[name.split(":", 1)[1]] = float(v)
            elif name.startswith(PER_ENGINE + ":"):
                per_engine[name.split(":", 1)[1]] = float(v)
            elif name in meta:
                plain[name] = int(round(v)) if isinstance(meta[name].default, int) else float(v)
            else:
                raise ValueError(f"unknown environment constant {name!r}")
        if per_gpu != dict(self.gpu_kernel_factors):
            plain[PER_GPU] = tuple(sorted(per_gpu.items()))
        if per_engine != dict(self.serving_host_s):
            plain[PER_ENGINE] = tuple(sorted(per_engine.items()))
        return self.replace(**plain)

    @classmethod
    def prior_sigma(cls, name: str) -> float | None:
        base = PER_GPU if name.startswith(PER_GPU + ":") else name
        meta = {f.name: f for f in fields(cls)}
        if base not in meta:
            raise ValueError(f"unknown environment constant {name!r}")
        return meta[base].metadata.get("prior_sigma")

    def constants(self) -> dict:
        """The constants (not label/conformal) as plain values; per-GPU factors as a mapping."""
        out = {}
        for f in fields(self):
            if f.metadata.get("kind") == "meta":
                continue
            v = getattr(self, f.name)
            out[f.name] = dict(v) if f.metadata.get("kind") in ("per-gpu", "per-engine") else v
        return out

    def replace(self, **changes) -> "Environment":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown environment constant {sorted(unknown)[0]!r}")
        return replace(self, **changes)

    @classmethod
    def priors(cls) -> "Environment":
        """The published/commonly observed values, before any fit of these constants."""
        return cls()

    @classmethod
    def default(cls) -> "Environment":
        """The priors with the fitted values laid over them (see the module docstring)."""
        return _default()

    @classmethod
    def fittable(cls) -> list[str]:
        """Scalar constants with a prior (per-GPU factors are named ``gpu_kernel_factors:<gpu>``)."""
        return [f.name for f in fields(cls) if f.metadata.get("prior_sigma") and not f.metadata.get("kind")]

    @classmethod
    def describe(cls) -> list[dict]:
        """Every constant: name, value in force, prior, unit, source (with the fit's provenance)."""
        fit = fit_record()
        cur = cls.default()
        out = []
        for f in fields(cls):
            if f.metadata.get("kind") == "meta":
                continue
            src = f.metadata["source"]
            if f.name in fit.get("values", {}):
                src = f"fitted: {fit.get('provenance', '?')}. Prior {f.default!r}: {src}"
            out.append({"name": f.name, "value": getattr(cur, f.name), "prior": f.default,
                        "unit": f.metadata["unit"], "source": src})
        return out


@functools.lru_cache(maxsize=1)
def fit_record() -> dict:
    """The packaged fit (``gpucast/data/environment_fit.json``), or {} when none was written."""
    try:
        text = (resources.files("gpucast") / "data" / "environment_fit.json").read_text()
    except (FileNotFoundError, OSError):
        return {}
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def _default() -> Environment:
    values = fit_record().get("values", {})
    names = {f.name: f for f in fields(Environment)}
    cast = {k: (int(round(v)) if isinstance(names[k].default, int) else float(v))
            for k, v in values.items() if k in names}
    return Environment.priors().replace(**cast)
