"""Activation memory of one pipeline stage's rank, by recomputation mode and tensor degree.

From the trace's activations live when backward starts (what autograd saved, by region:
:attr:`gpucast.graph.blocks.BlockLayout.activations`), per block on average:

* ``none``: the replicated part whole, the sharded part divided by *t* (Korthikanti et al. 2022,
  eq. 2: ``sbh(10 + 24/t + 5as/(ht))`` for a GPT layer, whose ``10 sbh`` are the layer norms'
  inputs, dropout masks and residual-stream tensors every tensor-parallel rank keeps);
* ``selective``: without the attention core's ``s x s`` tensors (their eq. 6 without sequence
  parallelism: ``sbh(10 + 24/t)``);
* ``selective`` with ``recompute_modules`` (Megatron-Core's ``--recompute-modules``): without the
  activations saved inside each named part of the block as well (``mlp``, ``moe``, ``moe_act``,
  ``layernorm``, ``mla_up_proj``, ``shared_experts``: what :mod:`gpucast.graph.blocks` tagged);
  a part's input is made outside it and stays; ``moe`` holds ``moe_act`` and ``shared_experts``;
* ``full``: only the block's input (``2sbh`` bytes in half precision, their sec. 5), plus during
  the backward one block's activations recomputed at a time.

The first stage adds what the embeddings saved (scattered over the tensor ranks under sequence
parallelism: divided by *t*), the last what the head and loss saved (the logits, vocabulary-parallel:
divided by *t*) for one micro-batch only: on the last rank each micro-batch's backward follows its
forward through the head, in 1F1B and in the interleaved schedule (whose warm-up forwards run the
other chunks). Under the 1F1B schedule stage *k* of *p* holds the
activations of ``min(p - k, m)`` micro-batches at its peak (Narayanan et al. 2021, sec. 2.2), so
the first stage holds *p* of them. Interleaved over *v* chunks per rank, Megatron-LM's schedule
runs ``2 (p - k - 1) + (v - 1) p`` warm-up chunk forwards before its first backward
(megatron/core/pipeline_parallel/schedules.py, the interleaved schedule's warm-up count), so stage
*k* holds ``(2 (p - k - 1) + (v - 1) p + 1) / v`` micro-batches' worth: ``p (1 + (p - 1) / (p v))``
on the first stage (Korthikanti et al. 2022, sec. 4.2.3). Sequence parallelism (``sequence``,
:mod:`.sequence`) splits the replicated part over the *t* ranks too (their eq. 4:
``sbh(34/t + 5as/(ht))``; selective ``34 sbh / t``), and full recomputation's kept inputs. CPU
offloading (``offload`` layers, :mod:`.offload`) keeps the others' activations per micro-batch in
flight and one offloaded layer's in transit. Context parallelism (*c*) divides all of it by *c*.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucast.estimate.parallel.offload import kept_blocks
from gpucast.graph.blocks import BlockLayout


@dataclass(frozen=True)
class StageActivations:
    per_micro_batch: float   # bytes one micro-batch leaves saved on this rank
    in_flight: float         # micro-batches saved at the peak (1F1B; a fraction when interleaved)
    working: float           # held once: one block recomputed or in transit, the head's and the loss's

    @property
    def total(self) -> float:
        return self.per_micro_batch * self.in_flight + self.working


def dropped_modules(modules) -> tuple[str, ...]:
    """The named parts whose activations selective recompute drops, a part inside another named one
    left out (``moe`` holds ``moe_act`` and ``shared_experts``)."""
    mods = tuple(m for m in (modules or ("core_attn",)) if m != "core_attn")
    return tuple(m for m in mods if not ("moe" in mods and m in ("moe_act", "shared_experts")))


def per_block(layout: BlockLayout, tensor: int, recompute: str, sequence: bool = False,
              modules: tuple[str, ...] = ("core_attn",)) -> float:
    """Bytes one block saves for its backward on one tensor-parallel rank (``sequence``: under
    sequence parallelism; ``modules``: what ``selective`` recomputes)."""
    a = layout.activations
    n = max(layout.blocks, 1)
    whole = tensor if sequence else 1   # the replicated region's split
    if recompute == "full":
        return layout.block_input_bytes / whole
    sharded, replicated = a.get("sharded", 0), a.get("replicated", 0)
    if recompute == "selective":
        if "core_attn" in (modules or ("core_attn",)):
            sharded -= a.get("attention_core", 0)
        for m in dropped_modules(modules):
            sharded -= a.get(f"module:{m}:sharded", 0)
            replicated -= a.get(f"module:{m}:replicated", 0)
    return (max(0, replicated) / whole + max(0, sharded) / tensor) / n


def stage_activations(layout: BlockLayout, blocks: int, stage: int, stages: int, micro_batches: int,
                      tensor: int, recompute: str, chunks: int = 1, sequence: bool = False,
                      context: int = 1, modules: tuple[str, ...] = ("core_attn",),
                      offload: int = 0, mtp: int = 0) -> StageActivations:
    """What stage ``stage`` of ``stages`` (holding ``blocks`` blocks in ``chunks`` interleaved chunks)
    keeps for its backward."""
    a = layout.activations
    one = per_block(layout, tensor, recompute, sequence, modules)
    saved = kept_blocks(blocks, offload) * one
    if stage == 0:   # the embeddings' output, scattered over the tensor ranks under sequence parallelism
        saved += a.get("pre", 0) / (tensor if sequence else 1)
    # the head's and the loss's on the last stage, once more per multi-token-prediction depth on this one:
    # one micro-batch's at a time, its backward following its forward there in 1F1B and interleaved alike
    head = ((stage == stages - 1) + mtp) * a.get("post", 0) / tensor
    whole_block = per_block(layout, tensor, "none", sequence)
    working = whole_block if recompute == "full" else 0.0
    if offload > 0:
        working += one      # the offloaded layer in transit
    working += head
    saved, working = saved / context, working / context   # a context rank's tokens (.context)
    if chunks > 1 and stages > 1:
        warmup = 2 * (stages - stage - 1) + (chunks - 1) * stages
        in_flight = min((warmup + 1) / chunks, float(micro_batches))
    else:
        in_flight = min(stages - stage, micro_batches)
    return StageActivations(per_micro_batch=saved, in_flight=in_flight, working=working)
