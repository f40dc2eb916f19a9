"""The Trace: what one step of a job dispatches, op by op, and the memory it holds.

An :class:`OpRecord` is one dispatched aten op (after CUDA mirroring, see
``gpucast.graph.mirror``) with its phase, category, shapes, dtype, FLOPs (from
``torch.utils.flop_counter``'s formula registry), bytes read and written, the number of
GPU kernels it launches, and how it was dispatched from the host (``python`` for an op a
Python forward/optimizer line issues, ``engine`` for ops the autograd engine issues from
C++ in backward, ``cpp`` for ops a fused C++ loop issues, e.g. the time steps of an RNN).
``costed`` is False for ops no cost rule knew: they still carry a conservative default
cost and are listed in :attr:`Trace.uncosted`, never dropped.

:class:`MemoryReport` is the live-tensor timeline summarised: peak allocated bytes (after
caching-allocator rounding), where the peak falls, and what is live at the peak by class.

Traces know nothing about GPUs; ``gpucast.estimate`` turns one into times.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpucast.graph.allocator import AllocationLog
    from gpucast.graph.blocks import BlockLayout

PHASES = ("fwd", "loss", "bwd", "optim")
MEMORY_CLASSES = ("parameters", "gradients", "optimizer_state", "inputs", "activations", "temporaries")
# A class only some traces have: the FP8 weight copies Transformer Engine keeps for the backward under
# Megatron-Core (gpucast.graph.te), which a parallel plan holds once a step, not once a micro-batch.
WEIGHT_COPIES = "weight_copies"
# The recompute-module role (OpRecord.module) of the ops that cast a weight to FP8 and transpose it under
# Megatron-Core (gpucast.graph.fp8): Transformer Engine runs them once a step, not once a micro-batch.
FP8_WEIGHT_WORK = "fp8_weight"


@dataclass(slots=True)
class OpRecord:
    index: int
    phase: str
    op: str
    category: str
    shapes: tuple
    out_shapes: tuple
    dtype: str
    flops: int
    bytes_read: int
    bytes_written: int
    kernels: int
    dispatch: str = "python"  # python | engine | cpp | none
    costed: bool = True
    sync: bool = False  # the host waits for the GPU here (e.g. .item())
    module: str = ""
    block: int = -1  # the repeated block the op ran in, or gpucast.graph.blocks.PRE/POST (outside them)

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def to_dict(self) -> dict:
        return {s: getattr(self, s) for s in self.__slots__}


@dataclass
class MemoryReport:
    """Peak GPU memory the step's tensors need, before the CUDA context.

    ``peak_allocated_bytes``: the maximum over the step of live tensor bytes, each
    allocation rounded as PyTorch's CUDA caching allocator rounds it (the quantity
    ``torch.cuda.max_memory_allocated`` reports). ``peak_reserved_bytes`` adds the
    allocator's segment granularity and fragmentation (``max_memory_reserved``).
    ``at_peak``: bytes live at the peak, by class. ``timeline``: live allocated bytes
    after each op (a list aligned with ``Trace.ops``). ``at_backward_start``: bytes live by
    class when backward begins (training only; empty for inference): the activations there are
    what autograd saved for backward plus the forward's output and the loss. ``allocations``:
    the step's allocations and frees in order, which the caching allocator is replayed over.
    """

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_op_index: int
    peak_phase: str
    at_peak: dict[str, int]
    totals: dict[str, int]
    timeline: list[int] = field(repr=False, default_factory=list)
    at_backward_start: dict[str, int] = field(default_factory=dict)
    # The step's allocations in order (gpucast.graph.allocator.AllocationLog), for replaying the
    # caching allocator with the libraries' workspaces; None where no capture made one.
    allocations: "AllocationLog | None" = field(default=None, repr=False, compare=False)


@dataclass
class Trace:
    job_key: str
    model: str
    mode: str
    precision: str
    batch_size: int
    ops: list[OpRecord]
    memory: MemoryReport
    parameters: int
    parameter_bytes: int
    input_bytes: int
    modules: int = 0  # nn.Module calls in the forward (each costs Python time on the host)
    param_tensors: int = 0  # parameter tensors (host loops of zero_grad/optimizer iterate them)
    gradient_bytes: int = 0  # bytes of the parameters' gradients (what data-parallel all-reduces)
    trainable_parameters: int = 0  # elements of the parameters that get gradients (training)
    input_tensors: int = 1  # tensors the step's inputs hold (each a host-to-device copy in a real loop)
    input_kinds: list = field(default_factory=list)  # (dtype, per-sample shape) of each input tensor
    notes: list[str] = field(default_factory=list)
    layout: "BlockLayout | None" = None  # the model's repeated blocks (gpucast.graph.blocks), None if none

    # ------------------------------------------------------------------ derived traces
    def view(self, key, change, note: str | None = None) -> "Trace":
        """This trace with op *i* replaced by ``change(i, op)`` (the op itself where nothing changes) and
        ``note`` added, made once per ``key`` and kept on this trace (the cost views of packing, sliding
        windows and expert placement: :mod:`gpucast.graph.packing`, :mod:`gpucast.graph.windows`,
        :func:`gpucast.estimate.parallel.experts.rank_view`)."""
        cache = self.__dict__.setdefault("_views", {})
        if key not in cache:
            cache[key] = replace(self, ops=[change(i, o) for i, o in enumerate(self.ops)],
                                 notes=list(self.notes) + ([note] if note else []))
        return cache[key]

    # ------------------------------------------------------------------ summaries
    @property
    def flops(self) -> int:
        return sum(o.flops for o in self.ops)

    @property
    def bytes(self) -> int:
        return sum(o.bytes for o in self.ops)

    @property
    def kernels(self) -> int:
        return sum(o.kernels for o in self.ops)

    @property
    def uncosted(self) -> dict[str, int]:
        """Op name -> count, for ops that had no cost rule (they got the default cost)."""
        return dict(Counter(o.op for o in self.ops if not o.costed))

    @property
    def coverage(self) -> float:
        """Share of dispatched ops that had a cost rule."""
        return 1.0 if not self.ops else sum(o.costed for o in self.ops) / len(self.ops)

    def by(self, *keys: str) -> dict[tuple, dict[str, int]]:
        """Totals of flops, bytes, kernels and op count grouped by record attributes."""
        out: dict[tuple, dict[str, int]] = {}
        for o in self.ops:
            k = tuple(getattr(o, key) for key in keys)
            acc = out.setdefault(k, {"ops": 0, "kernels": 0, "flops": 0, "bytes": 0})
            acc["ops"] += 1
            acc["kernels"] += o.kernels
            acc["flops"] += o.flops
            acc["bytes"] += o.bytes
        return out
