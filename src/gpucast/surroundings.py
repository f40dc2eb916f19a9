"""What surrounds a job's graph: how it is fed (:class:`Data`), how its loop runs (:class:`Loop`)
and on what software stack and host (:class:`Stack`).

These are fields of :class:`gpucast.job.Job` (``data``, ``loop``, ``stack``). Every field of
every spec may be left ``None``: it then takes the *typical* value for the job's workload, not the
benchmark ideal. A zoo workload declares the data source and loop habits of the script people run
for it (``Workload.data`` / ``Workload.loop``: ImageNet models read JPEG files with 4 workers as
pytorch/examples' ``imagenet/main.py`` does, CIFAR models decode small images with per-sample PIL
transforms, language models read token ids, RL agents step their environment); other jobs (ONNX,
Hugging Face configs, user modules) get a source from their inputs' kind (:func:`infer_source`).
:func:`resolve` merges, field by field: the job's own value, else the workload's, else the
source's default (``SOURCE_DEFAULTS``), else the global default (``Loop()``/``Stack()`` below).

``Data(source="device")`` with ``Loop.benchmark()`` is the benchmark-style job (synthetic tensors
already on the GPU, one ``loss.item()`` per step): it reproduces gpucast's predictions before
these fields existed, exactly.

Data sources:

* ``device``: tensors already on the GPU (no loader, no copy);
* ``memory``: tensors in host memory read through a ``DataLoader`` (a ``TensorDataset``);
* ``images``: image files decoded and augmented per sample (the ImageNet recipe), at a stored
  resolution ``image_size`` (width, height);
* ``small-images``: a decoded in-memory image set with per-sample PIL transforms (the CIFAR recipe);
* ``tokens``: pre-tokenised sequences;
* ``environment``: an RL environment stepped in the main process, one step per sample;
* ``custom``: ``per_sample_s`` seconds of host work per sample, measured by the user.

A job may name its own code instead (strings ``FILE.py:FUNCTION``, checked here for shape only):
``dataset``, a factory with no arguments returning a map-style ``torch.utils.data.Dataset``;
``collate``, the loader's ``collate_fn`` (default: torch's ``default_collate``); ``environment``,
an RL environment factory (``reset()``/``step(action)``). :mod:`gpucast.probe.dataset` times
them on this CPU (the CLI and the Python API do; the service refuses such jobs) and fills
``per_sample_s``/``sample_bytes``. A job that names its dataset or environment is fed by it: the
workload's typical loader does not apply, and with ``source`` unset the source is ``custom``
(a dataset) or ``environment``. ``per_sample_s`` given with them overrides the measurement (none
is taken). These fields are part of the job key (the reference, not the file's content).

This module does not import torch. What is not modelled: the loader's own Python threads
contending for the GIL beyond the per-batch costs, disk or network reads (the dataset is in the
page cache), distributed samplers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace

SOURCES = ("device", "memory", "images", "small-images", "tokens", "environment", "custom")
CODE_FIELDS = ("dataset", "collate", "environment")  # FILE.py:FUNCTION references to a user's code
_CODE_REF_RE = re.compile(r"^.+\.py:[A-Za-z_][A-Za-z0-9_]*$", re.DOTALL)


class SpecError(ValueError):
    """A data, loop or stack field is invalid; one line naming the field."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Spec:
    """Shared behaviour: built from a mapping, serialised without its unset (None) fields."""

    _NAME = "spec"

    @classmethod
    def coerce(cls, value):
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, dict):
            allowed = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - allowed, key=str)
            if unknown:
                raise SpecError(f"field '{cls._NAME}.{unknown[0]}' is unknown "
                                f"(allowed: {', '.join(sorted(allowed))})")
            return cls(**value)
        raise SpecError(f"field '{cls._NAME}' must be a mapping of its fields, got {type(value).__name__}")

    def to_dict(self) -> dict:
        out = {}
        for k, v in asdict(self).items():
            if v is not None:
                out[k] = list(v) if isinstance(v, tuple) else v
        return out

    def merged(self, other: "_Spec | None"):
        """This spec's set fields over ``other``'s."""
        if other is None:
            return self
        return replace(other, **{k: v for k, v in asdict(self).items() if v is not None})

    def _check(self, name: str, ok: bool, what: str) -> None:
        if not ok:
            raise SpecError(f"field '{self._NAME}.{name}' must be {what}, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Data(_Spec):
    """How batches reach the GPU: the data source and the ``DataLoader``'s settings."""

    _NAME = "data"
    source: str | None = None
    num_workers: int | None = None       # DataLoader(num_workers=...); 0 = loads in the loop
    pin_memory: bool | None = None       # DataLoader(pin_memory=...)
    non_blocking: bool | None = None     # batch.to("cuda", non_blocking=...)
    image_size: tuple[int, int] | None = None  # stored width, height of 'images' files
    per_sample_s: float | None = None    # measured host seconds per sample ('custom'; overrides any source)
    dataset_samples: int | None = None   # samples per epoch (epoch-boundary costs)
    sample_bytes: int | None = None      # host bytes per sample collated and copied (default: the
                                         # model's dense inputs; less for sparse batches densified on the GPU)
    dataset: str | None = None           # FILE.py:FUNCTION -> map-style Dataset, measured on this CPU
    collate: str | None = None           # FILE.py:FUNCTION, the DataLoader's collate_fn (with dataset)
    environment: str | None = None       # FILE.py:FUNCTION -> RL environment, its step measured here
    # Sequence packing: samples of this many tokens on average packed into each seq_len-token sequence,
    # attention per sample (gpucast.graph.packing). Out of the repr, as Stack.loss (the simulator's truth).
    packed_sample_len: int | None = field(default=None, repr=False)

    @property
    def has_code(self) -> bool:
        """The spec names a user's dataset, collate function or environment (code to run)."""
        return any(getattr(self, name) is not None for name in CODE_FIELDS)

    def __post_init__(self) -> None:
        if self.image_size is not None and not isinstance(self.image_size, tuple):
            try:
                object.__setattr__(self, "image_size", tuple(self.image_size))
            except TypeError:
                pass
        if self.per_sample_s is not None and _is_num(self.per_sample_s):
            object.__setattr__(self, "per_sample_s", float(self.per_sample_s) + 0.0)
        self._check("source", self.source is None or self.source in SOURCES, f"one of {', '.join(SOURCES)}")
        self._check("packed_sample_len", self.packed_sample_len is None or (
            _is_int(self.packed_sample_len) and self.packed_sample_len >= 1), "a positive integer (tokens)")
        self._check("num_workers", self.num_workers is None or (_is_int(self.num_workers) and 0 <= self.num_workers <= 256),
                    "an integer between 0 and 256")
        for name in ("pin_memory", "non_blocking"):
            self._check(name, getattr(self, name) is None or isinstance(getattr(self, name), bool), "true or false")
        self._check("image_size", self.image_size is None or (
            isinstance(self.image_size, tuple) and len(self.image_size) == 2
            and all(_is_int(d) and 1 <= d <= 65536 for d in self.image_size)), "[width, height] in pixels")
        self._check("per_sample_s", self.per_sample_s is None or (_is_num(self.per_sample_s) and 0 <= self.per_sample_s < 60),
                    "seconds in [0, 60)")
        self._check("dataset_samples", self.dataset_samples is None or (
            _is_int(self.dataset_samples) and self.dataset_samples >= 1), "a positive integer")
        self._check("sample_bytes", self.sample_bytes is None or (
            _is_int(self.sample_bytes) and 0 <= self.sample_bytes <= 1 << 34), "a non-negative integer of bytes")
        for name in CODE_FIELDS:
            v = getattr(self, name)
            self._check(name, v is None or (isinstance(v, str) and "\n" not in v and bool(_CODE_REF_RE.match(v))),
                        "FILE.py:FUNCTION")
        if self.dataset is not None and self.environment is not None:
            raise SpecError("field 'data.environment': give data.dataset or data.environment, not both")
        if self.collate is not None and self.dataset is None:
            raise SpecError("field 'data.collate' applies with data.dataset (the dataset it collates)")
        if self.environment is not None and self.source not in (None, "environment"):
            raise SpecError(f"field 'data.source' must be 'environment' (or unset) with data.environment, "
                            f"got {self.source!r}")
        if self.source == "custom" and self.per_sample_s is None and self.dataset is None:
            raise SpecError("field 'data.per_sample_s' is required with data.source 'custom' "
                            "(measured host seconds per sample, or data.dataset to measure)")


@dataclass(frozen=True)
class Loop(_Spec):
    """The training loop's habits that cost host time or force host-GPU syncs."""

    _NAME = "loop"
    item_calls: int | None = None        # .item() (or .cpu()) of GPU values per step: each syncs
    progress_bar: bool | None = None     # a tqdm bar updated (with set_postfix) every step
    log_every: int | None = None         # a log line every N steps (0: never)
    cudnn_benchmark: bool | None = None  # torch.backends.cudnn.benchmark

    def __post_init__(self) -> None:
        self._check("item_calls", self.item_calls is None or (_is_int(self.item_calls) and 0 <= self.item_calls <= 1000),
                    "an integer between 0 and 1000")
        for name in ("progress_bar", "cudnn_benchmark"):
            self._check(name, getattr(self, name) is None or isinstance(getattr(self, name), bool), "true or false")
        self._check("log_every", self.log_every is None or (_is_int(self.log_every) and self.log_every >= 0),
                    "a non-negative integer (0: never)")

    @classmethod
    def benchmark(cls) -> "Loop":
        """A benchmark's loop: one ``loss.item()`` per step, no bar, no logging, cuDNN autotuning."""
        return cls(item_calls=1, progress_bar=False, log_every=0, cudnn_benchmark=True)


_VERSION_RE = re.compile(r"^\d+(\.\d+){0,2}$")


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


# How a language model's loss is computed (Stack.loss; gpucast.graph.lm_loss says what each holds).
LM_LOSSES = ("upcast", "fused", "chunked")
# Fused attention kernels a stack can run (gpucast.estimate.achieved): PyTorch's SDPA flash kernel is
# FlashAttention-2's in every release; "flash3": the flash-attn 3 package's Hopper kernels; "cudnn":
# cuDNN's fused attention (PyTorch's SDPA default on Hopper from 2.11: achieved.attention_kernel); "triton":
# flash-attn's 2022 Triton kernel (llm-foundry's attn_impl: triton).
ATTENTION_KERNELS = ("flash2", "flash3", "cudnn", "triton")
# The layers' own kernels (Stack.kernels): the model source's modules as written, or Transformer Engine's
# fused layers as Megatron-Core builds them (gpucast.graph.te; a plan under Megatron's default).
KERNEL_SETS = ("eager", "transformer-engine")
# Transformer Engine's scaling recipes of precision fp8 (gpucast.graph.fp8): delayed (DelayedScaling, an
# amax history; TE's default), current (Float8CurrentScaling: the tensor's amax first, then the cast),
# blockwise (Float8BlockScaling: DeepSeek-V3's 1x128 activation and 128x128 weight scales).
FP8_RECIPES = ("delayed", "current", "blockwise")


@dataclass(frozen=True)
class Stack(_Spec):
    """The software stack and host the job runs on."""

    _NAME = "stack"
    torch: str | None = None          # PyTorch version, e.g. "2.4" (< 2.0: per-parameter optimizer loops)
    cuda: str | None = None           # CUDA runtime version, e.g. "12.1"
    lazy_loading: bool | None = None  # CUDA_MODULE_LOADING=LAZY (None: PyTorch >= 2.0 on CUDA >= 11.7)
    cpu_speed: float | None = None    # host single-thread speed relative to the reference core (1.0)
    cpu_cores: int | None = None      # cores the job's loader workers may use
    # A language model's loss (gpucast.graph.lm_loss): "upcast" (fp32 logits, transformers' own;
    # unset: the model source's own loss), "fused" (one kernel on logits in the compute dtype),
    # "chunked" (the head and loss fused in chunks: the logits never held whole). Out of the repr:
    # the simulator's truth draws each job's error from a hash of its fields' repr
    # (gpucast.cluster.truth._unit_normal), and a new field there would redraw every job's error.
    loss: str | None = field(default=None, repr=False)
    # The fused attention kernel (ATTENTION_KERNELS; unset: PyTorch's own default for the release and GPU,
    # gpucast.estimate.achieved.attention_kernel). Out of the repr
    # for the same reason as loss.
    attention: str | None = field(default=None, repr=False)
    # The layers' kernels (KERNEL_SETS; unset: eager, or transformer-engine for a plan under Megatron,
    # gpucast.api.capture_job). Out of the repr for the same reason as loss.
    kernels: str | None = field(default=None, repr=False)
    # precision fp8's scaling recipe (FP8_RECIPES; unset: delayed, Transformer Engine's default). Out of the
    # repr for the same reason as loss.
    fp8_recipe: str | None = field(default=None, repr=False)
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch >= 2.1; unset: off, PyTorch's
    # default): the caching allocator grows one segment per pool instead of making one per request
    # (gpucast.graph.allocator). Out of the repr for the same reason as loss.
    expandable_segments: bool | None = field(default=None, repr=False)
    # The transformer layers an FP8/FP4 recipe keeps in bf16, (first, last): Megatron-Core's
    # --first-last-layers-bf16 with --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16 (unset: none,
    # as Megatron-Bridge's performance presets run). "1,1" or [1, 1]. Out of the repr as loss.
    bf16_layers: tuple[int, int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.bf16_layers, str):
            parts = [t.strip() for t in self.bf16_layers.split(",")]
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                object.__setattr__(self, "bf16_layers", (int(parts[0]), int(parts[1])))
        elif isinstance(self.bf16_layers, list):
            object.__setattr__(self, "bf16_layers", tuple(self.bf16_layers))
        self._check("bf16_layers", self.bf16_layers is None or (
            isinstance(self.bf16_layers, tuple) and len(self.bf16_layers) == 2
            and all(_is_int(v) and 0 <= v <= 100_000 for v in self.bf16_layers)),
            "two layer counts, first and last: '1,1' or [1, 1]")
        self._check("expandable_segments", self.expandable_segments is None
                    or isinstance(self.expandable_segments, bool), "true or false")
        self._check("loss", self.loss is None or self.loss in LM_LOSSES, f"one of {', '.join(LM_LOSSES)}")
        self._check("attention", self.attention is None or self.attention in ATTENTION_KERNELS,
                    f"one of {', '.join(ATTENTION_KERNELS)}")
        self._check("kernels", self.kernels is None or self.kernels in KERNEL_SETS, f"one of {', '.join(KERNEL_SETS)}")
        self._check("fp8_recipe", self.fp8_recipe is None or self.fp8_recipe in FP8_RECIPES,
                    f"one of {', '.join(FP8_RECIPES)}")
        for name in ("torch", "cuda"):
            v = getattr(self, name)
            if _is_num(v):  # YAML reads 2.4 as a float
                object.__setattr__(self, name, str(v))
            self._check(name, getattr(self, name) is None or (isinstance(getattr(self, name), str)
                                                                and bool(_VERSION_RE.match(getattr(self, name)))),
                        "a version like '2.4' or '12.1'")
        if self.cpu_speed is not None and _is_num(self.cpu_speed):
            object.__setattr__(self, "cpu_speed", float(self.cpu_speed) + 0.0)
        self._check("lazy_loading", self.lazy_loading is None or isinstance(self.lazy_loading, bool), "true or false")
        self._check("cpu_speed", self.cpu_speed is None or (_is_num(self.cpu_speed) and 0.05 <= self.cpu_speed <= 20),
                    "a factor between 0.05 and 20 (1.0: the reference server core)")
        self._check("cpu_cores", self.cpu_cores is None or (_is_int(self.cpu_cores) and 1 <= self.cpu_cores <= 1024),
                    "an integer between 1 and 1024")

    @property
    def foreach_optimizers(self) -> bool:
        """PyTorch >= 2.0 uses multi-tensor (foreach) optimizer kernels on CUDA by default; before,
        a Python loop over the parameters (torch 2.0 release notes, 'foreach by default')."""
        return version_tuple(self.torch) >= (2, 0)

    @property
    def foreach_unscale(self) -> bool:
        """GradScaler unscales all gradients with one foreach kernel per device and dtype
        (``_amp_foreach_non_finite_check_and_unscale_``) from PyTorch 1.7; 1.6's, the first
        ``torch.cuda.amp``, called ``_amp_non_finite_check_and_unscale_`` once per gradient."""
        return version_tuple(self.torch) >= (1, 7)

    @property
    def zero_grad_sets_none(self) -> bool:
        """``optimizer.zero_grad()`` frees the gradients (``set_to_none=True``) from PyTorch 2.0 on;
        before, it zeroed them in place, one kernel per parameter (torch 2.0 release notes)."""
        return version_tuple(self.torch) >= (2, 0)

    @property
    def lazy(self) -> bool:
        """Lazy CUDA module loading: CUDA >= 11.7 supports it and PyTorch >= 2.0 turns it on by
        default (sets CUDA_MODULE_LOADING=LAZY; CUDA 12.2 made it the driver default)."""
        if self.lazy_loading is not None:
            return self.lazy_loading
        return version_tuple(self.cuda) >= (11, 7) and version_tuple(self.torch) >= (2, 0)


# ------------------------------------------------------------------------------ defaults

# What a typical training script does per source (DataLoader defaults and the recipes cited).
SOURCE_DEFAULTS: dict[str, Data] = {
    "device": Data(num_workers=0, pin_memory=False, non_blocking=False, dataset_samples=None),
    # A TensorDataset through DataLoader(batch_size, shuffle=True): PyTorch's defaults.
    "memory": Data(num_workers=0, pin_memory=False, non_blocking=False, dataset_samples=60_000),
    # pytorch/examples imagenet/main.py: -j 4, pin_memory=True, .cuda(non_blocking=True); ImageNet-1k
    # train set 1,281,167 images, average stored resolution about 400x350 (Russakovsky et al. 2015).
    "images": Data(num_workers=4, pin_memory=True, non_blocking=True, image_size=(400, 350),
                   dataset_samples=1_281_167),
    # kuangliu/pytorch-cifar main.py: num_workers=2, no pinning, .to(device); CIFAR-10: 50,000 images.
    "small-images": Data(num_workers=2, pin_memory=False, non_blocking=False, dataset_samples=50_000),
    # A Hugging Face Trainer-style loader: dataloader_num_workers=0, dataloader_pin_memory=True.
    "tokens": Data(num_workers=0, pin_memory=True, non_blocking=False, dataset_samples=100_000),
    "environment": Data(num_workers=0, pin_memory=False, non_blocking=False, dataset_samples=None),
    "custom": Data(num_workers=0, pin_memory=False, non_blocking=False, dataset_samples=None),
}
DEFAULT_LOOP = Loop(item_calls=1, progress_bar=False, log_every=10, cudnn_benchmark=False)
DEFAULT_STACK = Stack(torch="2.4", cuda="12.1", lazy_loading=None, cpu_speed=1.0, cpu_cores=8)


@dataclass(frozen=True)
class Surroundings:
    """Fully resolved data, loop and stack: no field is None (except those that do not apply)."""

    data: Data
    loop: Loop
    stack: Stack

    def to_dict(self) -> dict:
        return {"data": self.data.to_dict(), "loop": self.loop.to_dict(), "stack": self.stack.to_dict()}


def infer_source(input_kinds: list[tuple[str, tuple[int, ...]]]) -> str:
    """A data source from a job's inputs, for jobs no zoo workload describes: integer inputs are
    token ids; a float input of shape (C, H, W) with C in 1..4 is an image (stored files when
    H, W >= 96, else a small in-memory set); anything else is tensors in host memory."""
    for dtype, shape in input_kinds:
        if dtype.startswith("int"):
            return "tokens"
    for dtype, shape in input_kinds:
        if len(shape) == 3 and 1 <= shape[0] <= 4:
            return "images" if min(shape[1:]) >= 96 else "small-images"
    return "memory"


def resolve(job, workload_data: Data | None = None, workload_loop: Loop | None = None,
            inferred_source: str = "memory") -> Surroundings:
    """The job's surroundings with every default filled in (see the module docstring)."""
    own = job.data or Data()
    if own.dataset is not None or own.environment is not None:  # fed by its own code, not the workload's
        workload_data = None
        if own.source is None:
            own = replace(own, source="environment" if own.environment is not None else "custom")
    data = own.merged(workload_data)
    if data.source is None:
        data = replace(data, source=inferred_source)
    data = data.merged(SOURCE_DEFAULTS[data.source])
    loop = (job.loop or Loop()).merged(workload_loop).merged(DEFAULT_LOOP)
    stack = (job.stack or Stack()).merged(DEFAULT_STACK)
    return Surroundings(data=data, loop=loop, stack=stack)
