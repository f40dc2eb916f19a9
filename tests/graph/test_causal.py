"""A causal fused attention op carries the causal triangle's FLOPs (gpucast.graph.causal).

The reference is flop_counter's own SDPA formula on the op's shapes (the whole ``q x k`` square) and the count
of query-key pairs a top-left causal mask keeps, counted here by building the mask itself.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import sdpa_flop_count

from gpucast.graph import causal
from gpucast.job import Job


def _kept(q: int, k: int) -> int:
    return int(torch.ones(q, k).tril().sum())   # SDPA's is_causal mask, aligned top-left


@pytest.mark.parametrize("q,k", [(1, 1), (7, 7), (64, 64), (4, 9), (9, 4)])
def test_pairs_share_is_the_share_of_the_mask_kept(q, k):
    assert causal.pairs_share(q, k) == pytest.approx(_kept(q, k) / (q * k))


def test_a_chunks_pairs_over_its_cache_are_the_bottom_right_mask():
    new, cached = 5, 11
    kept = int(torch.ones(new, cached + new).tril(diagonal=cached).sum())
    assert causal.chunk_pairs(new, cached) == kept
    assert causal.chunk_pairs(new, 0) == _kept(new, new)


class _Attention(nn.Module):
    def __init__(self, is_causal: bool):
        super().__init__()
        self.proj = nn.Linear(64, 3 * 64)
        self.is_causal = is_causal

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.proj(x).view(b, s, 3, 4, 16).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal).sum()


def _trace(is_causal: bool, seq: int = 32):
    from gpucast.graph import capture

    job = Job.from_module(lambda: _Attention(is_causal), lambda b: (torch.randn(b, seq, 64),), batch_size=2,
                          loss_fn=lambda out, inputs: out, precision="bf16", name=f"tests.attention_{is_causal}")
    return capture(job)


def test_a_causal_sdpa_counts_the_triangle_and_a_full_one_the_square():
    seq = 32
    full, tri = _trace(False, seq), _trace(True, seq)
    fwd = [o for o in full.ops if o.op in causal.FUSED and not o.op.endswith("_backward")]
    cfwd = [o for o in tri.ops if o.op in causal.FUSED and not o.op.endswith("_backward")]
    assert len(fwd) == len(cfwd) == 1
    whole = sdpa_flop_count(*fwd[0].shapes[:3])
    assert fwd[0].flops == whole
    assert cfwd[0].flops == int(whole * _kept(seq, seq) / seq ** 2)
    assert causal.traced_causal(cfwd[0]) and not causal.traced_causal(fwd[0])
    # the backward too, at the same share; everything else is the same in both traces
    bwd = [o for o in full.ops if o.op in causal.FUSED and o.op.endswith("_backward")]
    cbwd = [o for o in tri.ops if o.op in causal.FUSED and o.op.endswith("_backward")]
    assert len(bwd) == len(cbwd) == 1
    assert cbwd[0].flops == int(bwd[0].flops * causal.pairs_share(seq, seq))
    rest = sum(o.flops for o in full.ops if o.op not in causal.FUSED)
    assert rest == sum(o.flops for o in tri.ops if o.op not in causal.FUSED) > 0
