"""The job spec: what a user asks gpucast about.

A :class:`Job` names the model (a zoo workload, an ONNX file, a Hugging Face config, or a user
module given by factories), the batch size, optional shape overrides, precision, mode, optimizer, the host-side input
pipeline cost per step, the number of data-parallel GPUs, and what surrounds the graph: how it is
fed (``data``), its loop's habits (``loop``) and its software stack and host (``stack``), each a
partial spec whose unset fields take the workload's typical values (:mod:`gpucast.surroundings`). It is immutable and
hashable; :attr:`Job.key` is a stable content hash that keys caches, datasets and
service responses. Jobs round-trip through JSON and YAML.

This module does not import torch: validating and hashing a spec is cheap. It imports neither
the zoo nor the graph readers: a zoo name is checked and a Hugging Face config resolved through
the model-source registry (:mod:`gpucast.model_sources`), which they register into.

What is not modelled here: the model's graph (``gpucast.graph``) and any GPU
(``gpucast.hardware``).
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from gpucast.formats import TE_RECIPES
from gpucast.model_sources import source as _model_source
from gpucast.plan import Adapter, Parallel, check_job
from gpucast.serving import Serve, check_serve_job
from gpucast.surroundings import Data, Loop, SpecError, Stack

# amp-*: torch.autocast over fp32 weights; bf16/fp16: the weights themselves in half precision
# ("pure", as FSDP's MixedPrecision(param_dtype=...), DeepSpeed's and Megatron-LM's bf16 modes run the
# model; a sharded optimizer keeps fp32 master weights, gpucast.estimate.parallel.sharding).
PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
MODES = ("train", "infer", "serve")
OPTIMIZERS = ("sgd", "adam", "adamw", "none")
_SOURCE_FIELDS = ("model_digest", "hf_config")
# The groups of fields (partial specs, unset fields omitted): what surrounds the graph, and how the
# job spans GPUs and which parameters it trains (gpucast.plan).
_SURROUNDING_FIELDS = {"data": Data, "loop": Loop, "stack": Stack, "parallel": Parallel, "adapter": Adapter,
                       "serve": Serve}
MAX_BATCH_SIZE = 1 << 20  # a sanity bound, far above any single-GPU batch


class JobError(ValueError):
    """A job spec is invalid; the message is one line naming the field."""


@dataclass(frozen=True)
class Job:
    """One training (or inference) job, as a scheduler would receive it.

    ``model`` is one of:

    * a zoo name (see ``gpucast zoo``);
    * ``"onnx:<path>"``, an ONNX file (:meth:`from_onnx`); ``model_digest`` holds the sha256 of
      its bytes, so the key follows the content and a file that changed is refused;
    * ``"hf:<model_type>"``, a Hugging Face architecture built from ``hf_config``, the config's
      canonical JSON (:meth:`from_hf_config`), so the spec is self-contained;
    * ``"module:<import path of the factory>"`` for jobs made by :meth:`from_module`.

    ``input_pipeline_s`` is host CPU time per step spent producing the batch
    (decode, augment, collate) by the data loader; 0 means inputs are ready.

    ``data``, ``loop`` and ``stack`` (:class:`~gpucast.surroundings.Data`, ``Loop``, ``Stack``,
    or mappings of their fields) describe the loader, the loop and the stack; ``None`` (or an
    unset field) is the workload's typical script, not a benchmark: see
    :func:`gpucast.surroundings.resolve`. ``data=Data(source="device"), loop=Loop.benchmark()``
    is a benchmark-style job.

    ``parallel`` (:class:`~gpucast.plan.Parallel`) says how the job spans ``gpus``: tensor and
    pipeline degrees, sharding (DDP, ZeRO 1-3, FSDP), activation recomputation, gradient
    accumulation, nodes and their network; unset, ``gpus`` are plain DDP replicas inside one node.
    ``adapter`` (:class:`~gpucast.plan.Adapter`) trains LoRA/QLoRA adapters instead of every weight.
    ``serve`` (:class:`~gpucast.serving.Serve`), with ``mode="serve"``, is an LLM deployment: the requests,
    their load and the inference engine (``batch_size`` is then the number of prompts of a static batch).
    """

    model: str
    batch_size: int = 32
    input_shape: tuple[int, ...] | None = None
    seq_len: int | None = None
    precision: str = "fp32"
    mode: str = "train"
    optimizer: str = "sgd"
    input_pipeline_s: float = 0.0
    gpus: int = 1
    model_digest: str | None = None
    hf_config: str | None = None
    data: Data | None = None
    loop: Loop | None = None
    stack: Stack | None = None
    parallel: Parallel | None = None
    adapter: Adapter | None = None
    serve: Serve | None = None
    # Factories of a user module job; not part of equality, hash or serialisation.
    model_fn: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    input_fn: Callable[[int], tuple] | None = field(default=None, compare=False, repr=False)
    loss_fn: Callable[[Any, tuple], Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.input_shape is not None:
            object.__setattr__(self, "input_shape", _as_shape(self.input_shape))
        if self.optimizer is None:
            object.__setattr__(self, "optimizer", "none")
        for name, cls in _SURROUNDING_FIELDS.items():
            try:
                spec = cls.coerce(getattr(self, name))
                object.__setattr__(self, name, spec if spec is not None and spec.to_dict() else None)
            except SpecError as exc:
                raise JobError(str(exc)) from None
        if isinstance(self.hf_config, dict):
            object.__setattr__(self, "hf_config", canonical_json(self.hf_config))
        if self.serve is not None and self.serve.draft_model is not None:   # the drafter's config, self-contained
            draft = self.serve.draft_model
            if draft.startswith("{"):
                try:
                    draft = json.loads(draft)
                except ValueError:
                    raise JobError(f"field 'serve.draft_model' is not valid JSON: {draft[:60]!r}") from None
            cfg = _model_source("hf").resolve(draft)
            object.__setattr__(self, "serve", replace(self.serve, draft_model=canonical_json(cfg)))
        if self.is_onnx and self.model_digest is None and isinstance(self.model, str):
            object.__setattr__(self, "model_digest", file_digest(self.model[len("onnx:"):]))
        _validate(self)
        # Equal specs must have equal keys: 0 and 0.0 (and -0.0) compare equal but serialise
        # differently, so store the one canonical float.
        object.__setattr__(self, "input_pipeline_s", float(self.input_pipeline_s) + 0.0)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_module(
        cls,
        model_fn: Callable[[], Any],
        input_fn: Callable[[int], tuple],
        *,
        batch_size: int,
        optimizer: str | None = "sgd",
        precision: str = "fp32",
        mode: str = "train",
        loss_fn: Callable[[Any, tuple], Any] | None = None,
        input_pipeline_s: float = 0.0,
        gpus: int = 1,
        name: str | None = None,
        data: Data | dict | None = None,
        loop: Loop | dict | None = None,
        stack: Stack | dict | None = None,
        parallel: Parallel | dict | None = None,
        adapter: Adapter | dict | None = None,
    ) -> "Job":
        """A job for any ``nn.Module``.

        ``model_fn()`` returns the module and ``input_fn(batch_size)`` the tuple of inputs of
        its ``forward``; gpucast calls both under the meta device, so nothing is allocated.
        ``loss_fn(output, inputs)`` returns the scalar to back-propagate; by default the mean
        of the squares of the first floating output (see :func:`gpucast.zoo.default_loss`).
        """
        if not callable(model_fn):
            raise JobError("field 'model_fn' must be callable")
        if not callable(input_fn):
            raise JobError("field 'input_fn' must be callable")
        ref = name or f"{getattr(model_fn, '__module__', '?')}:{getattr(model_fn, '__qualname__', repr(model_fn))}"
        return cls(
            model=f"module:{ref}", batch_size=batch_size, precision=precision, mode=mode,
            optimizer=optimizer, input_pipeline_s=input_pipeline_s, gpus=gpus,
            data=data, loop=loop, stack=stack, parallel=parallel, adapter=adapter, model_fn=model_fn, input_fn=input_fn, loss_fn=loss_fn,
        )

    @classmethod
    def from_onnx(cls, path: str | Path, *, batch_size: int, **fields_) -> "Job":
        """A job for an ONNX file (read by :mod:`gpucast.graph.onnx`; nothing is loaded here
        but the file's hash)."""
        return cls(model=f"onnx:{os.fspath(path)}", batch_size=batch_size, **fields_)

    @classmethod
    def from_hf_config(cls, config, *, batch_size: int, **fields_) -> "Job":
        """A job for a Hugging Face architecture: ``config`` is a config.json path, a dict, a
        ``PretrainedConfig`` or the name of a transformers config class (``"BertConfig"``) or
        model type (``"bert"``). No weights are downloaded (:mod:`gpucast.graph.hf`)."""
        cfg = _model_source("hf").resolve(config)  # gpucast.graph.hf.resolve_config
        return cls(model=f"hf:{cfg['model_type']}", hf_config=canonical_json(cfg), batch_size=batch_size,
                   **fields_)

    @classmethod
    def from_dict(cls, data: dict) -> "Job":
        if not isinstance(data, dict):
            raise JobError(f"job spec must be a mapping, got {type(data).__name__}")
        allowed = {f.name for f in fields(cls) if f.compare}
        unknown = sorted(set(data) - allowed, key=str)
        if unknown:
            raise JobError(f"unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        if "model" not in data:
            raise JobError("field 'model' is required")
        if str(data["model"]).startswith("module:"):
            raise JobError("field 'model': a module job cannot be loaded from a file; "
                           "build it with Job.from_module")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> "Job":
        """Read a job from a .json, .yaml or .yml file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise JobError(f"cannot read job file {str(path)!r}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise JobError(f"job file {str(path)!r} is not UTF-8 text") from None
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise JobError(f"job file {str(path)!r} is not valid {path.suffix.lstrip('.') or 'JSON'}: {first}") from None
        if not isinstance(data, dict):
            raise JobError(f"job file {str(path)!r} must hold a mapping of job fields, got "
                           f"{'nothing' if data is None else type(data).__name__}")
        return cls.from_dict(data)

    # ----------------------------------------------------------------- serialisation
    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.compare}
        for name in _SOURCE_FIELDS:  # only ONNX/HF jobs carry these: zoo jobs keep their keys
            if d[name] is None:
                del d[name]
        for name in _SURROUNDING_FIELDS:  # unset surroundings are omitted: older jobs keep their keys
            if d[name] is None:
                del d[name]
            else:
                d[name] = d[name].to_dict()
        if d["input_shape"] is not None:
            d["input_shape"] = list(d["input_shape"])
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def save(self, path: str | Path) -> None:
        """Write the job to .json or .yaml atomically; module jobs cannot be saved."""
        if self.is_module:
            raise JobError("field 'model': a module job cannot be saved to a file (its code is not data)")
        path = Path(path)
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            text = yaml.safe_dump(self.to_dict(), sort_keys=True)
        else:
            text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @property
    def key(self) -> str:
        """Stable content hash of the spec (16 hex digits)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def is_module(self) -> bool:
        return self.model.startswith("module:")

    @property
    def is_onnx(self) -> bool:
        return isinstance(self.model, str) and self.model.startswith("onnx:")

    @property
    def is_hf(self) -> bool:
        return isinstance(self.model, str) and self.model.startswith("hf:")

    @property
    def onnx_path(self) -> Path:
        return Path(self.model[len("onnx:"):])

    def with_(self, **changes) -> "Job":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


def canonical_json(data: dict) -> str:
    """One spelling per mapping: sorted keys, no whitespace (so equal configs hash equally)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes, 16 hex digits (as :attr:`Job.key`); a JobError if unreadable."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise JobError(f"field 'model': cannot read ONNX file {os.fspath(path)!r}: "
                       f"{exc.strerror or type(exc).__name__}") from None
    return h.hexdigest()[:16]


def _as_shape(value) -> tuple[int, ...]:
    """``3,224,224``, ``3x224x224`` or a sequence of ints -> a tuple; anything else is a JobError."""
    if isinstance(value, str):
        parts = re.split(r"[x,]", value.strip())
        if not all(re.fullmatch(r"\s*\d+\s*", p) for p in parts):
            raise JobError(f"field 'input_shape' must be integers like 3,224,224, got {value!r}")
        return tuple(int(p) for p in parts)
    try:  # operator.index takes ints (numpy's too) but not floats or strings; bools are refused
        if isinstance(value, (bytes, dict)) or any(isinstance(d, bool) for d in value):
            raise TypeError
        return tuple(operator.index(d) for d in value)
    except TypeError:
        raise JobError(f"field 'input_shape' must be a list of integers, got {value!r}") from None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _validate(job: Job) -> None:
    if not isinstance(job.model, str) or not job.model.strip():
        raise JobError("field 'model' must be a non-empty string (a zoo name, see `gpucast zoo`)")
    if job.is_onnx:
        if not job.model[len("onnx:"):].strip():
            raise JobError("field 'model': 'onnx:' must be followed by the file's path")
        if not (isinstance(job.model_digest, str) and re.fullmatch(r"[0-9a-f]{16}", job.model_digest)):
            raise JobError(f"field 'model_digest' must be 16 hex digits (sha256 of the file), got {job.model_digest!r}")
    elif job.model_digest is not None:
        raise JobError("field 'model_digest' belongs to ONNX jobs (model 'onnx:<path>') only")
    if job.is_hf:
        _validate_hf(job)
    elif job.hf_config is not None:
        raise JobError("field 'hf_config' belongs to Hugging Face jobs (model 'hf:<model_type>') only")
    if job.is_module:
        if job.model_fn is None:
            raise JobError("field 'model': a module job needs model_fn (use Job.from_module)")
    elif not (job.is_onnx or job.is_hf):
        try:
            _model_source("zoo").check(job.model)  # gpucast.zoo.get
        except KeyError as exc:
            raise JobError(f"field 'model': {exc.args[0]}") from None
    if not _is_int(job.batch_size) or not 1 <= job.batch_size <= MAX_BATCH_SIZE:
        raise JobError(f"field 'batch_size' must be an integer between 1 and {MAX_BATCH_SIZE}, got {job.batch_size!r}")
    if job.input_shape is not None and (not job.input_shape or any(d < 1 for d in job.input_shape)):
        raise JobError(f"field 'input_shape' must be positive integers, got {list(job.input_shape)!r}")
    if job.seq_len is not None and (not _is_int(job.seq_len) or job.seq_len < 1):
        raise JobError(f"field 'seq_len' must be a positive integer, got {job.seq_len!r}")
    if job.precision not in PRECISIONS:
        raise JobError(f"field 'precision' must be one of {', '.join(PRECISIONS)}, got {job.precision!r}")
    if job.mode not in MODES:
        raise JobError(f"field 'mode' must be one of {', '.join(MODES)}, got {job.mode!r}")
    packed = job.data.packed_sample_len if job.data is not None else None
    if packed is not None and (job.seq_len is None or packed > job.seq_len):
        raise JobError(f"field 'data.packed_sample_len' ({packed}) packs samples into seq_len-token sequences: it "
                       f"needs seq_len of at least that many tokens (got {job.seq_len})")
    if job.stack is not None and job.stack.fp8_recipe is not None and job.precision != "fp8":
        raise JobError(f"field 'stack.fp8_recipe' applies to precision fp8 (got {job.precision}; mxfp8 and nvfp4 "
                       f"are block-scaled recipes of their own)")
    if job.stack is not None and job.stack.bf16_layers is not None and job.precision not in TE_RECIPES:
        raise JobError(f"field 'stack.bf16_layers' keeps layers of an FP8 or FP4 recipe in bf16: it applies to "
                       f"precision fp8, mxfp8 or nvfp4 (got {job.precision})")
    if job.optimizer not in OPTIMIZERS:
        raise JobError(f"field 'optimizer' must be one of {', '.join(OPTIMIZERS)}, got {job.optimizer!r}")
    if isinstance(job.input_pipeline_s, bool) or not isinstance(job.input_pipeline_s, (int, float)) \
            or not 0 <= job.input_pipeline_s < 3600:
        raise JobError(f"field 'input_pipeline_s' must be seconds in [0, 3600), got {job.input_pipeline_s!r}")
    if not _is_int(job.gpus) or not 1 <= job.gpus <= 4096:
        raise JobError(f"field 'gpus' must be an integer between 1 and 4096, got {job.gpus!r}")
    try:
        check_job(job)
        check_serve_job(job)
    except SpecError as exc:
        raise JobError(str(exc)) from None


def _validate_hf(job: Job) -> None:
    if not isinstance(job.hf_config, str):
        raise JobError("field 'hf_config' is required for model 'hf:...' (a config's JSON; use Job.from_hf_config)")
    try:
        cfg = json.loads(job.hf_config)
    except ValueError:
        raise JobError("field 'hf_config' is not valid JSON") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise JobError("field 'hf_config' must be a JSON object with a 'model_type'")
    if job.model != f"hf:{cfg['model_type']}":
        raise JobError(f"field 'model' must be 'hf:{cfg['model_type']}' for this hf_config, got {job.model!r}")
