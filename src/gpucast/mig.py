"""MIG slices as GPUs: a MIG profile of a catalog GPU (``a100-40gb:1g.5gb``) is a GpuSpec of its own.

NVIDIA's Multi-Instance GPU splits an A100/H100/H200 into hardware slices, each with its own
SMs, L2 and memory controllers. A profile ``Ng.Mgb`` holds ``N`` of the GPU's compute slices
and a number of its memory slices (``data/mig.yaml``, from the MIG User Guide's "Supported MIG
Profiles" tables, SMs and memory from ``nvidia-smi mig -lgip`` where quoted). :func:`slice_spec`
makes the slice's GpuSpec from the whole GPU's:

* **SMs**: the profile's (quoted, or ``g`` x the GPU's SMs per compute slice);
* **compute peaks** (FP32/TF32/FP16/BF16): the whole GPU's times the slice's share of its SMs
  (the peaks are per-SM rates times the SM count; the clock is the whole GPU's);
* **memory**: the profile's (quoted, or its memory slices' share of the whole GPU's memory);
* **memory bandwidth and L2**: the whole GPU's times the memory slices' share (each memory slice
  is an eighth of the memory controllers and their L2, per the guide);
* **board power**: the whole GPU's times the SM share (used where power is, e.g. cost advice);
* **NVLink**: none (the guide: no GPU-to-GPU peer access, NVLink or PCIe, in MIG mode);
  the host link is the whole GPU's (slices share it; contention for it is not modelled).

The kernel-time and memory models then treat the slice as any GPU: a compute-bound job slows by
the SM share, a memory-bound one by the bandwidth share, a job too large for the slice's memory
does not fit there. Calibrated per-GPU kernel factors of the whole GPU apply to its slices
(:meth:`gpucast.estimate.environment.Environment.kernel_factor`).

Not modelled: a slice's clock behaviour under a power limit shared with busy neighbour slices
(the whole GPU's sustained clock is used), per-slice copy engines and decoders, compute instances
inside a GPU instance (``1c.3g.20gb``), placement constraints of mixed layouts beyond each
profile's instance count.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

SEPARATOR = ":"
_PROFILE_RE = re.compile(r"^(\d+)g\.(\d+)gb$")


class UnknownProfileError(KeyError):
    """A ``GPU:PROFILE`` name whose profile the GPU does not have. ``str()`` is one line."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile of one GPU (``data/mig.yaml``)."""

    gpu: str                  # the whole GPU's catalog name
    name: str                 # e.g. "1g.5gb"
    compute_slices: int       # g
    memory_slices: int
    instances: int            # at most this many on one GPU
    sms: int
    memory_gib: float | None  # quoted; None: derived from the memory slices
    of_compute: int           # the GPU's compute slices (7)
    of_memory: int            # the GPU's memory slices (8)
    sms_source: str

    @property
    def full_name(self) -> str:
        return f"{self.gpu}{SEPARATOR}{self.name}"

    @property
    def memory_share(self) -> float:
        return self.memory_slices / self.of_memory

    @property
    def resource_name(self) -> str:
        """The Kubernetes extended resource of this slice (NVIDIA device plugin, mixed strategy)."""
        return f"nvidia.com/mig-{self.name}"


@lru_cache(maxsize=None)
def _table() -> dict[str, dict[str, MigProfile]]:
    text = resources.files("gpucast").joinpath("data/mig.yaml").read_text(encoding="utf-8")
    out: dict[str, dict[str, MigProfile]] = {}
    for gpu, entry in yaml.safe_load(text).items():
        per = entry["sms_per_slice"]
        out[gpu] = {}
        for name, p in entry["profiles"].items():
            m = _PROFILE_RE.match(name)
            if m is None or int(m.group(1)) != p["g"]:
                raise ValueError(f"mig.yaml: {gpu} profile {name!r} does not match its g={p['g']}")
            out[gpu][name] = MigProfile(gpu, name, p["g"], p["mem"], p["instances"], p.get("sms", p["g"] * per),
                                        p.get("memory_gib"), entry["compute_slices"], entry["memory_slices"],
                                        entry["sms_source"])
    return out


def capable() -> list[str]:
    """The catalog GPUs that have MIG profiles."""
    return list(_table())


def profiles(gpu: str) -> list[MigProfile]:
    """``gpu``'s MIG profiles, smallest first (empty for a GPU without MIG)."""
    return list(_table().get(gpu, {}).values())


def is_slice_name(text: str) -> bool:
    return SEPARATOR in text


def split(text: str) -> tuple[str, str]:
    """``"A100-40GB:1g.5gb+me"`` -> ``("A100-40GB", "1g.5gb")`` (the profile lower-cased, ``+me`` dropped)."""
    gpu, _, prof = text.partition(SEPARATOR)
    prof = prof.strip().lower()
    if prof.startswith("mig-"):
        prof = prof[4:]
    if prof.endswith("+me"):
        prof = prof[:-3]
    return gpu.strip(), prof


