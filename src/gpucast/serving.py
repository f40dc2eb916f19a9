"""The ``serve`` group of a job spec: what an LLM deployment serves and how its engine runs.

A job with ``mode: serve`` is a decoder-only language model behind an inference engine. The group says
what requests look like (``input_len`` and ``output_len`` tokens: fixed, or ``lognormal:MEAN,SIGMA``), how
they arrive (all ``batch_size`` prompts at once: a static batch; ``concurrency`` requests kept in flight:
a closed loop; or ``request_rate`` per second: Poisson arrivals; ``num_requests`` in the run) and the
engine's settings (``engine``, ``engine_version``: any release, run with the defaults of the modelled one it
follows (:data:`RELEASE_LINES`; unset: the newest modelled),
``entry`` (:data:`ENTRIES`: vLLM's defaults differ between its offline ``LLM`` class and its server) and
the knobs that change its speed and memory: ``max_num_seqs``,
``max_num_batched_tokens``, ``gpu_memory_utilization``, ``block_size``, ``cuda_graphs``, ``chunked_prefill``,
``kv_cache_dtype``, ``weights`` for weight-only quantisation, ``prefix_hit_rate``, ``max_model_len``: the
longest request the engine takes, the model's ``max_position_embeddings`` unless set; speculative decoding:
``spec_method`` (:data:`SPEC_METHODS`), ``spec_tokens`` (draft tokens a step, default 1) and
``spec_acceptance``, the mean tokens a step emits, an input; ``draft_model``: a separate drafter's Hugging Face
config under ``spec_method: draft``, kept as canonical JSON); disaggregated prefill and decode:
``prefill_replicas`` prefill instances of ``prefill_tensor`` ranks each (unset: the plan's tensor degree), the other
GPUs decode (:mod:`gpucast.estimate.serving.disagg`).
Unset fields take
the engine's documented defaults (:mod:`gpucast.estimate.serving.engines`, each cited there).

This module validates and serialises the group; it imports neither torch nor the estimator. What a
deployment then does is :mod:`gpucast.estimate.serving`'s.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from gpucast.surroundings import SpecError, _is_int, _is_num, _Spec

ENGINES = ("vllm", "sglang", "trtllm", "hf")
# Engine releases whose defaults are modelled, oldest first, each with the first release of the line it stands
# for (until the next line's first; the oldest also stands for every earlier release); the last is an engine's
# default (gpucast.estimate.serving.engines). vLLM's V1 engine is the default from 0.8.0 (its v0.8.0 release
# notes; VLLM_USE_V1 on by default) and its async scheduling from 0.14.0 (vllm-project/vllm#27614),
# TensorRT-LLM's PyTorch backend from 1.0 (its 1.0 release notes and llmapi/llm_args.py: backend "pytorch" by
# default), SGLang's defaults by GPU memory from 0.5. A release of
# a line runs with the modelled release's defaults (:func:`modelled_release`; the prediction says so).
# The other engines run the one release of theirs modelled.
RELEASE_LINES = {"trtllm": (("0.11", "0"), ("1.0", "1.0")), "vllm": (("0.6", "0"), ("0.11", "0.8"), ("0.14", "0.14")),
                 "sglang": (("0.4", "0"), ("0.5", "0.5"))}
ENGINE_VERSIONS = {engine: tuple(m for m, _first in line) for engine, line in RELEASE_LINES.items()}
_RELEASE = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[.+-]?(?:rc|post|dev|a|b)\d*)*$")
# How a deployment is driven (vLLM's defaults depend on it): the offline LLM class or the OpenAI-compatible
# server; unset: offline for an all-at-once load, the server for a closed loop or a request rate.
ENTRIES = ("offline", "server")
# Speculative decoding (gpucast.estimate.serving.speculative): a drafter's k tokens verified in one target step.
SPEC_METHODS = ("eagle3", "mtp", "ngram", "draft")
KV_CACHE_DTYPES = ("auto", "fp8", "nvfp4")
# Bytes a cached K/V element takes (auto: the model's dtype); NVFP4 in 16-element blocks with an FP8 scale
# (gpucast.formats.ELEMENT_BYTES, restated here: this module imports no estimator).
KV_ELEMENT_BYTES = {"fp8": 1.0, "nvfp4": 0.5 + 1.0 / 16}
# Engines with an NVFP4 KV cache (TensorRT-LLM's kv_cache_config dtype nvfp4, SGLang's fp4_e2m1), on FP4 tensor cores.
NVFP4_KV_ENGINES = ("trtllm", "sglang")
WEIGHTS = ("auto", "int8", "int4", "mxfp4")   # mxfp4: the routed experts only (GPT-OSS's checkpoints)
MAX_TOKENS = 1 << 21  # a sanity bound on lengths (2M tokens), far past any model's context
MAX_REQUESTS = 1_000_000


def release_key(version) -> tuple[int, ...] | None:
    """``"0.11.2"`` / ``"v1.0.0rc3"`` -> ``(0, 11, 2)`` / ``(1, 0, 0)``; None for what is not a release number."""
    m = _RELEASE.match(str(version).strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def release_line(engine: str, version) -> tuple[str, str, str | None]:
    """(modelled release, the line's first release, the next line's first or None) for ``engine``'s ``version``
    (:data:`RELEASE_LINES`): the line whose first release is the newest at or before it; the oldest line for
    anything earlier."""
    key = release_key(version)
    line = RELEASE_LINES[engine]
    at = 0
    for i, (_modelled, first) in enumerate(line):
        if key is not None and key >= release_key(first):
            at = i
    return line[at][0], line[at][1], line[at + 1][1] if at + 1 < len(line) else None


def modelled_release(engine: str, version) -> str:
    """The modelled release whose defaults ``engine``'s ``version`` runs with (:func:`release_line`)."""
    return release_line(engine, version)[0]


