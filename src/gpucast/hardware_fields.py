"""A GPU spec's fields: the values they may take, their defaults, and the checks on one spec.

What :class:`gpucast.hardware.GpuSpec` and a user spec file accept, kept apart from the catalog:
the architectures and their CUDA compute-capability majors, the dtypes a peak is quoted for, the
optional fields and their defaults (:data:`DEFAULTS`), the accepted spellings of the size fields,
and :func:`check`, the per-field and cross-field rules on canonical fields, each failure one
:class:`FieldError` line naming the field. Reads no file and imports no gpucast module.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

ARCHITECTURES = ("kepler", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")
# CUDA compute-capability majors per architecture: a spec whose two disagree has a typo.
_CC_MAJORS = {"kepler": {3}, "pascal": {6}, "volta": {7}, "turing": {7}, "ampere": {8},
              "ada": {8}, "hopper": {9}, "blackwell": {10, 12}}
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")
# NVLink generations by the architecture that introduced them (Pascal 1 ... Blackwell 5).
NVLINK_GENERATIONS = (1, 2, 3, 4, 5)
MIB, GIB = 2**20, 2**30
# The largest NVLink domain: a GB200/GB300 NVL72 rack's 72 GPUs (NVIDIA GB200 NVL72 specifications).
MAX_NVLINK_DOMAIN = 72

# Optional fields of a spec file and what they default to.
DEFAULTS: dict[str, Any] = {
    "display_name": None,        # -> name
    "tf32_tflops": None,         # no TF32 tensor cores; tf32 runs at the FP32 rate
    "bf16_tflops": None,         # BF16 unsupported; bf16 runs at the FP32 rate
    "fp16_vector_tflops": None,  # -> fp32_tflops (1:1, as on Kepler, GA10x and Ada)
    "host_link_gbs": 15.75,      # PCIe 3.0 x16, per direction
    "nvlink_gbs": 0.0,           # no NVLink
    "nvml_names": (),            # from_nvml_name() will not find it
    "source": "user spec (no source given)",
    "sustained_clock_mhz": None,  # holds its boost clock under load: clock_factor 1
    "fp8_tflops": None,          # no FP8 tensor cores (before Ada/Hopper); fp8 runs at the fp16 rate
    "fp4_tflops": None,          # no FP4 tensor cores (before Blackwell); fp4 runs at the fp8 rate
    "nvlink_generation": None,   # unknown or no NVLink
    "nvlink_domain": None,       # GPUs one NVLink domain joins: unset, a node's 8 (a plan's gpus_per_node default)
    "nic_gbit": None,            # Gbit/s of the NIC per GPU in its reference system: unset, by NVLink rate (plan.default_network)
    "tensor_clock_mhz": None,    # tensor peaks computed at boost_clock_mhz
    "simt_clock_mhz": None,      # SIMT math held at sustained_clock_mhz (or the boost clock)
}
# Accepted spellings of the two size fields: canonical field -> {file key: bytes per unit}.
_SIZE_ALIASES = {
    "memory_bytes": {"memory_bytes": 1, "memory_mib": MIB, "memory_gib": GIB},
    "l2_bytes": {"l2_bytes": 1, "l2_mib": MIB},
}
_POSITIVE_FLOATS = ("boost_clock_mhz", "fp32_tflops", "fp16_tflops", "fp16_vector_tflops",
                    "memory_bandwidth_gbs", "host_link_gbs", "tdp_w")
_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# A MIG slice's name (gpucast.mig): the whole GPU's, a colon and the profile. Made by gpucast
# only: a spec file or register_gpu cannot take it (the colon is how get_gpu finds a slice).
_SLICE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*:[0-9]+g\.[0-9]+gb$")


class FieldError(ValueError):
    """One bad field; the caller prefixes where the spec came from."""


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def bad(field: str, problem: str, got: Any) -> FieldError:
    return FieldError(f"field {field!r} must be {problem}, got {got!r}")


def check(d: Mapping[str, Any]) -> None:
    """Per-field and cross-field checks on canonical fields; raises FieldError."""
    name = d["name"]
    if not isinstance(name, str) or not (_NAME_RE.match(name) or _SLICE_RE.match(name)):
        raise bad("name", "lower-case letters, digits and dashes (e.g. 'a100-80gb')", name)
    for f in ("display_name", "source"):
        if not isinstance(d[f], str) or not d[f].strip():
            raise bad(f, "a non-empty string", d[f])
    arch = d["architecture"]
    if arch not in ARCHITECTURES:
        raise bad("architecture", f"one of {', '.join(ARCHITECTURES)}", arch)
    cc = d["compute_capability"]
    if not (isinstance(cc, (list, tuple)) and len(cc) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in cc)):
        raise bad("compute_capability", "[major, minor] or 'major.minor'", cc)
    if cc[0] not in _CC_MAJORS[arch]:
        majors = " or ".join(map(str, sorted(_CC_MAJORS[arch])))
        raise bad("compute_capability", f"major {majors} for architecture {arch!r}", cc)
    for f in ("sm_count", "memory_bytes", "l2_bytes"):
        v = d[f]
        if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            raise bad(f, "a positive integer", v)
    for f in _POSITIVE_FLOATS:
        if not (is_num(d[f]) and d[f] > 0):
            raise bad(f, "a positive number", d[f])
    if not (is_num(d["nvlink_gbs"]) and d["nvlink_gbs"] >= 0):
        raise bad("nvlink_gbs", "a number >= 0 (0 for no NVLink)", d["nvlink_gbs"])
    pre_ampere = ARCHITECTURES.index(arch) < ARCHITECTURES.index("ampere")
    for f in ("tf32_tflops", "bf16_tflops"):
        v = d[f]
        if v is not None and not (is_num(v) and v > 0):
            raise bad(f, "a positive number or null", v)
        if v is not None and pre_ampere:
            raise bad(f, f"null on {arch} (no {f[:4].upper()} before ampere)", v)
    for f, first in (("fp8_tflops", "ada"), ("fp4_tflops", "blackwell")):
        v = d[f]
        if v is not None and not (is_num(v) and v > 0):
            raise bad(f, "a positive number or null", v)
        if v is not None and ARCHITECTURES.index(arch) < ARCHITECTURES.index(first):
            raise bad(f, f"null on {arch} (no {f[:3].upper()} tensor cores before {first})", v)
    if d["fp8_tflops"] is not None and d["fp4_tflops"] is not None and d["fp4_tflops"] < d["fp8_tflops"]:
        raise bad("fp4_tflops", f">= fp8_tflops ({d['fp8_tflops']})", d["fp4_tflops"])
    v = d["nvlink_generation"]
    if v is not None and v not in NVLINK_GENERATIONS:
        raise bad("nvlink_generation", f"one of {', '.join(map(str, NVLINK_GENERATIONS))} or null", v)
    v = d["nvlink_domain"]
    if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_NVLINK_DOMAIN):
        raise bad("nvlink_domain", f"an integer between 1 and {MAX_NVLINK_DOMAIN}, or null (a node's 8)", v)
    v = d["nic_gbit"]
    if v is not None and not (is_num(v) and v > 0):
        raise bad("nic_gbit", "a positive number of Gbit/s, or null (by the NVLink rate)", v)
    v = d["sustained_clock_mhz"]
    if v is not None and not (is_num(v) and v > 0):
        raise bad("sustained_clock_mhz",
                   "a positive number in MHz, or null (holds its boost clock)", v)
    v = d["simt_clock_mhz"]
    if v is not None and not (is_num(v) and v > 0):
        raise bad("simt_clock_mhz", "a positive number in MHz, or null (SIMT math at sustained_clock_mhz)", v)
    v = d["tensor_clock_mhz"]
    if v is not None and not (is_num(v) and 0 < v <= d["boost_clock_mhz"]):
        raise bad("tensor_clock_mhz", "a positive number in MHz up to boost_clock_mhz, or null "
                   "(tensor peaks computed at the boost clock)", v)
    if d["fp16_vector_tflops"] > d["fp16_tflops"]:
        raise bad("fp16_vector_tflops", f"<= fp16_tflops ({d['fp16_tflops']})",
                   d["fp16_vector_tflops"])
    names = d["nvml_names"]
    if not (isinstance(names, (list, tuple))
            and all(isinstance(n, str) and n.strip() for n in names)):
        raise bad("nvml_names", "a list of non-empty strings", names)
