"""Which layers each pipeline rank holds when the split is not even: Megatron-Core's custom layouts.

Megatron-Core splits a model's decoder layers evenly over ``p x v`` virtual stages (``p`` pipeline
ranks, ``v`` interleaved chunks each; rank *r* runs virtual stages ``r, r + p, ..., r + (v-1) p``).
Two ways to make the split uneven reach this module, both of which relax the even split's
"``v`` must divide each stage's layers" rule, which is what lets models whose layer count has no
convenient factors (Llama-3.1-405B's 126, DeepSeek-V3's 61 + 1 MTP) run an interleaved pipeline:

* **A layout string** (``parallel.pipeline_layout``; Megatron-Core's ``--pipeline-model-parallel-layout``,
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py`` and its guide
  ``docs/api-guide/pipeline_parallel_layout.md``): virtual stages separated by ``|``, each a run of
  ``E`` (the embedding), ``t`` (a decoder layer, taken in order), ``m`` (a multi-token-prediction
  depth) and ``L`` (the output layer and the loss); ``X*n`` repeats a symbol or a parenthesised
  group, commas and spaces are cosmetic, a stage may be empty. DeepSeek-V3 at PP 16, VP 2:
  ``Et*3|(tt|)*29,m|L``. As Megatron-Core asks, ``E`` stands once in the first virtual stage and
  ``L`` once in the last, and the string holds ``p x v`` stages (unset ``virtual_pipeline``: the
  string's stages over ``p``).
* **The embedding and the loss counted as layers** (``parallel.embedding_in_split`` /
  ``parallel.loss_in_split``; Megatron-Core's ``--account-for-embedding-in-pipeline-split`` /
  ``--account-for-loss-in-pipeline-split``, as Megatron-Bridge's Llama-3.1-405B recipe runs it):
  the decoder layers plus one slot each for the embedding and the loss split evenly over the
  ``p x v`` virtual stages, the first virtual stage one layer short for the embedding, the last one
  short for the loss (126 + 2 = 128 = 8 x 8 x 2).

Both become the same thing (:class:`RankLayout`): per pipeline rank, its decoder layers (not
contiguous under interleaving), its MTP depths and its virtual stages' layer counts. The estimator
then costs each rank's ops and memory as for any other split (:mod:`gpucast.estimate.parallel.stages`,
:mod:`gpucast.estimate.parallel.activations`);
the interleaved schedule's in-flight activations use the rank's mean chunk. Not modelled: the
output layer replicated on a rank that holds MTP depths but not the loss (its weight is shared).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

SYMBOLS = {"E": "the embedding", "t": "a decoder layer", "m": "a multi-token-prediction depth",
           "L": "the output layer and the loss"}
_TOKEN = re.compile(r"\s*(?:(?P<sym>[EtmL|])|(?P<open>\()|(?P<close>\))|(?P<times>\*\s*(?P<n>\d+))|(?P<comma>,))")
MAX_EXPANDED = 1_000_000   # symbols a layout may expand to (a guard against "(t*1000)*1000")


class LayoutError(ValueError):
    """A layout that does not parse or does not fit the plan; its message is one line."""


def parse(text: str) -> tuple[str, ...]:
    """The virtual stages of a layout string (module docstring), each a string of ``EtmL``; parsed once
    per string (the spec, its checks and the estimator each ask)."""
    if not isinstance(text, str) or not text.strip():
        raise LayoutError("a layout such as 'Et*3|(tt|)*29,m|L' (E embedding, t layer, m MTP, L loss, | between stages)")
    return _parse(text)


@lru_cache(maxsize=256)
def _parse(text: str) -> tuple[str, ...]:
    flat, _ = _sequence(text, 0, 0)
    stages = tuple("".join(flat).split("|"))
    for sym, where, name in (("E", 0, "first"), ("L", len(stages) - 1, "last")):
        total = sum(s.count(sym) for s in stages)
        if total != 1 or sym not in stages[where]:
            raise LayoutError(f"{SYMBOLS[sym]} ({sym}) must stand once, in the {name} stage, in {text!r}")
    return stages


def _sequence(text: str, pos: int, depth: int) -> tuple[list[str], int]:
    """The symbols from ``pos`` to the end (``depth`` 0) or to the ``)`` closing a group, expanded."""
    out: list[str] = []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if not text[pos:].strip():
                break
            raise LayoutError(f"unexpected {text[pos]!r} at character {pos + 1} of {text!r} (symbols: E t m L | ( ) *n ,)")
        pos = m.end()
        if m.group("close"):
            if depth == 0:
                raise LayoutError(f"unmatched ')' at character {m.start('close') + 1} of {text!r}")
            return out, pos
        if m.group("comma"):
            continue
        if m.group("times"):
            raise LayoutError(f"'*' with nothing to repeat at character {m.start('times') + 1} of {text!r}")
        item, pos = _sequence(text, pos, depth + 1) if m.group("open") else ([m.group("sym")], pos)
        rep = _TOKEN.match(text, pos)
        if rep is not None and rep.group("times"):
            n = int(rep.group("n"))
            if len(item) * n + len(out) > MAX_EXPANDED:
                raise LayoutError(f"{text!r} expands to more than {MAX_EXPANDED:,} symbols")
            item, pos = item * n, rep.end()
        out.extend(item)
    if depth:
        raise LayoutError(f"unclosed '(' in {text!r}")
    return out, pos


def from_split(layers: int, virtual_stages: int, embedding: bool, loss: bool) -> tuple[str, ...]:
    """The layout of an even split with the embedding and/or the loss counted as a layer each
    (module docstring); :class:`LayoutError` when the slots do not split evenly."""
    slots = ["E"] * embedding + ["t"] * layers + ["L"] * loss
    if len(slots) % virtual_stages:
        what = " + ".join([f"{layers} layers"] + ["the embedding"] * embedding + ["the loss"] * loss)
        raise LayoutError(f"{what} ({len(slots)} slots) do not split into {virtual_stages} equal virtual stages")
    each = len(slots) // virtual_stages
    stages = ["".join(slots[i:i + each]) for i in range(0, len(slots), each)]
    stages[0] = stages[0] if embedding else "E" + stages[0]
    stages[-1] = stages[-1] if loss else stages[-1] + "L"
    return tuple(stages)


@dataclass(frozen=True)
class RankLayout:
    """Per pipeline rank: its decoder layers' indices, its MTP depths, its virtual stages' layer counts."""

    blocks: list[list[int]]   # plain lists: the job's spec imports this module, and it imports no numpy
    mtp: list[int]
    chunks: list[list[int]]


def ranks(stages: tuple[str, ...], pipeline: int) -> RankLayout:
    """Where each virtual stage's layers land: virtual stage ``i`` on rank ``i mod p`` (module docstring)."""
    blocks: list[list[int]] = [[] for _ in range(pipeline)]
    mtp = [0] * pipeline
    chunks: list[list[int]] = [[] for _ in range(pipeline)]
    nxt = 0
    for i, st in enumerate(stages):
        r = i % pipeline
        n = st.count("t")
        blocks[r].extend(range(nxt, nxt + n))
        nxt += n
        mtp[r] += st.count("m")
        chunks[r].append(n)
    return RankLayout(blocks, mtp, chunks)


