"""Sequence parallelism: the parts of a layer tensor parallelism leaves whole, split along the sequence.

Korthikanti et al. 2022 (*Reducing Activation Recomputation in Large Transformer Models*, sec.
4.2.2): under tensor parallelism *t* the layer norms, dropouts and residual adds run on every rank
over the whole sequence, and their ``10 sbh`` bytes of a GPT layer's saved activations are held *t*
times. With sequence parallelism (``parallel.sequence``) those regions run on ``s / t`` tokens per
rank:

* **compute**: every op of the layers (and the final norm after them) runs on a *t*-th of the work,
  the tensor-parallel ops as before and the rest on its sequence shard; the embedding lookup stays
  whole on each rank (vocabulary-parallel, its output then scattered);
* **activations**: the replicated region's saved bytes are divided by *t* too (their eq. 4:
  ``sbh(10/t + 24/t + 5as/(ht))``; selective recomputation ``34 sbh / t``), and so is what full
  recomputation keeps, each layer's input;
* **communication**: each all-reduce of the ``b s h`` activation becomes a reduce-scatter, and each
  identity before a column-parallel layer an all-gather (their *g* and *ḡ*): two all-gathers and two
  reduce-scatters a layer in forward, the same in backward (each half an all-reduce's bytes on a
  ring, twice its calls), two more of each a layer recomputed in full, a reduce-scatter of the
  embedding's output on the first stage and an all-gather before the output layer (with its
  reduce-scatter in backward) on the last. The backward's second all-gather of each column-parallel
  layer's input (the sequence shard was saved, the weight gradient needs it whole) runs on its own
  stream behind the data-gradient GEMM, as Megatron-LM issues it
  (``LinearWithGradAccumulationAndAsyncCommunication``): counted hidden.

Default (:func:`enabled`): on wherever the tensor degree is above 1 under Megatron, as NeMo's and
Megatron-Bridge's recipes run (``sequence_parallel: true`` in every recipe with TP > 1); off for the
other frameworks. A degree of 1 has nothing to split: Megatron-LM turns the flag off there
(``arguments.py``), and so does gpucast, with a note.

**Overlap with the GEMMs** (``parallel.tp_overlap``, Transformer Engine's ``tp_comm_overlap``
with userbuffers; it needs sequence parallelism, as Megatron-Core asserts): each all-gather and
reduce-scatter is cut into *t* chunks exchanged ring-wise beside the chunks of the GEMM it feeds or
follows (Wang et al. 2022, *Overlap Communication with Dependent Computation via Decomposition in
Large Deep Learning Models*, the collective-matmul decomposition). The first chunk cannot hide, the
rest hides behind the stage's GEMMs: exposed ``C / t + max(0, C (t - 1) / t - G)`` for a
micro-batch's tensor-parallel collectives ``C`` and its GEMM time ``G`` (:func:`overlapped_s`).
Default (:func:`overlap_enabled`): on for a ``megatron`` plan with sequence parallelism on Hopper or
later (:data:`TP_OVERLAP_DEFAULT_SM`), as NVIDIA's performance recipes run every tensor-parallel
plan there: NeMo 2.0 ships a tuned userbuffers configuration for each of its H100/B200 recipes with
TP > 1 (``nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py``: GPT3-20B TP 2,
GPT3-175B TP 4, Llama-3-70B TP 4 on H100 and TP 2 on B200, its LoRA at TP 2, Llama-3.1-405B TP 8,
Nemotron-4 15B TP 2 and 340B TP 8), Megatron-Bridge's ``llama3_70b``/``llama31_405b`` pre-training
recipes set ``CommOverlapConfig(tp_comm_overlap=True, ...)`` with them, and NeMo-Framework-Launcher's
``llama3_70b.yaml`` and ``gpt3/20b.yaml`` set ``ub_tp_comm_overlap: true``. Off before Hopper and
under the other frameworks (Megatron-LM's own default is off: ``--tp-comm-overlap``).

Not modelled: the SMs or copy engines the overlapped exchange takes from the GEMMs, the layer norms' weight gradients all-reduced over the tensor group once a step
(a few kilobytes a layer), Ulysses-style (all-to-all) sequence parallelism, which is context
parallelism's business.
"""

