"""ONNX elementwise, logic, random, constant and reduction operators as torch calls (the shape,
indexing and layout operators are in :mod:`gpucast.graph.onnx.ops_shape`).

Semantics follow the ONNX operator specification (onnx/docs/Operators.md) for opsets 7-23
where they affect shapes or costs; numerical details that cannot change a cost (rounding
modes, NaN propagation) are not reproduced. Broadcasting is numpy's in both libraries.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gpucast.graph.onnx.base import DTYPES, HOST_CONST_ELEMS, NeedsValue, is_host, on_device, onnx_op, \
    same_device, values


# ----------------------------------------------------------------------------- elementwise
def _binary(fn):
    def op(ctx, a, b):
        a, b = same_device(a, b)
        return fn(a, b)

    return op


onnx_op("Add")(_binary(torch.add))
onnx_op("Sub")(_binary(torch.sub))
onnx_op("Mul")(_binary(torch.mul))
onnx_op("Pow")(_binary(torch.pow))
onnx_op("Equal")(_binary(torch.eq))
onnx_op("Less")(_binary(torch.lt))
onnx_op("LessOrEqual")(_binary(torch.le))
onnx_op("Greater")(_binary(torch.gt))
onnx_op("GreaterOrEqual")(_binary(torch.ge))
onnx_op("And")(_binary(torch.logical_and))
onnx_op("Or")(_binary(torch.logical_or))
onnx_op("Xor")(_binary(torch.logical_xor))
onnx_op("BitwiseAnd")(_binary(torch.bitwise_and))
onnx_op("BitwiseOr")(_binary(torch.bitwise_or))
onnx_op("PRelu")(_binary(lambda x, s: torch.where(x >= 0, x, x * s)))


@onnx_op("Div")
def _div(ctx, a, b):
    a, b = same_device(a, b)
    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")  # ONNX integer division truncates
    return torch.div(a, b)


@onnx_op("Mod")
def _mod(ctx, a, b):
    a, b = same_device(a, b)
    return torch.fmod(a, b) if ctx.attr("fmod", 0) else torch.remainder(a, b)


_UNARY = {
    "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Exp": torch.exp, "Log": torch.log,
    "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal, "Neg": torch.neg, "Abs": torch.abs, "Erf": torch.erf,
    "Floor": torch.floor, "Ceil": torch.ceil, "Round": torch.round, "Sign": torch.sign, "Sin": torch.sin,
    "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan,
    "Sinh": torch.sinh, "Cosh": torch.cosh, "Not": torch.logical_not, "IsNaN": torch.isnan,
    "IsInf": torch.isinf, "Softsign": F.softsign, "Mish": F.mish, "HardSwish": F.hardswish,
    "BitwiseNot": torch.bitwise_not,
}
for _name, _fn in _UNARY.items():
    onnx_op(_name)(lambda ctx, x, _fn=_fn: _fn(x))


@onnx_op("Swish")
def _swish(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return F.silu(x) if alpha == 1.0 else x * torch.sigmoid(x * alpha)


@onnx_op("LeakyRelu")
def _leaky(ctx, x):
    return F.leaky_relu(x, ctx.attr("alpha", 0.01))


@onnx_op("Elu")
def _elu(ctx, x):
    return F.elu(x, ctx.attr("alpha", 1.0))


@onnx_op("Selu")
def _selu(ctx, x):
    return F.selu(x)


@onnx_op("Celu")
def _celu(ctx, x):
    return F.celu(x, ctx.attr("alpha", 1.0))


@onnx_op("ThresholdedRelu")
def _thresholded(ctx, x):
    return F.threshold(x, ctx.attr("alpha", 1.0), 0.0)


@onnx_op("HardSigmoid")
def _hardsigmoid(ctx, x):
    alpha, beta = ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)
    if math.isclose(alpha, 1 / 6, rel_tol=1e-4) and math.isclose(beta, 0.5):
        return F.hardsigmoid(x)  # PyTorch's own hardsigmoid exports with these constants
    return torch.clamp(x * alpha + beta, 0.0, 1.0)


@onnx_op("Softplus")
def _softplus(ctx, x):
    return F.softplus(x)


@onnx_op("Gelu")
def _gelu(ctx, x):
    return F.gelu(x, approximate=ctx.attr("approximate", "none"))


@onnx_op("Clip")
def _clip(ctx, x, lo=None, hi=None):
    if ctx.opset < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
    else:
        lo = values(lo)[0] if is_host(lo) else lo
        hi = values(hi)[0] if is_host(hi) else hi
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        return torch.clamp(x, *same_device(lo, hi))
    if lo is not None and hi is not None:
        return F.hardtanh(x, lo, hi)  # clamp with both bounds; nn.ReLU6 exports as Clip(0, 6)
    return torch.clamp(x, lo, hi)


@onnx_op("Where")
def _where(ctx, c, a, b):
    c, a, b = same_device(c, a, b)
    return torch.where(c, a, b)


def _variadic(fn):
    def op(ctx, *xs):
        xs = same_device(*xs)
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out

    return op


onnx_op("Max")(_variadic(torch.maximum))
onnx_op("Min")(_variadic(torch.minimum))
onnx_op("Sum")(_variadic(torch.add))


@onnx_op("Mean")
def _mean(ctx, *xs):
    return _variadic(torch.add)(ctx, *xs) / len(xs)


@onnx_op("Cast")
def _cast(ctx, x):
    return x.to(DTYPES[ctx.attr("to")])


@onnx_op("CastLike")
def _cast_like(ctx, x, like):
    return x.to(like.dtype)


@onnx_op("Identity")
def _identity(ctx, x):
    return x


# ----------------------------------------------------------------------------- random
@onnx_op("RandomUniformLike")
def _rand_like(ctx, x):
    x = on_device(x)  # noise feeds GPU math: it is drawn on the GPU
    return torch.rand_like(x, dtype=ctx.out_dtype() or x.dtype)


@onnx_op("RandomNormalLike")
def _randn_like(ctx, x):
    x = on_device(x)
    return torch.randn_like(x, dtype=ctx.out_dtype() or x.dtype)


@onnx_op("RandomUniform")
def _rand(ctx):
    return torch.rand(tuple(ctx.attr("shape")), dtype=ctx.out_dtype() or torch.float32, device="meta")


@onnx_op("RandomNormal")
def _randn(ctx):
    return torch.randn(tuple(ctx.attr("shape")), dtype=ctx.out_dtype() or torch.float32, device="meta")


@onnx_op("Bernoulli")
def _bernoulli(ctx, x):
    return torch.bernoulli(x).to(ctx.out_dtype() or x.dtype)


# ----------------------------------------------------------------------------- constants
def _from_proto(tensor_proto) -> torch.Tensor:
    """A TensorProto as a host tensor (small or integer) or a meta tensor (large float)."""
    from onnx import numpy_helper

    dtype = DTYPES.get(tensor_proto.data_type, torch.float32)
    n = math.prod(tensor_proto.dims)
    if n > HOST_CONST_ELEMS and dtype.is_floating_point:
        return torch.empty(tuple(tensor_proto.dims), dtype=dtype, device="meta")
    return torch.from_numpy(numpy_helper.to_array(tensor_proto).copy())


@onnx_op("Constant")
def _constant(ctx, *unused):
    for name, make in (("value", _from_proto), ("value_float", lambda v: torch.tensor(v, dtype=torch.float32)),
                       ("value_floats", lambda v: torch.tensor(v, dtype=torch.float32)),
                       ("value_int", lambda v: torch.tensor(v, dtype=torch.int64)),
                       ("value_ints", lambda v: torch.tensor(v, dtype=torch.int64))):
        v = ctx.attr(name)
        if v is not None:
            return make(v)
    raise NeedsValue("a Constant with a sparse or string value")


@onnx_op("ConstantOfShape")
def _constant_of_shape(ctx, shape):
    shape = ctx.out_shape() or values(shape, "shape")
    v = ctx.attr("value")
    dtype, fill = torch.float32, 0.0
    if v is not None:
        t = _from_proto(v)
        dtype, fill = t.dtype, (t.reshape(-1)[0].item() if is_host(t) else 0)
    device = "cpu" if math.prod(shape) <= HOST_CONST_ELEMS else "meta"
    return torch.full(tuple(shape), fill, dtype=dtype, device=device)


@onnx_op("Shape")
def _shape(ctx, x):
    dims = list(x.shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", len(dims))
    return torch.tensor(dims[start:end], dtype=torch.int64)


@onnx_op("Size")
def _size(ctx, x):
    return torch.tensor(x.numel(), dtype=torch.int64)


@onnx_op("Range")
def _range(ctx, start, limit, delta):
    if all(is_host(t) for t in (start, limit, delta)):
        return torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)
    n = ctx.out_shape()
    if n is None:
        raise NeedsValue("Range bounds")
    return torch.arange(n[0], dtype=start.dtype, device="meta")


# ----------------------------------------------------------------------------- reductions
def _reduce(fn):
    def op(ctx, x, axes=None):
        if ctx.opset >= 18 or (ctx.node.op_type == "ReduceSum" and ctx.opset >= 13):
            axes = values(axes, "axes") if axes is not None else None
        else:
            axes = ctx.attr("axes")
        keep = bool(ctx.attr("keepdims", 1))
        if not axes:
            if ctx.attr("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.dim()))
        return fn(x, [a % x.dim() for a in axes], keep)

    return op


onnx_op("ReduceSum")(_reduce(lambda x, a, k: torch.sum(x, a, keepdim=k)))
onnx_op("ReduceMean")(_reduce(lambda x, a, k: torch.mean(x, a, keepdim=k)))
onnx_op("ReduceMax")(_reduce(lambda x, a, k: torch.amax(x, a, keepdim=k)))
onnx_op("ReduceMin")(_reduce(lambda x, a, k: torch.amin(x, a, keepdim=k)))
onnx_op("ReduceProd")(_reduce(lambda x, a, k: x.prod(a[0], keepdim=k) if len(a) == 1 else
                              x.flatten(a[0], a[-1]).prod(a[0], keepdim=k)))
onnx_op("ReduceL2")(_reduce(lambda x, a, k: torch.linalg.vector_norm(x, 2, a, keepdim=k)))
onnx_op("ReduceL1")(_reduce(lambda x, a, k: torch.linalg.vector_norm(x, 1, a, keepdim=k)))
onnx_op("ReduceSumSquare")(_reduce(lambda x, a, k: torch.sum(x * x, a, keepdim=k)))
onnx_op("ReduceLogSumExp")(_reduce(lambda x, a, k: torch.logsumexp(x, a, keepdim=k)))


def _arg(fn):
    def op(ctx, x):
        return fn(x, ctx.attr("axis", 0), keepdim=bool(ctx.attr("keepdims", 1)))

    return op


onnx_op("ArgMax")(_arg(torch.argmax))
onnx_op("ArgMin")(_arg(torch.argmin))


@onnx_op("TopK")
def _topk(ctx, x, k):
    out = ctx.out_shape()
    axis = ctx.attr("axis", -1)
    kk = out[axis] if out is not None else values(k, "k")[0]
    r = torch.topk(x, int(kk), dim=axis, largest=bool(ctx.attr("largest", 1)), sorted=bool(ctx.attr("sorted", 1)))
    return r.values, r.indices
