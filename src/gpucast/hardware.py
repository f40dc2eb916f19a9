"""The GPU catalog: what a GPU *is*, on paper.

A :class:`GpuSpec` holds one GPU's vendor datasheet figures: SM count, boost clock, peak FP32 /
TF32 / FP16 / BF16 rates (and FP8 / FP4 where the tensor cores have them), memory size and bandwidth, L2 size, host link, NVLink, board power, and
the names NVML prints for it. The built-in catalog lives in ``gpucast/data/gpus.yaml`` (GPUs
K80 to B200 and GB200, each with its source); users add GPUs with a YAML or JSON file of the same fields.

What is modelled: datasheet peak figures. Tensor-core rates are dense (no 2:4 sparsity) and with
FP32 accumulate, which is what frameworks use for training. ``memory_bytes`` is the total NVML
reports, i.e. what a profiler on that card sees. One figure is not a datasheet peak:
``sustained_clock_mhz`` (optional), the SM clock a card holds under sustained dense math at its
board power limit (``tdp_w``), a published figure (a measurement by others, or the datasheet
base clock that NVIDIA guarantees under the power limit); each catalog value cites its source in
``data/gpus.yaml``. :attr:`GpuSpec.clock_factor` is
``min(1, sustained_clock_mhz / boost_clock_mhz)`` (1 when unset), :attr:`GpuSpec.tensor_clock_factor`
the same against ``tensor_clock_mhz`` (optional: the clock NVIDIA computes the tensor peaks at
where it is below the boost clock, as on Hopper and data-center Blackwell), and
:meth:`GpuSpec.sustained_tflops` is the peak times the factor of its units: the rate a time model should use. Memory bandwidth is not scaled:
the power limit throttles the SM clock, not the memory clock (published nvidia-smi samples of a
power-capped RTX 3090 show the memory clock at its rated speed in every sample while the SM
clock drops; cited in ``data/gpus.yaml``). ``simt_clock_mhz`` (optional) is the clock the card holds
under sustained SIMT math (FP32 without tensor cores), where that differs from the tensor cores'
sustained clock: an H200's FP32 training steps held its 1,980 MHz boost at 597-615 W of its 700 W
(NVML, ``data/measurements/2026-12-04-h200.parquet``, a measurement of ours), while power-saturated
BF16 GEMMs pull a GH100 down to ~1,455 MHz. The factor assumes the entry's peaks are computed at
``boost_clock_mhz``, so the field is set only on such entries (not the K80, whose peaks are at
its 562 MHz application clock).

What is not modelled: how the clock under load varies with the workload (one sustained clock is
used for every kernel, whatever power it draws), thermal capping in a badly cooled chassis,
user-set power limits or locked clocks, partitions other than MIG slices (a MIG profile of a
catalog GPU, ``a100-40gb:1g.5gb``, is a GpuSpec made by :mod:`gpucast.mig`), ECC on/off variants, and
achieved efficiency of any kernel (no GPU reaches these peaks; how far below it stays is the
estimator's job, learned from measurements). Nothing here knows about models or jobs.

Peak rate a kernel can use (:meth:`GpuSpec.peak_tflops`; :meth:`GpuSpec.sustained_tflops` is the
same times :attr:`GpuSpec.clock_factor`):

=======  ==========================================  =================================
dtype    tensor_cores=True                           tensor_cores=False
=======  ==========================================  =================================
fp32     ``fp32_tflops``                             ``fp32_tflops``
tf32     ``tf32_tflops``; ``fp32_tflops`` if None    ``fp32_tflops``
fp16     ``fp16_tflops`` (vector rate if no TCs)     ``fp16_vector_tflops``
bf16     ``bf16_tflops``; ``fp32_tflops`` if None    ``fp32_tflops`` (see below)
fp8      ``fp8_tflops``; the fp16 row if None        the fp16 row
fp4      ``fp4_tflops``; the fp8 row if None         the fp16 row
=======  ==========================================  =================================

BF16 off the tensor cores is given the FP32 rate: the catalog stores no vector-BF16 figure, and
PyTorch's elementwise kernels compute BF16 in FP32 anyway. Where BF16 is unsupported (before
Ampere) it is emulated at best, so FP32 is an upper bound.

User spec files: the fields of :class:`GpuSpec`, one GPU per file (``.yaml``, ``.yml``,
``.json``). Memory may be given as exactly one of ``memory_bytes``, ``memory_mib`` or
``memory_gib``; L2 as ``l2_bytes`` or ``l2_mib``. Optional fields and their defaults are in
:data:`DEFAULTS`; everything else is required. Unknown fields are rejected by name, and each
bad value raises one ``ValueError`` line naming the file, the field and the problem.

One module of this size because the catalog, a spec file's reading and its checks are the one definition of a
GPU (the fields are :mod:`gpucast.hardware_fields`).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Union

import yaml

__all__ = [
    "ARCHITECTURES",
    "DEFAULTS",
    "DTYPES",
    "GpuSpec",
    "UnknownGpuError",
    "catalog",
    "from_nvml_name",
    "get_gpu",
    "load_spec_file",
    "register_gpu",
]

from gpucast.hardware_fields import (ARCHITECTURES, DEFAULTS, DTYPES, GIB, MIB,  # noqa: F401 (re-exported)
                                     NVLINK_GENERATIONS, _POSITIVE_FLOATS, _SIZE_ALIASES, _SLICE_RE)
from gpucast.hardware_fields import FieldError as _FieldError
from gpucast.hardware_fields import bad as _bad
from gpucast.hardware_fields import check as _check
from gpucast.hardware_fields import is_num as _is_num


class UnknownGpuError(KeyError):
    """A GPU name the catalog does not know. ``str()`` is the plain one-line message."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's datasheet figures. See the module docstring and ``data/gpus.yaml``."""

    name: str
    display_name: str
    architecture: str
    compute_capability: tuple[int, int]
    sm_count: int
    boost_clock_mhz: float
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float
    fp16_vector_tflops: float
    bf16_tflops: float | None
    memory_bytes: int
    memory_bandwidth_gbs: float
    l2_bytes: int
    host_link_gbs: float
    nvlink_gbs: float
    tdp_w: float
    nvml_names: tuple[str, ...]
    source: str
    sustained_clock_mhz: float | None = None
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    nvlink_generation: int | None = None
    nvlink_domain: int | None = None
    nic_gbit: float | None = None
    tensor_clock_mhz: float | None = None
    simt_clock_mhz: float | None = None

    def __post_init__(self) -> None:
        for f, conv in (("compute_capability", tuple), ("nvml_names", tuple)):
            if isinstance(getattr(self, f), list):
                object.__setattr__(self, f, conv(getattr(self, f)))
        try:
            _check({f.name: getattr(self, f.name) for f in fields(self)})
        except _FieldError as e:
            raise ValueError(f"gpu spec {self.name!r}: {e}") from None

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def has_tensor_cores(self) -> bool:
        return ARCHITECTURES.index(self.architecture) >= ARCHITECTURES.index("volta")

    @property
    def supports_bf16(self) -> bool:
        return self.bf16_tflops is not None

    @property
    def clock_factor(self) -> float:
        """``min(1, simt_clock_mhz / boost_clock_mhz)`` where the card has a SIMT clock, else
        ``min(1, sustained_clock_mhz / boost_clock_mhz)``; 1 when the card holds its boost clock.

        The share of the datasheet's SIMT (non-tensor-core) peaks a card keeps under sustained math
        at its power limit (peaks scale with the SM clock). Never above 1: a card that boosts past
        its rated clock is not credited with more than the datasheet peak.
        """
        clock = self.simt_clock_mhz if self.simt_clock_mhz is not None else self.sustained_clock_mhz
        if clock is None:
            return 1.0
        return min(1.0, clock / self.boost_clock_mhz)

    @property
    def tensor_clock_factor(self) -> float:
        """:attr:`clock_factor` for the tensor-core peaks: ``min(1, sustained_clock_mhz /
        tensor_clock_mhz)`` where NVIDIA computes those peaks at a clock below the boost clock
        (H100 SXM: 1,830 MHz, FlashAttention-3 paper, appendix C.1); the boost clock elsewhere."""
        if self.sustained_clock_mhz is None:
            return 1.0
        return min(1.0, self.sustained_clock_mhz / (self.tensor_clock_mhz or self.boost_clock_mhz))

    def sustained_tflops(self, dtype: str, tensor_cores: bool = True) -> float:
        """:meth:`peak_tflops` at the sustained clock: the compute rate a time model should use."""
        tensor = tensor_cores and self.has_tensor_cores and dtype != "fp32"
        return self.peak_tflops(dtype, tensor_cores) * (self.tensor_clock_factor if tensor else self.clock_factor)

    def peak_tflops(self, dtype: str, tensor_cores: bool = True) -> float:
        """Datasheet peak TFLOPS a kernel computing in ``dtype`` can reach (module docstring).

        This is the figure MFU and other utilizations are quoted against; predicted times use
        :meth:`sustained_tflops`.
        """
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if dtype in ("fp8", "fp4"):  # tensor-core only; a GPU without the format runs the next wider one
            rate = self.fp4_tflops if dtype == "fp4" else None
            rate = rate if rate is not None else self.fp8_tflops
            if tensor_cores and rate is not None:
                return rate
            dtype = "fp16"
        if dtype == "fp16":
            if tensor_cores and self.has_tensor_cores:
                return self.fp16_tflops
            return self.fp16_vector_tflops
        rate = {"fp32": None, "tf32": self.tf32_tflops, "bf16": self.bf16_tflops}[dtype]
        return rate if (tensor_cores and rate is not None) else self.fp32_tflops

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-able fields; ``load_spec_file`` reads this back to an equal spec."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["compute_capability"] = list(self.compute_capability)
        d["nvml_names"] = list(self.nvml_names)
        return d


