"""Context parallelism: each sequence split over *c* ranks, keys and values passed round a ring.

Megatron-Core's context parallelism (``parallel.context``; Transformer Engine's
``attn_forward_func_with_cp``, the ring-attention form of Liu et al. 2023, *Ring Attention with
Blockwise Transformers*) gives each of the *c* ranks of a context group ``s / c`` tokens of every
sequence, in ``2c`` chunks (rank *i* takes chunks *i* and ``2c - 1 - i``) so that each rank's share
of the causal triangle is the same. What a rank runs of one micro-batch:

* **compute**: every op on a *c*-th of the tokens: the layers' GEMMs, norms and activations, the
  embedding, the head and the loss; attention over its queries against every key, which with the
  load-balanced chunks is a *c*-th of the causal work too. The trace's ops are divided by *c*
  (:func:`op_divisor`; the grid model then sees a *c*-th of the GEMM's columns, not of its rows);
* **communication**: in forward each attention layer passes its key and value chunk ``c - 1`` times
  round the ring (point-to-point sends of ``2 b (s/c) h_kv / t`` elements), in backward the keys and
  values again and their gradients: ``3 (c - 1)`` sends a layer. TE issues each step's send
  beside the previous chunk's attention, so only what the layer's attention kernels do not cover is
  exposed, and at least one send's latency a layer each way (:func:`exposed_s`);
* **gradients and optimizer**: the context ranks hold the same weights; their gradients are reduced
  over the data-parallel and context ranks together, and the distributed optimizer shards over
  both (Megatron-Core's ``dp_cp`` group): the data-parallel group of the plan is ``d c`` wide
  (:func:`gpucast.estimate.parallel.collectives.placement` over ``gpus / (t p)`` ranks), while the global batch
  counts the *d* replicas only;
* **memory**: activations a *c*-th, the model states sharded over ``d c``.

Ranks are ordered as Megatron-Core orders them (tensor fastest, then context, then data, then
pipeline): the ring stays inside a node while ``t c`` fits in it.

Validation: a context degree must divide the sequence into ``2 c`` equal chunks (Megatron-Core
asserts ``seq_length % (2 * cp) == 0``) and needs a model with repeated blocks (a transformer).

Not modelled: all-to-all (Ulysses-style, ``cp_comm_type: a2a``) and hierarchical exchanges, the
chunks' unequal attention kernel efficiency, the attention kernel's shape at ``s / c`` queries.
"""

from __future__ import annotations

import numpy as np

from gpucast.estimate.comm import CommConstants, Group, Links, call_latency, collective_time
from gpucast.estimate.kernels import PHASE_CODES


def op_divisor(ol, context: int) -> np.ndarray:
    """How many ways each op of the trace is split on a context rank (the optimizer's ops: whole)."""
    if context <= 1:
        return np.ones(len(ol.block))
    return np.where(ol.phase != PHASE_CODES["optim"], float(context), 1.0)


def ring(tensor: int, context: int, gpus_per_node: int) -> Group:
    """The pair of neighbours a ring step sends between: inside a node while ``t c`` fits in it."""
    return Group(2, 2) if tensor * context <= gpus_per_node else Group(2, 1, concurrent=gpus_per_node)


def kv_bytes(batch: int, tokens: int, hidden: int, heads: int | None, kv_heads: int | None, tensor: int,
             context: int, act_bytes: int) -> float:
    """One rank's key and value chunk: ``2 b (s / c) h (kv_heads / heads) / t`` elements."""
    share = (kv_heads or heads or 1) / (heads or 1)
    return 2.0 * batch * tokens / context * hidden * share / tensor * act_bytes


def exposed_s(blocks: int, context: int, nbytes: float, attention_s: float, group: Group, links: Links,
              comm: CommConstants, calls: list) -> float:
    """Exposed seconds of a micro-batch's ring sends on a stage of ``blocks`` layers whose attention
    kernels (forward and backward) take ``attention_s``; appends the sends to ``calls``."""
    if context <= 1 or blocks == 0:
        return 0.0
    sends = 3 * (context - 1) * blocks
    calls.append((sends, "send-recv", group))
    total = sends * collective_time("send-recv", nbytes, group, links, comm)
    floor = 2 * blocks * call_latency("send-recv", group, links, comm)   # the first send each way a layer
    return max(floor, total - attention_s)