def parse_length(value, name: str) -> tuple[str, float, float]:
    """``("fixed", n, 0)`` for an integer, ``("lognormal", mean, sigma)`` for ``"lognormal:MEAN,SIGMA"``
    (the mean of the lengths in tokens and the sigma of their logarithm); SpecError otherwise."""
    what = f"field 'serve.{name}' must be a positive integer or 'lognormal:MEAN,SIGMA'"
    if _is_int(value):
        if not 1 <= value <= MAX_TOKENS:
            raise SpecError(f"{what} (at most {MAX_TOKENS} tokens), got {value!r}")
        return ("fixed", float(value), 0.0)
    if isinstance(value, str) and value.startswith("lognormal:"):
        try:
            mean, sigma = (float(v) for v in value[len("lognormal:"):].split(","))
        except ValueError:
            raise SpecError(f"{what}, got {value!r}") from None
        if not (math.isfinite(mean) and math.isfinite(sigma) and 1 <= mean <= MAX_TOKENS and 0 <= sigma <= 3):
            raise SpecError(f"{what} with 1 <= MEAN <= {MAX_TOKENS} and 0 <= SIGMA <= 3, got {value!r}")
        return ("lognormal", mean, sigma)
    raise SpecError(f"{what}, got {value!r}")


@dataclass(frozen=True)
class Serve(_Spec):
    """What an LLM deployment serves and how its engine runs (module docstring)."""

    _NAME = "serve"
    input_len: int | str | None = None
    output_len: int | str | None = None
    engine: str | None = None
    concurrency: int | None = None
    request_rate: float | None = None
    num_requests: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    cuda_graphs: bool | None = None
    kv_cache_dtype: str | None = None
    weights: str | None = None
    prefix_hit_rate: float | None = None
    # out of the repr (the simulator's truth draws from a hash of it, as Parallel's newer fields)
    engine_version: str | None = field(default=None, repr=False)
    entry: str | None = field(default=None, repr=False)
    max_model_len: int | None = field(default=None, repr=False)
    spec_method: str | None = field(default=None, repr=False)
    spec_tokens: int | None = field(default=None, repr=False)
    spec_acceptance: float | None = field(default=None, repr=False)
    prefill_replicas: int | None = field(default=None, repr=False)
    prefill_tensor: int | None = field(default=None, repr=False)
    draft_model: str | None = field(default=None, repr=False)   # canonical JSON once the job has resolved it
    chunked_prefill: bool | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len"):
            v = getattr(self, name)
            if v is not None:
                parse_length(v, name)
        self._check("engine", self.engine is None or self.engine in ENGINES, f"one of {', '.join(ENGINES)}")
        for name, hi in (("concurrency", MAX_REQUESTS), ("num_requests", MAX_REQUESTS), ("max_num_seqs", 65536),
                         ("prefill_replicas", 4096), ("prefill_tensor", 1024),
                         ("max_num_batched_tokens", MAX_TOKENS), ("block_size", 1024), ("max_model_len", MAX_TOKENS)):
            v = getattr(self, name)
            self._check(name, v is None or (_is_int(v) and 1 <= v <= hi), f"an integer between 1 and {hi}")
        self._check("request_rate", self.request_rate is None or (
            _is_num(self.request_rate) and math.isfinite(self.request_rate) and 0 < self.request_rate <= 1e6),
            "requests per second, > 0")
        self._check("gpu_memory_utilization", self.gpu_memory_utilization is None or (
            _is_num(self.gpu_memory_utilization) and 0 < self.gpu_memory_utilization <= 1), "a share in (0, 1]")
        self._check("prefix_hit_rate", self.prefix_hit_rate is None or (
            _is_num(self.prefix_hit_rate) and 0 <= self.prefix_hit_rate < 1), "a share in [0, 1)")
        self._check("cuda_graphs", self.cuda_graphs is None or isinstance(self.cuda_graphs, bool), "true or false")
        self._check("chunked_prefill", self.chunked_prefill is None or isinstance(self.chunked_prefill, bool),
                    "true or false")
        self._check("kv_cache_dtype", self.kv_cache_dtype is None or self.kv_cache_dtype in KV_CACHE_DTYPES,
                    f"one of {', '.join(KV_CACHE_DTYPES)}")
        self._check("weights", self.weights is None or self.weights in WEIGHTS, f"one of {', '.join(WEIGHTS)}")
        self._check("entry", self.entry is None or self.entry in ENTRIES, f"one of {', '.join(ENTRIES)}")
        self._check("spec_method", self.spec_method is None or self.spec_method in SPEC_METHODS,
                    f"one of {', '.join(SPEC_METHODS)}")
        self._check("spec_tokens", self.spec_tokens is None or (
            _is_int(self.spec_tokens) and 1 <= self.spec_tokens <= 16), "an integer between 1 and 16 (draft tokens per step)")
        if (self.spec_tokens is not None or self.spec_acceptance is not None) and self.spec_method is None:
            raise SpecError("fields 'serve.spec_tokens' and 'serve.spec_acceptance' describe speculative decoding: "
                            "set serve.spec_method (eagle3, mtp, ngram or draft)")
        if isinstance(self.draft_model, dict):
            object.__setattr__(self, "draft_model", json.dumps(self.draft_model, sort_keys=True, separators=(",", ":")))
        self._check("draft_model", self.draft_model is None or (isinstance(self.draft_model, str) and self.draft_model),
                    "the drafter's Hugging Face config: a config.json path, a mapping or a model type")
        if (self.spec_method == "draft") != (self.draft_model is not None):
            raise SpecError("fields 'serve.spec_method' and 'serve.draft_model': a separate draft model is "
                            "'spec_method: draft' with the drafter's config in serve.draft_model, and only that")
        if self.prefill_tensor is not None and self.prefill_replicas is None:
            raise SpecError("field 'serve.prefill_tensor' is the prefill instances' tensor degree under "
                            "disaggregated prefill and decode: set serve.prefill_replicas too")
        if self.spec_method is not None:
            k = self.spec_tokens or 1
            self._check("spec_acceptance", _is_num(self.spec_acceptance) and 1 <= self.spec_acceptance <= k + 1,
                        f"the mean tokens a step emits, accepted drafts plus the target's own: between 1 and "
                        f"spec_tokens + 1 ({k + 1}); it depends on the drafter and the data, so it is an input")
        if self.engine_version is not None:
            engine = self.engine or "vllm"
            if _is_num(self.engine_version):   # a YAML or JSON number: 1.0, 0.11 (0.10 would read 0.1: quote it)
                object.__setattr__(self, "engine_version", str(self.engine_version))
            if engine not in RELEASE_LINES:
                raise SpecError(f"field 'serve.engine_version': releases are modelled for "
                                f"{', '.join(RELEASE_LINES)} only; {engine} runs its one modelled release (unset it)")
            self._check("engine_version", isinstance(self.engine_version, str) and release_key(self.engine_version),
                        f"a release number such as {' or '.join(ENGINE_VERSIONS[engine])} (any {engine} release: "
                        f"it runs with the defaults of the modelled release of its line)")
        if self.concurrency is not None and self.request_rate is not None:
            raise SpecError("fields 'serve.concurrency' and 'serve.request_rate' are two kinds of load: set one")

    @property
    def load(self) -> str:
        """``static`` (every prompt at once), ``closed`` (``concurrency`` in flight) or ``poisson``."""
        if self.request_rate is not None:
            return "poisson"
        if self.concurrency is not None:
            return "closed"
        return "static"

    @property
    def kv_element_bytes(self) -> float | None:
        """Bytes of one cached K/V element (:data:`KV_ELEMENT_BYTES`), or None for the model's dtype."""
        return KV_ELEMENT_BYTES.get(self.kv_cache_dtype or "auto")

    @property
    def entry_point(self) -> str:
        """``entry``, or ``offline`` for an all-at-once load and ``server`` for the others."""
        return self.entry or ("offline" if self.load == "static" else "server")


def check_serve_job(job) -> None:
    """The combinations that need no model: a ``serve`` group only with ``mode: serve``, and a served
    model is a Hugging Face config (``hf:...``, the decoder it names)."""
    if job.serve is not None and job.mode != "serve":
        raise SpecError("field 'serve' applies to mode 'serve'")
    if job.mode != "serve":
        return
    if not job.is_hf:
        raise SpecError(f"mode 'serve' takes a Hugging Face decoder config (model 'hf:...', Job.from_hf_config), "
                        f"got model {job.model!r}")
    if job.optimizer not in ("none", "sgd"):
        raise SpecError("field 'optimizer' does not apply to mode 'serve'")
    s = job.serve or Serve()
    if s.load == "static" and s.num_requests is not None and s.num_requests != job.batch_size:
        raise SpecError("field 'serve.num_requests' of a static batch is 'batch_size' (set concurrency or "
                        "request_rate for a stream of requests)")