# ---------------------------------------------------------------- validation

_REQUIRED = [f.name for f in fields(GpuSpec) if f.name not in DEFAULTS]
_ALIAS_KEYS = {k for spellings in _SIZE_ALIASES.values() for k in spellings}
_KNOWN_KEYS = sorted((set(_REQUIRED) - set(_SIZE_ALIASES)) | set(DEFAULTS) | _ALIAS_KEYS)


def _normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A spec file's mapping -> canonical GpuSpec fields; raises _FieldError."""
    if not isinstance(raw, Mapping):
        raise _FieldError(f"must be a mapping of fields, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_KNOWN_KEYS), key=str)
    if unknown:
        hint = difflib.get_close_matches(str(unknown[0]), _KNOWN_KEYS, n=1)
        raise _FieldError(f"unknown field {unknown[0]!r}"
                          + (f" (did you mean {hint[0]!r}?)" if hint else "")
                          + f"; known fields: {', '.join(_KNOWN_KEYS)}")
    missing = [f for f in _REQUIRED if not set(_SIZE_ALIASES.get(f, {f: 1})) & set(raw)]
    if missing:
        said = [repr(f) + (f" (or {', '.join(list(_SIZE_ALIASES[f])[1:])})"
                           if f in _SIZE_ALIASES else "") for f in missing]
        raise _FieldError(f"missing required field{'s' if len(missing) > 1 else ''} "
                          + ", ".join(said))
    d = {k: v for k, v in raw.items() if k not in _ALIAS_KEYS}
    for canonical, spellings in _SIZE_ALIASES.items():
        given = [k for k in spellings if k in raw]
        if len(given) > 1:
            raise _FieldError(f"field {canonical!r} given twice, as {' and '.join(given)}; "
                              "give exactly one")
        key, v = given[0], raw[given[0]]
        if not (_is_num(v) and v > 0):
            raise _bad(key, "a positive number", v)
        d[canonical] = int(round(v * spellings[key]))
    for f, default in DEFAULTS.items():
        d.setdefault(f, default)
    if d["display_name"] is None:
        d["display_name"] = d["name"]
    if d["fp16_vector_tflops"] is None:
        d["fp16_vector_tflops"] = d["fp32_tflops"]
    cc = d["compute_capability"]
    if isinstance(cc, (str, float)) and re.fullmatch(r"\d+\.\d+", str(cc)):
        d["compute_capability"] = tuple(int(x) for x in str(cc).split("."))
    elif isinstance(cc, list):
        d["compute_capability"] = tuple(cc)
    if isinstance(d["nvml_names"], list):
        d["nvml_names"] = tuple(d["nvml_names"])
    for f in (*_POSITIVE_FLOATS, "nvlink_gbs", "tf32_tflops", "bf16_tflops", "sustained_clock_mhz", "fp8_tflops",
              "fp4_tflops", "tensor_clock_mhz"):
        if _is_num(d[f]):  # 125 and 125.0 are the same rate; keep one type
            d[f] = float(d[f])
    return d


def _from_mapping(raw: Mapping[str, Any], origin: str) -> GpuSpec:
    try:
        d = _normalize(raw)
        if isinstance(d["name"], str) and ":" in d["name"]:
            raise _bad("name", "lower-case letters, digits and dashes (GPU:PROFILE names a MIG slice "
                       "of a catalog GPU, made by gpucast)", d["name"])
        _check(d)
    except _FieldError as e:
        raise ValueError(f"gpu spec {origin!r}: {e}") from None
    return GpuSpec(**d)


# ---------------------------------------------------------------- catalog

_registered: dict[str, GpuSpec] = {}


@lru_cache(maxsize=None)
def _builtin() -> dict[str, GpuSpec]:
    text = resources.files("gpucast").joinpath("data/gpus.yaml").read_text(encoding="utf-8")
    out: dict[str, GpuSpec] = {}
    for i, entry in enumerate(yaml.safe_load(text)):
        label = entry.get("name", i) if isinstance(entry, Mapping) else i
        spec = _from_mapping(entry, f"gpus.yaml entry {label}")
        if spec.name in out:
            raise ValueError(f"gpu spec 'gpus.yaml': name {spec.name!r} appears twice")
        out[spec.name] = spec
    return out


def catalog() -> dict[str, GpuSpec]:
    """Every known GPU by name: the built-in catalog plus what :func:`register_gpu` added."""
    return {**_builtin(), **_registered}


def load_spec_file(path: Union[str, os.PathLike]) -> GpuSpec:
    """Read one GPU from a ``.yaml``/``.yml``/``.json`` file of GpuSpec fields."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise ValueError(f"gpu spec {str(path)!r}: file must end in .yaml, .yml or .json")
    text = p.read_text(encoding="utf-8")
    try:
        raw = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"gpu spec {str(path)!r}: not valid {suffix[1:]}: {first}") from None
    return _from_mapping(raw if raw is not None else {}, str(path))


def _key(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def get_gpu(name_or_spec: Union[str, os.PathLike, GpuSpec]) -> GpuSpec:
    """The GpuSpec for a catalog name (``"a100-80gb"``), a MIG slice of one (``"a100-80gb:1g.10gb"``,
    :mod:`gpucast.mig`), an NVML name, a spec or a spec file.

    Names are matched case-insensitively, with ``_`` and spaces read as ``-``. A string ending
    in ``.yaml``/``.yml``/``.json`` (or any ``os.PathLike``) is loaded with
    :func:`load_spec_file`. Anything else raises :class:`UnknownGpuError` (a ``KeyError``)
    naming the closest catalog names.
    """
    if isinstance(name_or_spec, GpuSpec):
        return name_or_spec
    if not isinstance(name_or_spec, (str, os.PathLike)):
        raise TypeError(f"get_gpu takes a name, a path or a GpuSpec, "
                        f"got {type(name_or_spec).__name__}")
    text = os.fspath(name_or_spec)
    known = catalog()
    if _key(text) in known:
        return known[_key(text)]
    is_file = isinstance(name_or_spec, os.PathLike) or text.lower().endswith((".yaml", ".yml", ".json"))
    if ":" in text and not is_file:
        return _mig_slice(text)
    by_nvml = from_nvml_name(text)
    if by_nvml is not None:
        return by_nvml
    if is_file:
        return load_spec_file(text)
    close = sorted(n for n in known if n.startswith(_key(text)))
    close += [n for n in difflib.get_close_matches(_key(text), list(known), n=3, cutoff=0.5)
              if n not in close]
    close = close[:3]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownGpuError(f"unknown GPU {text!r}{hint} (known: {', '.join(sorted(known))}; "
                          "or pass a .yaml/.json spec file)")


def _mig_slice(text: str) -> GpuSpec:
    """``GPU:PROFILE`` (``a100-40gb:1g.5gb``): the MIG slice's spec (:mod:`gpucast.mig`)."""
    from gpucast import mig

    gpu, prof = mig.split(text)
    try:
        whole = get_gpu(gpu)
    except UnknownGpuError as e:
        raise UnknownGpuError(f"MIG slice {text!r}: {e}") from None
    try:
        return _slice(whole, mig.profile(whole.name, prof))
    except mig.UnknownProfileError as e:
        raise UnknownGpuError(f"MIG slice {text!r}: {e}") from None


@lru_cache(maxsize=None)
def _slice(whole: GpuSpec, profile) -> GpuSpec:
    from gpucast import mig

    return mig.slice_spec(whole, profile)


def register_gpu(spec: Union[GpuSpec, str, os.PathLike], *, replace: bool = False) -> GpuSpec:
    """Add a GPU (a GpuSpec or a spec-file path) to this process's catalog and return it.

    A name already in the catalog, built-in or registered, is refused unless ``replace=True``
    (re-registering an identical spec is a no-op). An NVML name already claimed by another GPU
    is always refused: :func:`from_nvml_name` must stay unambiguous.
    """
    if not isinstance(spec, GpuSpec):
        spec = load_spec_file(spec)
    known = catalog()
    old = known.get(spec.name)
    if old is not None and old != spec and not replace:
        kind = "built-in" if spec.name in _builtin() else "registered"
        raise ValueError(f"gpu {spec.name!r} is already a {kind} GPU; "
                         "pass replace=True to overwrite it")
    for other in known.values():
        taken = set(map(_key, other.nvml_names)) & set(map(_key, spec.nvml_names))
        if other.name != spec.name and taken:
            raise ValueError(f"gpu {spec.name!r}: NVML name {sorted(taken)[0]!r} already "
                             f"belongs to {other.name!r}")
    _registered[spec.name] = spec
    return spec


def from_nvml_name(nvml_name: Union[str, bytes]) -> GpuSpec | None:
    """The catalog GPU whose NVML name is ``nvml_name`` (case/space-insensitive), else None."""
    if isinstance(nvml_name, bytes):  # old pynvml returns bytes
        nvml_name = nvml_name.decode("utf-8", "replace")
    wanted = _key(nvml_name)
    for spec in catalog().values():
        if any(_key(n) == wanted for n in spec.nvml_names):
            return spec
    # A MIG device: NVML names it "<the GPU's name> MIG <profile>" (nvidia-smi -L).
    head, sep, prof = nvml_name.rpartition(" MIG ")
    whole = from_nvml_name(head) if sep and head.strip() else None
    if whole is not None:
        try:
            return _mig_slice(f"{whole.name}:{prof.strip()}")
        except UnknownGpuError:
            return None
    return None
