"""ONNX shape-manipulation, indexing and layout operators as torch calls: reshapes and views,
squeeze/unsqueeze, concat/split/slice, expand/tile/pad, gathers and scatters, triangular masks,
cumulative sums, one-hot, einsum, depth/space rearrangements.

Semantics follow the ONNX operator specification (onnx/docs/Operators.md) for opsets 7-23
where they affect shapes or costs (the ``axes`` input of opset 13 and later included); numerical
details that cannot change a cost are not reproduced. Elementwise operators and reductions are
in :mod:`gpucast.graph.onnx.ops_tensor`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gpucast.graph.onnx.base import HOST_CONST_ELEMS, NeedsValue, is_host, on_device, onnx_op, same_device, values


# ----------------------------------------------------------------------------- shapes and views
def _target(ctx, x, shape, allowzero=0):
    if ctx.out_shape() is not None:
        return ctx.out_shape()
    dims = values(shape, "shape")
    return tuple(x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(dims))


@onnx_op("Reshape")
def _reshape(ctx, x, shape):
    return x.reshape(_target(ctx, x, shape, ctx.attr("allowzero", 0)))


@onnx_op("Flatten")
def _flatten(ctx, x):
    axis = ctx.attr("axis", 1) % max(1, x.dim()) if x.dim() else 0
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@onnx_op("Transpose")
def _transpose(ctx, x):
    perm = ctx.attr("perm") or list(range(x.dim()))[::-1]
    return x.permute(*perm)


def _axes(ctx, axes_input, x_rank=None):
    if ctx.opset >= 13 and axes_input is not None:
        return values(axes_input, "axes")
    return ctx.attr("axes")


@onnx_op("Squeeze")
def _squeeze(ctx, x, axes=None):
    axes = _axes(ctx, axes)
    if axes is None:
        return x.squeeze()
    return x.squeeze(tuple(a % x.dim() for a in axes)) if axes else x


@onnx_op("Unsqueeze")
def _unsqueeze(ctx, x, axes=None):
    axes = _axes(ctx, axes)
    rank = x.dim() + len(axes)
    for a in sorted(a % rank for a in axes):
        x = x.unsqueeze(a)
    return x


@onnx_op("Concat")
def _concat(ctx, *xs):
    xs = [x for x in same_device(*xs) if x.numel() or x.dim() > 1]
    return torch.cat(xs, dim=ctx.attr("axis"))


@onnx_op("Split")
def _split(ctx, x, split=None):
    axis = ctx.attr("axis", 0)
    sizes = values(split, "split") if split is not None else ctx.attr("split")
    if sizes is None:
        outs = [ctx.out_shape(i) for i in range(len(ctx.node.output))]
        if all(s is not None for s in outs):
            sizes = [s[axis] for s in outs]
        else:
            n = ctx.attr("num_outputs", len(ctx.node.output))
            sizes = math.ceil(x.shape[axis] / n)
    return tuple(torch.split(x, sizes, dim=axis))


@onnx_op("Slice")
def _slice(ctx, x, starts=None, ends=None, axes=None, steps=None):
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        try:
            starts, ends = values(starts, "starts"), values(ends, "ends")
            axes = values(axes, "axes") if axes is not None else None
            steps = values(steps, "steps") if steps is not None else None
        except NeedsValue:
            out = ctx.out_shape()
            if out is None:
                raise
            return x[tuple(slice(0, n) for n in out)]
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * x.dim()
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= x.dim()
        n = x.shape[a]
        if st < 0:  # torch slicing takes positive steps: flip, then slice
            flips.append(a)
            s, e, st = n - 1 - max(-1, min(n - 1, s if s >= 0 else s + n)), \
                n - 1 - max(-1, min(n - 1, e if e >= 0 else e + n)), -st
        s = max(0, min(n, s if s >= 0 else s + n))
        e = max(0, min(n, e if e >= 0 else e + n))
        index[a] = slice(s, max(s, e), st)
    if flips:
        x = torch.flip(x, flips)
    return x[tuple(index)]


@onnx_op("Expand")
def _expand(ctx, x, shape):
    target = ctx.out_shape() or torch.broadcast_shapes(tuple(x.shape), tuple(values(shape, "shape")))
    return on_device(x).expand(target) if not is_host(x) or math.prod(target) > HOST_CONST_ELEMS \
        else x.expand(target)


@onnx_op("Tile")
def _tile(ctx, x, repeats):
    out = ctx.out_shape()
    reps = [o // max(1, i) for o, i in zip(out, x.shape)] if out is not None else values(repeats, "repeats")
    return x.repeat(*reps)


@onnx_op("Pad")
def _pad(ctx, x, pads=None, value=None, axes=None):
    pads = ctx.attr("pads") if ctx.opset < 11 else values(pads, "pads")
    rank = x.dim()
    ax = values(axes, "axes") if axes is not None else list(range(rank))
    half = len(pads) // 2
    torch_pads = [0] * (2 * rank)
    for k, a in enumerate(ax):  # torch lists pads from the last dim: (last_begin, last_end, ...)
        a %= rank
        torch_pads[2 * (rank - 1 - a)] = pads[k]
        torch_pads[2 * (rank - 1 - a) + 1] = pads[half + k]
    while len(torch_pads) > 2 and torch_pads[-2:] == [0, 0]:
        torch_pads = torch_pads[:-2]
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[
        ctx.attr("mode", "constant")]
    fill = values(value)[0] if is_host(value) and value.numel() else 0.0
    return F.pad(x, torch_pads, mode=mode, value=fill) if mode == "constant" else F.pad(x, torch_pads, mode=mode)


@onnx_op("Gather")
def _gather(ctx, data, idx):
    axis = ctx.attr("axis", 0) % data.dim()
    if is_host(data) and is_host(idx):
        return torch.index_select(data, axis, idx.reshape(-1) % data.shape[axis]).reshape(
            data.shape[:axis] + idx.shape + data.shape[axis + 1:])
    if is_host(idx) and idx.dim() == 0:
        return data.select(axis, idx.item())  # a view
    if axis == 0 and data.dim() == 2 and not is_host(data):
        return F.embedding(on_device(idx), data)  # an embedding lookup, as nn.Embedding traces
    idx = on_device(idx)
    out = torch.index_select(data, axis, idx.reshape(-1))
    return out.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])


@onnx_op("GatherElements")
def _gather_elements(ctx, data, idx):
    data, idx = same_device(data, idx)
    return torch.gather(data, ctx.attr("axis", 0), idx)


@onnx_op("ScatterElements", "Scatter")
def _scatter_elements(ctx, data, idx, upd):
    data, idx, upd = same_device(data, idx, upd)
    return torch.scatter(data, ctx.attr("axis", 0), idx, upd)


@onnx_op("ScatterND")
def _scatter_nd(ctx, data, idx, upd):
    """Costed as an out-of-place copy of ``data`` plus a write of the updates (index_put)."""
    data, idx, upd = same_device(data, idx, upd)
    k = idx.shape[-1]
    flat_idx = idx.reshape(-1, k)
    index = tuple(flat_idx[:, j] for j in range(k))
    return data.index_put(index, upd.reshape((-1,) + tuple(data.shape[k:])))


@onnx_op("GatherND")
def _gather_nd(ctx, data, idx):
    data, idx = same_device(data, idx)
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    out = data[tuple(flat[:, j] for j in range(k))]
    return out.reshape(tuple(idx.shape[:-1]) + tuple(data.shape[k:]))


@onnx_op("Trilu")
def _trilu(ctx, x, k=None):
    k = values(k)[0] if is_host(k) else 0
    return torch.triu(x, k) if ctx.attr("upper", 1) else torch.tril(x, k)


@onnx_op("CumSum")
def _cumsum(ctx, x, axis):
    return torch.cumsum(x, values(axis, "axis")[0])


@onnx_op("OneHot")
def _onehot(ctx, idx, depth, vals):
    depth = values(depth, "depth")[0]
    out = F.one_hot(on_device(idx).long() % int(depth), int(depth)).to(vals.dtype)
    axis = ctx.attr("axis", -1)
    return out if axis == -1 else out.movedim(-1, axis)


@onnx_op("NonZero")
def _nonzero(ctx, x):
    if not is_host(x):
        raise NeedsValue("NonZero of a GPU tensor (its output size depends on the data)")
    return torch.nonzero(x).t()


@onnx_op("Einsum")
def _einsum(ctx, *xs):
    return torch.einsum(ctx.attr("equation"), *same_device(*xs))


@onnx_op("DepthToSpace")
def _d2s(ctx, x):
    return F.pixel_shuffle(x, ctx.attr("blocksize"))


@onnx_op("SpaceToDepth")
def _s2d(ctx, x):
    return F.pixel_unshuffle(x, ctx.attr("blocksize"))
