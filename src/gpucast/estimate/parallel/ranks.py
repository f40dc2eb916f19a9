"""One replica's trace turned into the work of one rank: its pipeline stage's ops, each split by
the tensor-parallel degree.

* **Stages** (pipeline degree *p*): the *L* blocks go to *p* contiguous stages, the first stages
  taking one more block when *p* does not divide *L* (``numpy.array_split``, as Megatron-LM's
  uneven-stage option would place them); ops before the blocks (embeddings) run on the first
  stage, ops after them (final norm, head, loss) on the last (:mod:`gpucast.graph.blocks`).
* **Tensor parallelism** (degree *t*): an op whose work Megatron-LM splits
  (:func:`gpucast.graph.blocks.is_sharded`: matmuls, attention, and every op not on the replicated
  residual stream) has its FLOPs and bytes divided by *t*; its fixed costs (the compute ramp, the
  per-SM bytes, the per-kernel floor) stay (:func:`split_times`). Norms, residual adds and dropout
  on the full hidden state run whole on every tensor-parallel rank, as in Megatron-LM without
  sequence parallelism.
* **Recomputation**: ``full`` runs each block's forward again before its backward, ``selective``
  only the attention core (:func:`gpucast.graph.blocks.is_attention_core`); the recomputed ops are
  appended to the stage's op list, so their kernels and dispatch are costed like the forward's.
* The optimizer's ops update the parameters a rank holds: their time scales by the rank's share
  of the replica's trainable parameters (:func:`optimizer_share`).

The sum over the ranks of a stage's FLOPs is the replica's for every split op; replicated ops are
counted on each tensor-parallel rank, as they run there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpucast.estimate.kernels import PHASE_CODES, KernelTimes, OpArrays
from gpucast.graph.blocks import POST, PRE, is_attention_core, is_sharded
from gpucast.graph.trace import Trace


@dataclass
class OpLayout:
    """Per-op columns of the replica's trace that the parallel plan needs (computed once a trace)."""

    block: np.ndarray        # block index, PRE or POST
    sharded: np.ndarray      # tensor parallelism splits it
    attention_core: np.ndarray
    phase: np.ndarray        # PHASE_CODES
    module: tuple = ()       # each op's recompute-module roles ("" or "mlp", "moe|moe_act", ...: graph.blocks)

    def tagged(self, modules) -> np.ndarray:
        """Which ops ran inside one of the named recompute modules (``core_attn`` aside)."""
        want = set(modules or ()) - {"core_attn"}
        cache = self.__dict__.setdefault("_tagged", {})
        key = tuple(sorted(want))
        if key not in cache:
            cache[key] = np.fromiter((bool(want & set(m.split("|"))) if m else False for m in self.module),
                                     dtype=bool, count=len(self.module))
        return cache[key]

    @classmethod
    def of(cls, trace: Trace) -> "OpLayout":
        cached = getattr(trace, "_op_layout", None)
        if cached is not None:
            return cached
        hidden = trace.layout.hidden if trace.layout is not None else 0
        ops = trace.ops
        lay = cls(block=np.fromiter((o.block for o in ops), dtype=np.int32, count=len(ops)),
                  sharded=np.fromiter((is_sharded(o, hidden) for o in ops), dtype=bool, count=len(ops)),
                  attention_core=np.fromiter((is_attention_core(o) for o in ops), dtype=bool, count=len(ops)),
                  phase=OpArrays.of(trace).phase, module=tuple(o.module for o in ops))
        trace._op_layout = lay
        return lay


