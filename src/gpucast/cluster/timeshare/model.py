"""What :mod:`gpucast.cluster.timeshare` solves: one job's solo timeline (:class:`JobTimeline`), the
co-location model's constants (:class:`Constants`; the fitted values are that module's ``FITTED`` and
``CURRENT``), the fixed-point solve's settings and the small rules both the Python and the compiled
solve apply (which stretch rule, whether the compiled path serves a set, how often a job can be held
up). Its names are importable from :mod:`gpucast.cluster.timeshare`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace

from gpucast.cluster.timeshare import kernel as timeshare_kernel


@dataclass(frozen=True, slots=True)
class JobTimeline:
    """One job's solo step as the co-location model sees it."""

    step_s: float          # solo step time
    busy_s: float          # GPU seconds per step the kernels hold the GPU, <= step_s
    gaps: float = 1.0      # idle periods of the GPU per step
    mem_bound: float = 0.5  # share of kernel time bound by memory bandwidth (0..1)
    hidden_s: float = 0.0  # idle seconds per step that NVML reads as busy (gaps shorter than its
                           # tick: gpucast.estimate.nvml); 0 where unknown
    syncs: float | None = None  # points per step where the host waits for the GPU (None: every
                           # gap is one): the only places a neighbour's time slice can hold the
                           # job up, its host launching ahead everywhere else

    @property
    def util(self) -> float:
        """The held share of the solo step (what a neighbour competes for)."""
        return self.busy_s / self.step_s if self.step_s > 0 else 0.0

    @property
    def reported(self) -> float:
        """What NVML reports for the solo step (0-1): held share plus the hidden idle time."""
        return min(1.0, (self.busy_s + self.hidden_s) / self.step_s) if self.step_s > 0 else 0.0

    @classmethod
    def from_util(cls, util_pct: float, step_s: float = 0.1, gaps: float = 1.0, mem_bound: float = 0.5,
                  held_pct: float | None = None, syncs: float | None = None) -> "JobTimeline":
        """A timeline of a job known by its utilization as NVML reports it and, where known, its
        held share (``held_pct``, <= ``util_pct``; None: the kernels hold the GPU all the time NVML
        reads busy). One gap per step by default."""
        u = min(1.0, max(0.0, util_pct / 100.0))
        h = u if held_pct is None else min(u, max(0.0, held_pct / 100.0))
        return cls(step_s, h * step_s, gaps if h < 1.0 else 0.0, mem_bound, (u - h) * step_s, syncs)


