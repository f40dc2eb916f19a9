"""Which ``achieved.yaml`` entry each GPU takes, and where that entry came from.

:func:`applied` lists, for one GPU (or MIG slice), every kernel family of
:mod:`gpucast.estimate.achieved` (each attention kernel apart, and the memory-bound families'
``bandwidth_per_sm`` caps): the value the estimator uses, the level it is read from (the GPU's
compute capability, its architecture, or ``reference``) and its provenance as the file states it:
the GPUs and stack of our measurements (``measured_on``), the GPUs a published figure was taken on
(``gpus``), the reasoning a derived value follows (``derived``), and, for a ``reference`` entry taken
on particular GPUs, why other architectures may use it (``architecture_independent``).
``gpucast gpus --constants`` prints it.

:func:`problems` checks the file's provenance: every entry names one; our measurements name catalog
GPUs; no GPU takes a measured or published figure of another architecture unless the entry is
derived (it states its own reasoning) or says why it is architecture-independent.

Not covered: the estimator's other constants (:mod:`gpucast.estimate.constants`, each with its own
source) and the catalog's datasheet figures (``data/gpus.yaml``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gpucast.estimate import achieved
from gpucast.hardware import GpuSpec, catalog
from gpucast.surroundings import ATTENTION_KERNELS

FRACTION = "of peak"
PER_SM = "GB/s per SM"
PROVENANCE = ("measured_on", "gpus", "derived")


@dataclass(frozen=True)
class Applied:
    """One constant as a GPU takes it (``value`` None: no level lists the memory family: no cap)."""

    family: str  # e.g. "matmul_fp32", "attention (cudnn)", "batchnorm"
    unit: str  # FRACTION (of the sustained peak) or PER_SM
    value: float | None
    level: str  # "sm 8.6", an architecture, "reference", or "-" (not listed)
    measured_on: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    stack: str = ""
    derived: str = ""
    architecture_independent: str = ""
    source: str = ""

    @property
    def origin(self) -> str:
        """Where the value comes from, in one line."""
        if self.value is None and self.family == "transpose_fp32":
            return "no level lists it: not run (float32 convolutions read NCHW here, estimate.kernels.absent)"
        if self.value is None:
            return "no level lists it: the DRAM roofline (EstimatorConfig.bandwidth_efficiency)"
        parts = []
        if self.measured_on:
            parts.append(f"measured on {', '.join(self.measured_on)} (ours)")
        if self.gpus:
            parts.append(f"published on {', '.join(self.gpus)}")
        if self.stack:
            parts.append(self.stack)
        if self.derived:
            parts.append(f"derived: {self.derived}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["measured_on"], d["gpus"] = list(self.measured_on), list(self.gpus)
        d["origin"] = self.origin
        return d


def _row(family: str, unit: str, got) -> Applied:
    if got is None:
        return Applied(family, unit, None, "-")
    level, e = got
    return Applied(family, unit, float(e["value"]), level, tuple(e.get("measured_on") or ()),
                   tuple(e.get("gpus") or ()), str(e.get("stack") or ""), str(e.get("derived") or ""),
                   " ".join(str(e.get("architecture_independent") or "").split()),
                   " ".join(str(e.get("source") or "").split()))


def applied(gpu: GpuSpec) -> list[Applied]:
    """Every constant of :mod:`gpucast.estimate.achieved` as ``gpu`` takes it (module docstring)."""
    arch, cap = gpu.architecture, achieved.capability_key(gpu.compute_capability)
    rows = []
    for f in achieved.FAMILIES:
        if f in ("attention", "attention_backward"):
            rows += [_row(f"{f} ({k})", FRACTION, achieved.lookup(f, arch, cap, k)) for k in ATTENTION_KERNELS]
        else:
            rows.append(_row(f, FRACTION, achieved.lookup(f, arch, cap)))
    rows += [_row(f, PER_SM, achieved.lookup(f, arch, cap, memory=True)) for f in achieved.MEMORY_FAMILIES]
    return rows


def _entries():
    """(where, level kind, entry) of every entry in the file: ``where`` names it for messages."""
    t = achieved._table()
    tables = [("reference", "reference", t["reference"])]
    tables += [(f"architectures.{a}", "architecture", v or {}) for a, v in (t.get("architectures") or {}).items()]
    tables += [(f"compute_capabilities.{c}", "capability", v or {})
               for c, v in (t.get("compute_capabilities") or {}).items()]
    for where, kind, table in tables:
        for section, fams in (("", table), ("bandwidth_per_sm.", table.get("bandwidth_per_sm") or {})):
            for fam, e in fams.items():
                if fam == "bandwidth_per_sm" or not isinstance(e, dict):
                    continue
                if "value" in e:
                    yield f"{where}.{section}{fam}", kind, e
                else:
                    for kernel, sub in e.items():
                        yield f"{where}.{section}{fam}.{kernel}", kind, sub


def problems() -> list[str]:
    """What is wrong with ``achieved.yaml``'s provenance (empty: nothing; module docstring)."""
    gpus = catalog()
    out = []
    for where, kind, e in _entries():
        if not any(e.get(k) for k in PROVENANCE):
            out.append(f"{where}: names no provenance (one of {', '.join(PROVENANCE)})")
        if not e.get("source"):
            out.append(f"{where}: has no source")
        for name in e.get("measured_on") or ():
            if name not in gpus:
                out.append(f"{where}: measured_on names {name!r}, not a catalog GPU")
        taken = (e.get("measured_on") or e.get("gpus")) and not e.get("derived")
        if kind == "reference" and taken and not e.get("architecture_independent"):
            out.append(f"{where}: taken on particular GPUs but says nothing of other architectures "
                       "(architecture_independent)")
    for g in gpus.values():
        for row in applied(g):
            if row.value is None or row.derived or row.architecture_independent:
                continue
            archs = {gpus[n].architecture for n in (*row.measured_on, *row.gpus) if n in gpus}
            if archs and g.architecture not in archs:
                out.append(f"{g.name} ({g.architecture}) takes {row.family} from {row.level}, taken on "
                           f"{', '.join(sorted(archs))} only")
    return out