from __future__ import annotations

import numpy as np

from gpucast.estimate.kernels import PHASE_CODES
from gpucast.estimate.parallel.overlaps import overlapped_s as overlapped
from gpucast.graph.blocks import PRE


def enabled(par, framework: str) -> bool:
    """Whether the plan runs sequence parallelism (module docstring, Default)."""
    if (par.tensor or 1) <= 1:
        return False
    if par.sequence is not None:
        return bool(par.sequence)
    return framework == "megatron"


def notes(par) -> list[str]:
    """A note when the job asks for sequence parallelism (or its overlap) a tensor degree of 1 cannot run."""
    out = []
    if par.sequence and (par.tensor or 1) <= 1:
        out.append("parallel.sequence needs tensor parallelism (tensor > 1) to split over: off, as Megatron-LM turns it")
    if par.tp_overlap and (par.tensor or 1) <= 1:
        out.append("parallel.tp_overlap has no tensor-parallel collectives to overlap (tensor 1): off")
    return out


def op_divisor(ol, tensor: int, sequence: bool) -> np.ndarray:
    """How many ways each op of the trace (its :class:`~gpucast.estimate.parallel.ranks.OpLayout`) is
    split on a tensor-parallel rank (1: whole; the optimizer's ops are costed apart)."""
    if tensor <= 1:
        return np.ones(len(ol.block))
    split = ol.sharded | ((ol.block != PRE) & (ol.phase != PHASE_CODES["optim"])) if sequence else ol.sharded
    return np.where(split, float(tensor), 1.0)


# The recipes' tensor-parallel overlap default: Hopper and later (module docstring, Overlap).
TP_OVERLAP_DEFAULT_SM = (9, 0)


def overlap_enabled(par, sequence_on: bool, framework: str = "", gpu=None) -> bool:
    """Whether the tensor-parallel collectives overlap the GEMMs (module docstring, Overlap): the
    job's ``parallel.tp_overlap``, else the recipes' default for ``framework`` on ``gpu``."""
    if not sequence_on or (par.tensor or 1) <= 1:
        return False
    if par.tp_overlap is not None:
        return bool(par.tp_overlap)
    return (framework == "megatron" and gpu is not None
            and tuple(gpu.compute_capability) >= TP_OVERLAP_DEFAULT_SM)


def overlapped_s(comm_s: float, gemm_s: float, tensor: int) -> float:
    """Exposed seconds of ``comm_s`` of tensor-parallel collectives overlapped, chunk by chunk, with
    ``gemm_s`` of GEMMs over ``tensor`` ranks (module docstring, Overlap)."""
    return overlapped(comm_s, tensor, gemm_s)


def tp_collectives(blocks: int, first: bool, last: bool, recompute: str, sequence: bool,
                   dispatched: int = 0) -> list[tuple[int, str]]:
    """(count, kind) of a micro-batch's tensor-parallel collectives of the ``b s h`` activation on a
    stage of ``blocks`` layers (Megatron-LM's *f*/*g* operators; module docstring under sequence
    parallelism). ``dispatched`` of the layers are MoE layers whose tokens an expert-parallel
    all-to-all carries (:mod:`.experts`): only their attention half's collectives run."""
    recomputed = 2 if recompute == "full" else 0
    halves = 2 * blocks - dispatched
    if not sequence:
        return [((4 + recomputed) * halves // 2 + (1 if first else 0), "all-reduce")]
    per_kind = (4 + recomputed) * halves // 2 + (1 if first else 0) + (1 if last else 0)
    return [(per_kind, "all-gather"), (per_kind, "reduce-scatter")]