def stage_blocks(n_blocks: int, stages: int, first: int | None = None, last: int | None = None) -> list[np.ndarray]:
    """The blocks of each stage (contiguous; the first stages take the remainder), or with ``first`` /
    ``last`` (Megatron-Core's ``--decoder-first/last-pipeline-num-layers``) that many on the first and
    the last stage and the rest evenly over the others (:mod:`.checks` says when they do not split)."""
    if stages <= 1 or (first is None and last is None):
        return np.array_split(np.arange(n_blocks), stages)
    middle = stages - 2
    rest = n_blocks - (first or 0) - (last or 0)
    if first is None or last is None:   # the other end takes an even middle stage's share
        each = rest // (middle + 1)
        first = first if first is not None else rest - each * middle
        last = last if last is not None else rest - each * middle
        rest = n_blocks - first - last
    sizes = [first] + ([rest // middle] * middle if middle else []) + [last]
    return np.split(np.arange(n_blocks), np.cumsum(sizes)[:-1])


def stage_of_ops(lay: OpLayout, blocks_of_stage: list[np.ndarray]) -> np.ndarray:
    """Each op's pipeline stage (optimizer ops: -1, they are costed per rank apart)."""
    p = len(blocks_of_stage)
    n_blocks = sum(len(b) for b in blocks_of_stage)
    of_block = np.zeros(max(n_blocks, 1), dtype=np.int32)
    for k, bl in enumerate(blocks_of_stage):
        of_block[bl] = k
    stage = np.where(lay.block == PRE, 0, np.where(lay.block == POST, p - 1, of_block[np.clip(lay.block, 0, None)]))
    return np.where(lay.phase == PHASE_CODES["optim"], -1, stage)


def split_times(kt: KernelTimes, divisor: np.ndarray, ramp_s: float, fixed_bytes_s: float) -> KernelTimes:
    """Kernel times with each op's FLOPs and bytes divided by ``divisor`` (1 where not split); the
    compute ramp and the per-SM bytes term (``fixed_bytes_s``: their seconds) stay whole."""
    if np.all(divisor == 1):
        return kt
    launched = kt.time > 0
    compute = np.where(kt.compute > 0, np.maximum(kt.compute - ramp_s, 0.0) / divisor + ramp_s, 0.0)
    memory = np.where(kt.memory > 0, np.maximum(kt.memory - fixed_bytes_s, 0.0) / divisor + fixed_bytes_s, 0.0)
    time = np.where(launched, np.maximum(np.maximum(compute, memory), kt.floor), 0.0)
    return KernelTimes(time=time, compute=compute, memory=memory, floor=kt.floor)


def stage_ops(lay: OpLayout, stage: np.ndarray, k: int, recompute: str,
              modules: tuple[str, ...] = ("core_attn",)) -> tuple[np.ndarray, int, int]:
    """Indices of stage ``k``'s forward, recomputed forward and backward ops, in issue order, with
    the number of forward ops and of recomputed ones (they follow the forward's); ``modules``: what
    ``selective`` recomputes (Megatron-Core's ``--recompute-modules``)."""
    mine = stage == k
    fwd = np.flatnonzero(mine & (lay.phase < PHASE_CODES["bwd"]))
    bwd = np.flatnonzero(mine & (lay.phase == PHASE_CODES["bwd"]))
    in_block = mine & (lay.phase == PHASE_CODES["fwd"]) & (lay.block >= 0)
    if recompute == "full":
        again = np.flatnonzero(in_block)
    elif recompute == "selective":
        core = lay.attention_core if "core_attn" in (modules or ("core_attn",)) else np.zeros(len(lay.block), bool)
        again = np.flatnonzero(in_block & (core | lay.tagged(modules)))
    else:
        again = np.zeros(0, dtype=np.int64)
    return np.concatenate([fwd, again, bwd]).astype(np.int64), len(fwd), len(again)


def sub_trace(trace: Trace, idx: np.ndarray) -> Trace:
    """A trace of the ops at ``idx`` (a rank's share of the step), for the step simulation. Kept on
    the replica's trace by the ops it holds, so every plan that gives a rank the same ops (same
    stages and recomputation) reuses it and the columns the simulation builds from it once."""
    cache = getattr(trace, "_sub_traces", None)
    if cache is None:
        cache = trace._sub_traces = {}
    key = idx.tobytes()
    sub = cache.get(key)
    if sub is None:
        sub = cache[key] = replace(trace, ops=[trace.ops[i] for i in idx], layout=None)
    return sub


def subset(kt: KernelTimes, idx: np.ndarray) -> KernelTimes:
    return KernelTimes(time=kt.time[idx], compute=kt.compute[idx], memory=kt.memory[idx], floor=kt.floor[idx])


def optimizer_share(trainable_on_rank: float, trainable_total: float) -> float:
    return trainable_on_rank / trainable_total if trainable_total > 0 else 0.0
