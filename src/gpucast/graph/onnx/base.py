"""The ONNX op registry: ONNX operators as torch calls, so the core tracer costs them.

An ONNX node is costed by running its torch equivalent on meta tensors inside the core's
capture (``gpucast.graph.tracer``): FLOPs then come from ``torch.utils.flop_counter``'s
formulas, bytes and kernels from ``gpucast.graph.rules``, and the backward pass and optimizer
step from autograd's derivative formulas (``tools/autograd/derivatives.yaml`` in PyTorch)
and the optimizer's own code -- the documented rules of how PyTorch trains that forward graph.
That is what "derive the backward pass from the forward graph" means here.

Register an implementation with ``@onnx_op("OpType", ...)``; it gets a :class:`Ctx` and the
node's inputs (torch tensors, ``None`` for an omitted optional input) and returns a tensor or a
tuple of outputs. Attributes are read with ``ctx.attr(name, default)``.

Values: tensors the step computes are meta tensors; small constants (initializers and
``Constant`` nodes of integer type or at most :data:`HOST_CONST_ELEMS` elements, ``Shape``
results) are real CPU tensors, so the shape arithmetic of exported graphs folds on the host
and launches nothing, as it does once an exporter or runtime folds it. Ops whose shape
argument is not known on the host take the shape ONNX's inference found
(:meth:`Ctx.out_shape`).

An op type without an implementation runs :func:`unknown` (see ``gpucast.graph.onnx.custom``):
a conservative default cost, named in the trace's uncosted list, never dropped.
"""

from __future__ import annotations

from typing import Callable

import torch

# Constants this small (elements) stay on the host with their values; larger ones become meta
# tensors (their values are never needed for costing).
HOST_CONST_ELEMS = 4096

# onnx.TensorProto element types -> torch dtypes.
DTYPES = {
    1: torch.float32, 2: torch.uint8, 3: torch.int8, 4: torch.uint16, 5: torch.int16, 6: torch.int32,
    7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64, 12: torch.uint32,
    13: torch.uint64, 16: torch.bfloat16,
}

OpFn = Callable[..., object]
_OPS: dict[str, OpFn] = {}


def onnx_op(*op_types: str) -> Callable[[OpFn], OpFn]:
    """Register ``fn(ctx, *inputs)`` for ONNX op types of the default domain."""

    def deco(fn: OpFn) -> OpFn:
        for t in op_types:
            _OPS[t] = fn
        return fn

    return deco


def lookup(domain: str, op_type: str) -> OpFn | None:
    if domain not in ("", "ai.onnx"):
        return None
    return _OPS.get(op_type)


def registered() -> frozenset[str]:
    return frozenset(_OPS)


class NeedsValue(Exception):
    """An op needed the value of a tensor only the GPU would know."""


class Ctx:
    """What an op implementation may ask about its node."""

    def __init__(self, node, graph, training: bool, state=None) -> None:
        self.node = node
        self.graph = graph
        self.training = training
        self.state = state  # per-node persistent tensor (the batch counter of a BatchNormalization)
        self.opset = graph.opset
        self._attrs = None

    def attr(self, name: str, default=None):
        if self._attrs is None:
            from onnx import helper

            self._attrs = {}
            for a in self.node.attribute:
                v = helper.get_attribute_value(a)
                if isinstance(v, bytes):
                    v = v.decode("utf-8", "replace")
                self._attrs[a.name] = v
        return self._attrs.get(name, default)

    def out_shape(self, i: int = 0) -> tuple[int, ...] | None:
        if i >= len(self.node.output):
            return None
        return self.graph.shapes.get(self.node.output[i])

    def out_dtype(self, i: int = 0) -> torch.dtype | None:
        if i >= len(self.node.output):
            return None
        return DTYPES.get(self.graph.dtypes.get(self.node.output[i], 0))

    def n_outputs(self) -> int:
        return sum(1 for o in self.node.output if o)


def is_host(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu"


def values(t, what: str = "value") -> list:
    """The host value of a constant input as a Python list (a NeedsValue if it is on the GPU)."""
    if t is None:
        return None
    if not is_host(t):
        raise NeedsValue(what)
    return t.reshape(-1).tolist()


def meta_like(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s shape and dtype, made without a recorded copy (constants live
    on the GPU already when a runtime executes the graph)."""
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def same_device(*ts):
    """Move host tensors to meta when any input is on meta (0-dim host tensors may stay: torch
    treats them as scalars)."""
    if not any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in ts):
        return ts
    return tuple(meta_like(t) if is_host(t) and t.dim() > 0 else t for t in ts)


def on_device(t):
    return meta_like(t) if is_host(t) else t
