"""ONNX neural-network operators (convolution, GEMM, normalisation, pooling, recurrence,
attention, dropout, losses) as the torch calls PyTorch's own modules make.

Training semantics: in a training job, ``BatchNormalization`` computes batch statistics (and
increments its batch counter, as ``nn.BatchNorm`` does) and
``Dropout`` drops (as ``model.train()`` does), whatever mode the graph was exported in; in an
inference job both run as in evaluation. ONNX ``LSTM``/``GRU``/``RNN`` nodes become one
``_VF.lstm``/``gru``/``rnn_*`` call, which the core mirrors as cuDNN's fused RNN; gate order
differs between ONNX and PyTorch, which changes no cost. Peephole weights (LSTM ``P``) and
``sequence_lens`` are not modelled. ``Attention`` (opset 23) runs as scaled-dot-product
attention on 4-D inputs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gpucast.graph.onnx.base import NeedsValue, is_host, on_device, onnx_op, same_device, values


def _spatial_pads(ctx, x_shape, kernel, strides, dilations):
    """(symmetric torch padding, or None) and the explicit F.pad list when begin != end."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for i in range(n):
            size = x_shape[2 + i]
            out = math.ceil(size / strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
    elif auto == "VALID":
        pads_b = pads_e = [0] * n
    else:
        pads = ctx.attr("pads") or [0] * (2 * n)
        pads_b, pads_e = list(pads[:n]), list(pads[n:])
    if pads_b == pads_e:
        return tuple(pads_b), None
    explicit = []
    for b, e in zip(reversed(pads_b), reversed(pads_e)):
        explicit += [b, e]
    return (0,) * n, explicit


@onnx_op("Conv")
def _conv(ctx, x, w, b=None):
    n = x.dim() - 2
    kernel = ctx.attr("kernel_shape") or list(w.shape[2:])
    strides = ctx.attr("strides") or [1] * n
    dil = ctx.attr("dilations") or [1] * n
    padding, explicit = _spatial_pads(ctx, tuple(x.shape), kernel, strides, dil)
    if explicit:
        x = F.pad(x, explicit)
    conv = (F.conv1d, F.conv2d, F.conv3d)[n - 1]
    return conv(x, on_device(w), on_device(b) if b is not None else None, strides, padding, dil, ctx.attr("group", 1))


@onnx_op("ConvTranspose")
def _conv_transpose(ctx, x, w, b=None):
    n = x.dim() - 2
    strides = ctx.attr("strides") or [1] * n
    dil = ctx.attr("dilations") or [1] * n
    pads = ctx.attr("pads") or [0] * (2 * n)
    out_pad = ctx.attr("output_padding") or [0] * n
    out = ctx.out_shape()
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[n - 1]
    y = conv(x, on_device(w), on_device(b) if b is not None else None, strides, tuple(pads[:n]), tuple(out_pad),
             ctx.attr("group", 1), dil)
    if out is not None and tuple(y.shape) != tuple(out):  # asymmetric pads / output_shape: crop or pad to fit
        y = y[tuple(slice(0, d) for d in out)]
    return y


@onnx_op("Gemm")
def _gemm(ctx, a, b, c=None):
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    a, b = same_device(a, b)
    if ctx.attr("transA", 0):
        a = a.t()
    if ctx.attr("transB", 0) and alpha == 1.0 and beta == 1.0 and (c is None or c.dim() <= 1):
        return F.linear(a, b, on_device(c) if c is not None else None)  # nn.Linear's call: addmm
    if ctx.attr("transB", 0):
        b = b.t()
    if c is None:
        return torch.mm(a, b) * alpha if alpha != 1.0 else torch.mm(a, b)
    return torch.addmm(on_device(c), a, b, beta=beta, alpha=alpha)


@onnx_op("MatMul")
def _matmul(ctx, a, b):
    return torch.matmul(*same_device(a, b))


# ----------------------------------------------------------------------------- normalisation
@onnx_op("BatchNormalization")
def _batch_norm(ctx, x, scale, bias, mean, var):
    if ctx.training and ctx.state is not None:
        ctx.state.add_(1)  # nn.BatchNorm's num_batches_tracked += 1, one tiny kernel per layer and step
    y = F.batch_norm(x, on_device(mean), on_device(var), on_device(scale), on_device(bias), training=ctx.training,
                     momentum=1 - ctx.attr("momentum", 0.9), eps=ctx.attr("epsilon", 1e-5))
    return (y, mean, var) if ctx.n_outputs() > 1 else y


@onnx_op("InstanceNormalization")
def _instance_norm(ctx, x, scale, bias):
    return F.instance_norm(x, weight=on_device(scale), bias=on_device(bias), eps=ctx.attr("epsilon", 1e-5))


@onnx_op("LayerNormalization")
def _layer_norm(ctx, x, scale, bias=None):
    axis = ctx.attr("axis", -1) % x.dim()
    y = F.layer_norm(x, tuple(x.shape[axis:]), on_device(scale), on_device(bias) if bias is not None else None,
                     eps=ctx.attr("epsilon", 1e-5))
    return (y,) + (None,) * (len(ctx.node.output) - 1)


@onnx_op("GroupNormalization")
def _group_norm(ctx, x, scale, bias):
    groups = ctx.attr("num_groups")
    scale, bias = on_device(scale), on_device(bias)
    if scale.shape[0] != x.shape[1]:  # opset 18's per-group scale: one value per channel in torch
        scale = scale.repeat_interleave(x.shape[1] // groups)
        bias = bias.repeat_interleave(x.shape[1] // groups)
    return F.group_norm(x, groups, scale, bias, eps=ctx.attr("epsilon", 1e-5))


@onnx_op("RMSNormalization")
def _rms_norm(ctx, x, scale):
    axis = ctx.attr("axis", -1) % x.dim()
    return F.rms_norm(x, tuple(x.shape[axis:]), on_device(scale), eps=ctx.attr("epsilon", 1e-5))


@onnx_op("LpNormalization")
def _lp_norm(ctx, x):
    return F.normalize(x, p=ctx.attr("p", 2), dim=ctx.attr("axis", -1))


def _softmax(fn):
    def op(ctx, x):
        axis = ctx.attr("axis", -1 if ctx.opset >= 13 else 1) % x.dim()
        if ctx.opset >= 13 or axis == x.dim() - 1:
            return fn(x, axis)
        flat = x.reshape(math.prod(x.shape[:axis]), -1)  # opset < 13: over the flattened trailing dims
        return fn(flat, 1).reshape(x.shape)

    return op


onnx_op("Softmax")(_softmax(lambda x, d: F.softmax(x, d)))
onnx_op("LogSoftmax")(_softmax(lambda x, d: F.log_softmax(x, d)))


# ----------------------------------------------------------------------------- pooling and resize
def _pool_args(ctx, x):
    n = x.dim() - 2
    kernel = ctx.attr("kernel_shape")
    strides = ctx.attr("strides") or [1] * n
    dil = ctx.attr("dilations") or [1] * n
    padding, explicit = _spatial_pads(ctx, tuple(x.shape), kernel, strides, dil)
    return n, kernel, strides, dil, padding, explicit


@onnx_op("MaxPool")
def _max_pool(ctx, x):
    n, kernel, strides, dil, padding, explicit = _pool_args(ctx, x)
    if explicit:
        x = F.pad(x, explicit, value=float("-inf"))
    pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[n - 1]
    ceil = bool(ctx.attr("ceil_mode", 0))
    if ctx.n_outputs() > 1:
        return pool(x, kernel, strides, padding, dil, ceil_mode=ceil, return_indices=True)
    return pool(x, kernel, strides, padding, dil, ceil_mode=ceil)


@onnx_op("AveragePool")
def _avg_pool(ctx, x):
    n, kernel, strides, dil, padding, explicit = _pool_args(ctx, x)
    include = bool(ctx.attr("count_include_pad", 0))
    if explicit:
        x = F.pad(x, explicit)
    pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[n - 1]
    kwargs = {"ceil_mode": bool(ctx.attr("ceil_mode", 0)), "count_include_pad": include}
    return pool(x, kernel, strides, padding, **kwargs)


@onnx_op("GlobalAveragePool")
def _global_avg(ctx, x):
    n = x.dim() - 2
    return (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[n - 1](x, 1)


@onnx_op("GlobalMaxPool")
def _global_max(ctx, x):
    n = x.dim() - 2
    return (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)[n - 1](x, 1)


@onnx_op("Resize", "Upsample")
def _resize(ctx, x, *rest):
    out = ctx.out_shape()
    if out is None:
        raise NeedsValue("Resize output size")
    mode = ctx.attr("mode", "nearest")
    torch_mode = {"nearest": "nearest", "linear": ("linear", "bilinear", "trilinear")[x.dim() - 3],
                  "cubic": "bicubic"}.get(mode, "nearest")
    return F.interpolate(x, size=tuple(out[2:]), mode=torch_mode)


# ----------------------------------------------------------------------------- dropout
@onnx_op("Dropout")
def _dropout(ctx, x, ratio=None, training_mode=None):
    p = ctx.attr("ratio", 0.5) if ctx.opset < 12 else (values(ratio)[0] if is_host(ratio) else 0.5)
    y = F.dropout(x, p, training=ctx.training and p > 0)
    if ctx.n_outputs() > 1:
        return y, None
    return y


# ----------------------------------------------------------------------------- recurrence
_RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


@onnx_op("LSTM", "GRU", "RNN")
def _rnn(ctx, x, w, r, b=None, seq_lens=None, h0=None, c0=None, *peepholes):
    kind = ctx.node.op_type
    hidden = ctx.attr("hidden_size")
    dirs = 2 if ctx.attr("direction", "forward") == "bidirectional" else 1
    batch_first = bool(ctx.attr("layout", 0))
    batch = x.shape[0] if batch_first else x.shape[1]
    w, r = on_device(w), on_device(r)
    g = _RNN_GATES[kind] * hidden
    params = []
    for d in range(dirs):
        params += [w[d], r[d]]
        if b is not None:
            bd = on_device(b)[d]
            params += [bd[:g], bd[g:]]
    zeros = torch.zeros(dirs, batch, hidden, dtype=x.dtype, device=x.device)
    h0 = on_device(h0) if h0 is not None else zeros
    train = ctx.training
    if kind == "LSTM":
        c0 = on_device(c0) if c0 is not None else zeros
        y, hy, cy = torch._VF.lstm(x, (h0, c0), params, b is not None, 1, 0.0, train, dirs == 2, batch_first)
    else:
        name = "gru" if kind == "GRU" else ("rnn_relu" if "Relu" in (ctx.attr("activations") or []) else "rnn_tanh")
        y, hy = getattr(torch._VF, name)(x, h0, params, b is not None, 1, 0.0, train, dirs == 2, batch_first)
        cy = None
    t = y.shape[1] if batch_first else y.shape[0]
    if batch_first:  # ONNX layout 1: Y is [batch, seq, dirs, hidden]
        y = y.view(batch, t, dirs, hidden)
    else:  # ONNX layout 0: Y is [seq, dirs, batch, hidden]
        y = y.view(t, batch, dirs, hidden).permute(0, 2, 1, 3)
    outs = (y, hy, cy) if kind == "LSTM" else (y, hy)
    return outs[:len(ctx.node.output)]


# ----------------------------------------------------------------------------- attention
@onnx_op("Attention")
def _attention(ctx, q, k, v, mask=None, past_k=None, past_v=None):
    if q.dim() != 4:
        raise NeedsValue("Attention on 3-D inputs (heads folded into the hidden size)")
    q, k, v = same_device(q, k, v)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=on_device(mask) if mask is not None else None,
                                       is_causal=bool(ctx.attr("is_causal", 0)), scale=ctx.attr("scale"))
    return (y,) + (None,) * (len(ctx.node.output) - 1)


# ----------------------------------------------------------------------------- losses
@onnx_op("SoftmaxCrossEntropyLoss")
def _sce_loss(ctx, scores, labels, weights=None):
    reduction = ctx.attr("reduction", "mean")
    scores = scores.reshape(scores.shape[0], scores.shape[1], -1) if scores.dim() > 2 else scores
    labels = on_device(labels).reshape(labels.shape[0], -1) if labels.dim() > 1 else on_device(labels)
    loss = F.cross_entropy(scores, labels.long(), reduction=reduction)
    return (loss,) + ((None,) if len(ctx.node.output) > 1 else ())


@onnx_op("NegativeLogLikelihoodLoss")
def _nll_loss(ctx, x, target, weight=None):
    return F.nll_loss(x, on_device(target).long(), reduction=ctx.attr("reduction", "mean"))
