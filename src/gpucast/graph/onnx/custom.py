"""The conservative default for ONNX nodes no rule knows (custom domains, control flow,
operators not in :mod:`gpucast.graph.onnx.base`'s registry).

Such a node becomes one ``gpucast::onnx_node`` torch op whose outputs have the shapes ONNX's
shape inference found (or, for a custom-domain op where it found none, the first input's shape
and dtype; a standard operator without a rule or an inferred shape, such as a ``Loop``, is an
error naming the node). The core
tracer records it as ``onnx:<OpType>`` with ``costed=False``: it reads its inputs and writes
its outputs once, launches one kernel and counts no FLOPs (``gpucast.graph.rules``' default
cost), and it is listed among the trace's uncosted ops. In training its backward is one more
such op per node, reading the output gradients and inputs and writing the input gradients.
Nothing is dropped; a prediction with such ops says so (``op_coverage`` below 1).
"""

from __future__ import annotations

import torch

from gpucast.graph.onnx.base import DTYPES

_DTYPE_CODE = {v: k for k, v in DTYPES.items()}


def _outputs(inputs, dims, ranks, dtypes) -> list[torch.Tensor]:
    device = inputs[0].device if inputs else torch.device("meta")
    out, at = [], 0
    for rank, code in zip(ranks, dtypes):
        out.append(torch.empty(dims[at:at + rank], dtype=DTYPES[code], device=device))
        at += rank
    return out


# Output shapes travel flattened (``dims``, with each output's rank in ``ranks``): custom-op
# schemas take no nested lists.
@torch.library.custom_op("gpucast::onnx_node", mutates_args=())
def _onnx_node(inputs: list[torch.Tensor], op_type: str, dims: list[int], ranks: list[int],
               dtypes: list[int]) -> list[torch.Tensor]:
    return _outputs(inputs, dims, ranks, dtypes)


@_onnx_node.register_fake
def _fake(inputs, op_type, dims, ranks, dtypes):
    return _outputs(inputs, dims, ranks, dtypes)


def onnx_node(inputs, op_type: str, shapes: list, dtypes: list[int]) -> list[torch.Tensor]:
    return _onnx_node(inputs, op_type, [d for s in shapes for d in s], [len(s) for s in shapes], dtypes)


def _setup(ctx, inputs, output):
    ins = inputs[0]
    ctx.op_type = inputs[1]
    ctx.in_meta = [(list(t.shape), _DTYPE_CODE.get(t.dtype, 1), t.is_floating_point()) for t in ins]
    ctx.save_for_backward(*ins)


def _backward(ctx, grads):
    grads = [g for g in grads if g is not None]
    saved = list(ctx.saved_tensors)
    wanted = [m for m in ctx.in_meta if m[2]]
    outs = iter(onnx_node(grads + saved, f"{ctx.op_type}Grad", [m[0] for m in wanted], [m[1] for m in wanted]))
    return [next(outs) if m[2] else None for m in ctx.in_meta], None, None, None, None


_onnx_node.register_autograd(_backward, setup_context=_setup)


def unknown(ctx, inputs) -> tuple:
    """Run a node with the default cost (see module docstring)."""
    tensors = [t if t.device.type == "meta" else torch.empty(t.shape, dtype=t.dtype, device="meta")
               for t in inputs if isinstance(t, torch.Tensor)]
    shapes, dtypes = [], []
    for i, name in enumerate(ctx.node.output):
        shape = ctx.out_shape(i)
        dtype = ctx.out_dtype(i)
        if shape is None:
            if not tensors or ctx.node.domain in ("", "ai.onnx"):  # a standard op (Loop, If...): do not guess
                from gpucast.graph.onnx.reader import OnnxError

                raise OnnxError(f"node {ctx.node.name or ctx.node.op_type!r} ({ctx.node.op_type}) has no cost "
                                f"rule and ONNX inferred no shape for its output {name!r}")
            shape, dtype = tuple(tensors[0].shape), tensors[0].dtype
        shapes.append(list(shape))
        dtypes.append(_DTYPE_CODE.get(dtype or torch.float32, 1))
    label = ctx.node.op_type if ctx.node.domain in ("", "ai.onnx") else f"{ctx.node.domain}.{ctx.node.op_type}"
    return tuple(onnx_node(tensors, label, shapes, dtypes))
