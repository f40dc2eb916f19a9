"""The backwards of :mod:`gpucast.graph.linear_attention`'s fused ops, for training traces of hybrid models.

Megatron-Core, and transformers with the hub's kernels, train gated delta-nets (Qwen3-Next, Qwen3.5) and Mamba-2
mixers (Nemotron-H, Granite-4, Bamba) with the same fused kernels an engine serves them with, run with no cache
(fla's ``chunk_gated_delta_rule``, mamba-ssm's ``mamba_chunk_scan_combined``, causal-conv1d): not the torch
fallbacks, whose ``(chunks x chunk x chunk)`` intermediates and Python loops would make a training step several
times slower and its activations several times larger than what runs. A meta-device trace of such a model
(:mod:`gpucast.graph.hf`) records the forward ops with an empty state (:data:`linear_attention.STATELESS`); each has
a backward op of its own here (``torch.library.register_autograd``):

* ``gated_delta_rule_backward``: fla's ``chunk_gated_delta_rule_bwd`` recomputes ``W``, ``U`` and the chunk states
  (``2 c dk + 2 c dv + 4 dk dv`` a token and value head), then takes the gradients at twice the forward's FLOPs,
  in :data:`CHUNK_BACKWARD_KERNELS` kernels;
* ``ssd_scan_backward``: mamba-ssm's ``_mamba_chunk_scan_combined_bwd`` recomputes ``C B^T`` and the chunk states
  (``2 c N`` a group, ``2 P N`` a head), then twice the forward's FLOPs, in :data:`SSD_BACKWARD_KERNELS` kernels;
* ``causal_conv1d_backward``: the input's and the weight's gradients, twice the forward's FLOPs, in
  :data:`CONV_BACKWARD_KERNELS` kernels.

They are of the ``attention`` category, as their forwards, and read their inputs and the output's gradient and
write the inputs' gradients (the default byte rule). Saved for the backward: the ops' inputs (and the scan's
output, as mamba-ssm saves it).

Not modelled: fla's WY matrix (``c`` values a token and head) and mamba-ssm's ``dA_cumsum`` (one fp32 value a token
and head) among the saved tensors; the parameters inside the kernels (``A_log``, ``D``, ``dt_bias``: a few values
a head) get no gradient; the chunked kernels' own efficiency (their FLOPs run at the fused attention kernels'
achieved rate, as the forwards').
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula

from gpucast.graph import rules
from gpucast.graph.linear_attention import CHUNK, chunk_flops, conv_flops, ssd_flops

# fla's chunk_gated_delta_rule_bwd (fla/ops/gated_delta_rule/chunk.py): recompute_w_u_fwd,
# chunk_gated_delta_rule_fwd_h, chunk_bwd_dv_local, chunk_gated_delta_rule_bwd_dhu, chunk_bwd_dqkwg,
# prepare_wy_repr_bwd, chunk_local_cumsum (reverse), and the l2norm backward of q and k.
CHUNK_BACKWARD_KERNELS = 9
# mamba_ssm/ops/triton/ssd_combined.py _mamba_chunk_scan_combined_bwd: clone of dt, _chunk_cumsum_fwd,
# _bmm_chunk_fwd, _chunk_state_fwd, _state_passing_fwd (the recompute), _chunk_scan_bwd_dstates,
# _state_passing_bwd, _chunk_scan_chunk_state_bwd_dx, _chunk_state_bwd_db, _chunk_scan_bwd_dC,
# _chunk_scan_bwd_dcb, _bmm_chunk_bwd twice, the reverse cumsum (flip, cumsum, flip), _chunk_scan_bwd_ddAcs_stable,
# two adds and _chunk_cumsum_bwd.
SSD_BACKWARD_KERNELS = 20
# causal-conv1d's backward: its kernel, then the fp32 weight gradient cast to the weight's dtype.
CONV_BACKWARD_KERNELS = 2

_LIB = torch.library.Library("gpucast", "FRAGMENT")
_LIB.define("causal_conv1d_backward(Tensor x, Tensor weight, Tensor grad) -> (Tensor, Tensor)")
_LIB.define("gated_delta_rule_backward(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor grad) "
            "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")
_LIB.define("ssd_scan_backward(Tensor x, Tensor dt, Tensor B, Tensor C, Tensor out, Tensor grad, int chunk) "
            "-> (Tensor, Tensor, Tensor, Tensor)")


@torch.library.register_fake("gpucast::causal_conv1d_backward")
def _conv_bwd_fake(x, weight, grad):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


@torch.library.register_fake("gpucast::gated_delta_rule_backward")
def _rule_bwd_fake(q, k, v, g, beta, grad):
    return tuple(t.new_empty(t.shape) for t in (q, k, v, g, beta))


@torch.library.register_fake("gpucast::ssd_scan_backward")
def _ssd_bwd_fake(x, dt, B, C, out, grad, chunk):
    return tuple(t.new_empty(t.shape) for t in (x, dt, B, C))


causal_conv1d_backward = torch.ops.gpucast.causal_conv1d_backward
gated_delta_rule_backward = torch.ops.gpucast.gated_delta_rule_backward
ssd_scan_backward = torch.ops.gpucast.ssd_scan_backward


def _conv_setup(ctx, inputs, output):
    x, _state, weight, _cached = inputs
    ctx.save_for_backward(x, weight)


def _conv_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dweight = causal_conv1d_backward(x, weight, grad)
    return dx, None, dweight, None


def _rule_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:5])


def _rule_backward(ctx, grad):
    return (*gated_delta_rule_backward(*ctx.saved_tensors, grad), None, None)


def _ssd_setup(ctx, inputs, output):
    x, dt, b, c, _state, chunk, _cached = inputs
    ctx.save_for_backward(x, dt, b, c, output)
    ctx.chunk = chunk


def _ssd_backward(ctx, grad):
    return (*ssd_scan_backward(*ctx.saved_tensors, grad, ctx.chunk), None, None, None)


torch.library.register_autograd("gpucast::causal_conv1d", _conv_backward, setup_context=_conv_setup)
torch.library.register_autograd("gpucast::gated_delta_rule", _rule_backward, setup_context=_rule_setup)
torch.library.register_autograd("gpucast::ssd_scan", _ssd_backward, setup_context=_ssd_setup)


@register_flop_formula(causal_conv1d_backward)
def _conv_bwd_flop(x_shape, weight_shape, grad_shape, out_shape=None, **kwargs) -> int:
    return 2 * conv_flops(x_shape, None, weight_shape, False)


@register_flop_formula(gated_delta_rule_backward)
def _rule_bwd_flop(q_shape, k_shape, v_shape, g_shape, beta_shape, grad_shape, out_shape=None, **kwargs) -> int:
    batch, tokens, heads, dv = v_shape
    dk, c = q_shape[-1], min(tokens, CHUNK)
    recompute = 2 * c * dk + 2 * c * dv + 4 * dk * dv   # W, U and the chunk states again
    return batch * tokens * heads * (2 * chunk_flops(tokens, dk, dv) + recompute)


@register_flop_formula(ssd_scan_backward)
def _ssd_bwd_flop(x_shape, dt_shape, b_shape, c_shape, out_shape_, grad_shape, chunk, out_shape=None, **kwargs) -> int:
    batch, tokens, heads, p = x_shape
    groups, n = b_shape[-2], b_shape[-1]
    c = min(tokens, chunk)
    recompute = batch * tokens * (groups * 2 * c * n + heads * 2 * p * n)   # C B^T and the chunk states again
    return 2 * ssd_flops(x_shape, dt_shape, b_shape, c_shape, None, chunk, False) + recompute


rules.category_rule("attention", causal_conv1d_backward, gated_delta_rule_backward, ssd_scan_backward)


@rules.kernels_rule("gated_delta_rule_backward", "ssd_scan_backward", "causal_conv1d_backward")
def _backward_kernels(name, args) -> int:
    return {"gated_delta_rule_backward": CHUNK_BACKWARD_KERNELS, "ssd_scan_backward": SSD_BACKWARD_KERNELS,
            "causal_conv1d_backward": CONV_BACKWARD_KERNELS}[name]