@dataclass(frozen=True)
class Constants:
    """The co-location model's constants (name, value, unit, source)."""

    # Seconds a context holds the GPU while another context has work. NVIDIA's time-slice scheduler
    # is not documented in seconds (nvidia-smi compute-policy offers default/short/medium/long);
    # fitted on Gavel's V100 pairs from a start of 2 ms.
    slice_s: float = 2e-3
    # Seconds lost per context switch (save/restore of a context). Published measurements put a
    # GPU context switch at tens of microseconds (e.g. 25 us on Pascal-class GPUs, NVIDIA's Pascal
    # compute-preemption material); fitted from that start.
    switch_s: float = 25e-6
    # Stretch of overlapping memory-bound bursts (cache and DRAM-row thrash), per unit of the
    # product of the two jobs' memory-bound shares; fitted (start 0.2).
    bandwidth: float = 0.2
    # Stretch of a job's host time per unit of its neighbours' host shares (the jobs share the
    # node's CPU cores, loader workers and Python threads); fitted (start 0.2).
    host: float = 0.2
    # How a job's idle-gap count grows when its true host time exceeds the predicted one:
    # gaps = predicted gaps * (true host / predicted host) ** gap_exponent (0: the extra host
    # time is one long gap per gap; 1: it comes as proportionally more gaps); fitted (start 0.5).
    gap_exponent: float = 0.5
    # Where a job's true step differs from the predicted one, the share (in log space) of the
    # difference that is GPU time: busy = predicted busy * (true step / predicted step) **
    # kernel_share (0: the kernels are as predicted and the host is slower; 1: the kernels and the
    # host are slower alike, utilization as predicted); fitted (start 0.5).
    kernel_share: float = 0.5
    # What stretches a job's bursts: burst x (1 + the other jobs' shares of time they *want* the
    # GPU) ("want", as fitted on Gavel's pairs) or x (1 + the shares their kernels *run*)
    # ("held", fitted on current-GPU pairs of real scripts: benchmarks/results/colocation_current.md).
    # The exclusive form burst / (1 - held shares) halves two saturated jobs' speeds; the measured
    # RTX 3090 pairs of jobs NVML reads 80-100 % busy kept ~0.65 each, and held out by family the
    # linear form errs 0.055 in speed against 0.082 for the exclusive one, so the linear one is used:
    # two jobs whose kernels fill their steps keep 0.62 each under it. Under "held" a job's whole
    # loss (stretch and waits) is also bounded by the share of time the others' kernels hold the GPU
    # (exclusive slices; module docstring). "want" charges the others' wanting time, their own
    # waits included, beyond that bound: Gavel's pairs, fitted so, include slowdowns beyond it, and
    # bounding it would change what benchmarks/colocation.py fits, so it stays as fitted.
    stretch: str = "want"
    # How much of the loss a light neighbour causes survives (both modes): each job's
    # slowdown loss ``1 - 1/slowdown`` from the interleaving above is multiplied by
    # ``exp(-relief x max(0, 1 - U))``, ``U`` the others' summed solo held shares. 0: none (the
    # interleaving as is; Gavel's world). A learned correction where the physics stops
    # (:func:`relieved`): on the RTX 3090 pairs of real scripts a heavy job beside a light one kept
    # 0.95-0.96 of its speed where the interleaving of predicted timelines gives 0.87-0.88, while
    # two heavy jobs are as predicted; a neighbour's held share from its prediction (and NVML's
    # reading it is calibrated to) overstates what its short kernels take from a busy GPU.
    # Fitted with the other constants by benchmarks/colocation_current.py, held out by family, and
    # kept only where it beats the interleaving alone held out (timeshare_current.json).
    relief: float = 0.0
    # Whether the jobs' kernels together do at most one GPU of work: where the jobs' held shares
    # of their shared steps, sum_i u_i / s_i (u_i the solo held share, s_i the slowdown after the
    # relief), come to W > 1, every slowdown is multiplied by W (:func:`capped`). Time slices are
    # exclusive (one context at a time); under MPS the kernels run at once but, taken to fill the
    # SMs as gpucast costs them (mps.py's assumption), share one GPU's SMs and bandwidth: the same
    # bound (two saturated jobs keep half each either way; kernels too small to fill the SMs
    # would overlap for more, not modelled). "yes", "no", or
    # "data-center": yes on GPUs that are not GeForce cards, no on GeForce cards and where the GPU
    # is not known (:meth:`on`). The evidence: on data-center GPUs heavy pairs did about one GPU of
    # work per second, as exclusive slices allow (Gavel's K80/P100/V100 pairs: mean speeds 0.54,
    # 0.60, 0.66; our H200's pairs of real scripts, benchmarks/results/h200_colocation.md: 0.46-0.59
    # each where both kernels fill their steps), where the RTX 3090 pairs of real scripts (what the
    # rest of CURRENT is fitted on) did up to 1.25 (benchmarks/results/colocation_current.md, "Beyond
    # the model"); why the GeForce pairs do more is not established (the measuring protocol's
    # per-job windows or the card), so the cap follows the GPU class the evidence comes from.
    exclusive: str = "no"

    def __post_init__(self):
        if self.exclusive not in EXCLUSIVE:
            raise ValueError(f"unknown exclusive {self.exclusive!r} ({', '.join(EXCLUSIVE)})")

    def on(self, gpu) -> "Constants":
        """These constants for jobs sharing ``gpu`` (a catalog name, a :class:`~gpucast.hardware.GpuSpec`
        or None): :attr:`exclusive` resolved to "yes" or "no" by the GPU's class."""
        if self.exclusive != "data-center":
            return self
        if gpu is None or isinstance(gpu, str):
            return _resolved(self, gpu)      # the simulator asks per GPU state: one object per class
        return replace(self, exclusive="yes" if data_center(gpu) else "no")

    def with_(self, **kw) -> "Constants":
        return replace(self, **kw)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