def profile(gpu_name: str, name: str) -> MigProfile:
    """The profile ``name`` of the catalog GPU ``gpu_name``; :class:`UnknownProfileError` naming
    the GPU's profiles (and the closest one) otherwise."""
    known = _table().get(gpu_name)
    if not known:
        have = ", ".join(capable())
        raise UnknownProfileError(f"{gpu_name!r} has no MIG profiles (MIG GPUs: {have})")
    p = known.get(name)
    if p is None:
        close = _closest(name, known)
        hint = f"; did you mean {gpu_name}{SEPARATOR}{close}?" if close else ""
        raise UnknownProfileError(f"{gpu_name} has no MIG profile {name!r}{hint} "
                                  f"(its profiles: {', '.join(known)})")
    return p


def _closest(name: str, known: dict) -> str | None:
    """The profile a mistyped ``name`` most likely meant: of the same compute slices, the nearest
    in memory (``1g.5gb`` on an 80GB part: ``1g.10gb``); else the closest spelling."""
    m = _PROFILE_RE.match(name)
    if m:
        g, gb = int(m.group(1)), int(m.group(2))
        same = [p for p in known.values() if p.compute_slices == g]
        if same:
            return min(same, key=lambda p: abs(int(_PROFILE_RE.match(p.name).group(2)) - gb)).name
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.4)
    return close[0] if close else None


def slice_spec(whole, p: MigProfile):
    """The GpuSpec of slice ``p`` of the GpuSpec ``whole`` (see the module docstring)."""
    sm = p.sms / whole.sm_count
    mem_share = p.memory_share
    memory = int(round(p.memory_gib * 2**30)) if p.memory_gib is not None else int(whole.memory_bytes * mem_share)

    def scaled(v):
        return None if v is None else v * sm

    return dataclasses.replace(
        whole, name=p.full_name, display_name=f"{whole.display_name} MIG {p.name}", sm_count=p.sms,
        fp32_tflops=whole.fp32_tflops * sm, tf32_tflops=scaled(whole.tf32_tflops), fp16_tflops=whole.fp16_tflops * sm,
        fp16_vector_tflops=whole.fp16_vector_tflops * sm, bf16_tflops=scaled(whole.bf16_tflops),
        fp8_tflops=scaled(whole.fp8_tflops), fp4_tflops=scaled(whole.fp4_tflops), nvlink_generation=None, nvlink_domain=None, nic_gbit=None,
        memory_bytes=memory, memory_bandwidth_gbs=whole.memory_bandwidth_gbs * mem_share,
        l2_bytes=int(whole.l2_bytes * mem_share), nvlink_gbs=0.0, tdp_w=whole.tdp_w * sm, nvml_names=(),
        source=f"{whole.name} scaled to MIG {p.name} (gpucast.mig; NVIDIA MIG User Guide; SMs: {p.sms_source})")


def parent_name(gpu: str) -> str:
    """The whole GPU of a slice name (``a100-40gb:1g.5gb`` -> ``a100-40gb``); other names unchanged."""
    return gpu.split(SEPARATOR, 1)[0]


def weight(gpu: str) -> float:
    """The share of its whole GPU a GPU name is: a slice's compute slices over the GPU's (``3g`` of
    7: 3/7), 1 for a whole GPU. The simulator weighs a slice's utilization by it."""
    if not is_slice_name(gpu):
        return 1.0
    p = profile(*split(gpu))
    return p.compute_slices / p.of_compute


class LayoutError(ValueError):
    """A MIG layout that the GPU cannot hold; one line."""


def layout(gpu: str, text: str) -> list[MigProfile]:
    """The profiles of a layout of one ``gpu`` (``"3g.40gb,2g.20gb,2g.20gb"``; ``"1g.10gb*7"``
    repeats one), checked against the GPU's compute and memory slices and each profile's instance
    count (the guide's limits; its placement rules beyond them, which start slice each profile may
    take, are not checked: a layout within the totals is taken to be placeable)."""
    out: list[MigProfile] = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        name, _, times = part.partition("*")
        try:
            k = int(times) if times else 1
        except ValueError:
            raise LayoutError(f"MIG layout {text!r}: {part!r} is not PROFILE or PROFILE*COUNT") from None
        if k < 1:
            raise LayoutError(f"MIG layout {text!r}: {part!r} needs a count of at least 1")
        try:
            out += [profile(gpu, split(f"{gpu}{SEPARATOR}{name}")[1])] * k
        except UnknownProfileError as exc:
            raise LayoutError(f"MIG layout: {exc}") from None
    if not out:
        raise LayoutError(f"MIG layout {text!r} names no profile")
    g = sum(p.compute_slices for p in out)
    m = sum(p.memory_slices for p in out)
    first = out[0]
    if g > first.of_compute or m > first.of_memory:
        raise LayoutError(f"MIG layout {text!r} needs {g} compute and {m} memory slices; {gpu} has "
                          f"{first.of_compute} and {first.of_memory}")
    for p in {p.name: p for p in out}.values():
        n = sum(1 for q in out if q.name == p.name)
        if n > p.instances:
            raise LayoutError(f"MIG layout {text!r}: {gpu} holds at most {p.instances} x {p.name}, not {n}")
    return out