def of_plan(par, layers: int, mtp_default: int) -> tuple[str, ...] | None:
    """The plan's layout (module docstring), or None for Megatron-Core's even split; raises
    :class:`LayoutError` (one line) for one that does not fit the model or the plan."""
    p = par.pipeline or 1
    v = par.virtual_pipeline or 1
    if par.pipeline_layout:
        stages = parse(par.pipeline_layout)
        if len(stages) != p * v:
            raise LayoutError(f"has {len(stages)} stages, not pipeline x virtual_pipeline = {p} x {v} = {p * v}")
        n_t = sum(s.count("t") for s in stages)
        if n_t != layers:
            raise LayoutError(f"places {n_t} decoder layers (t), not the model's {layers}")
        n_m = sum(s.count("m") for s in stages)
        if par.mtp_layers is not None and n_m != par.mtp_layers:
            raise LayoutError(f"places {n_m} MTP depths (m), not parallel.mtp_layers' {par.mtp_layers}")
        if par.mtp_layers is None and n_m not in (0, mtp_default):
            raise LayoutError(f"places {n_m} MTP depths (m), not the model's {mtp_default} (or none: then on the "
                              f"last rank)")
        return stages
    if par.embedding_in_split or par.loss_in_split:
        return from_split(layers, p * v, bool(par.embedding_in_split), bool(par.loss_in_split))
    return None