EXCLUSIVE = ("no", "yes", "data-center")


@functools.lru_cache(maxsize=256)
def _resolved(c: Constants, gpu: str | None) -> Constants:
    return replace(c, exclusive="yes" if data_center(gpu) else "no")


@functools.lru_cache(maxsize=256)
def _data_center(name: str) -> bool:
    from gpucast.hardware import get_gpu

    try:
        spec = get_gpu(name)
    except (KeyError, ValueError, OSError):
        return False
    return _not_geforce(spec)


def _not_geforce(spec) -> bool:
    return "geforce" not in (spec.display_name or spec.name).lower()


def data_center(gpu) -> bool:
    """Whether ``gpu`` (a catalog name, a GPU spec or None) is a data-center GPU for
    :attr:`Constants.exclusive`: any known GPU that is not a GeForce card (NVIDIA's consumer line,
    named so in its product name); None or an unknown name: False."""
    if gpu is None:
        return False
    if isinstance(gpu, str):
        return _data_center(gpu)
    return _not_geforce(gpu)


_ITERATIONS = 60
_TOLERANCE = 1e-5   # on the activities (shares of time): far below what any figure here shows
# The others' held share at which the exclusive-slice bound stops growing (the bound
# 1 / (1 - h) is infinite at 1): our choice, above any share two or three jobs reach.
_HELD_CAP = 0.99


def _by_held(c: Constants) -> bool:
    if c.stretch not in ("want", "held"):
        raise ValueError(f"unknown stretch rule {c.stretch!r} (want, held)")
    return c.stretch == "held"


def _jit(c: Constants, mode: str) -> bool:
    """Whether sets under ``c`` and ``mode`` are solved by :mod:`gpucast.cluster.timeshare.kernel`
    (time slices with the "held" stretch, Numba available); everything else is solved in Python."""
    return mode == "timeslice" and _by_held(c) and timeshare_kernel.available()


def _waits(gaps: float, syncs: float | None) -> float:
    """Returns from idle per step at which a job can be held up by a neighbour's slice: at its
    host syncs (at least one) when they are known, never more than its gaps."""
    g = float(gaps)
    if syncs is None:
        return g
    return min(g, max(1.0, float(syncs)))


def relieved(sd, util, relief: float) -> tuple:
    """Slowdowns ``sd`` of one GPU's jobs (solo held shares ``util``, same order) with
    :attr:`Constants.relief` applied: each job's loss ``1 - 1/s`` times
    ``exp(-relief x max(0, 1 - U))``, ``U`` the other jobs' summed held shares. Monotone: a job
    loses more the more its neighbours hold, never more than the interleaving says, and beside
    neighbours holding a whole GPU or more exactly what it says."""
    import math

    if not relief > 0.0:
        return tuple(sd)
    total = 0.0
    for u in util:
        total += u
    out = []
    for s, u in zip(sd, util):
        free = 1.0 - (total - u)
        if free > 0.0 and s > 1.0:
            loss = (1.0 - 1.0 / s) * math.exp(-relief * free)
            s = 1.0 / (1.0 - loss)
        out.append(s)
    return tuple(out)


def capped(sd, util, exclusive: str) -> tuple:
    """Slowdowns ``sd`` of one GPU's jobs (solo held shares ``util``, same order) under exclusive
    time slices (:attr:`Constants.exclusive` "yes"): where the shares of their shared steps the
    jobs' kernels hold, ``W = sum u / s``, exceed the whole GPU, every slowdown is multiplied by
    ``W`` (each job keeps its share of what the GPU can do); otherwise, and for any other value of
    ``exclusive``, as they are."""
    if exclusive != "yes":
        return tuple(sd)
    w = 0.0
    for s, u in zip(sd, util):
        w += u / s
    if not w > 1.0:
        return tuple(sd)
    return tuple(s * w for s in sd)


def finished(sd, util, c: Constants) -> tuple:
    """The solve's slowdowns ``sd`` with the learned relief (:func:`relieved`) and the cap at one
    GPU of work (:func:`capped`; in every mode, see :attr:`Constants.exclusive`)."""
    return capped(relieved(sd, util, c.relief), util, c.exclusive)
