"""An ONNX graph as an ``nn.Module`` on the meta device, so the core tracer captures its step.

Weights: floating-point initializers with more than one element are parameters (trainable),
except the running mean and variance of ``BatchNormalization``, which are buffers. Integer
initializers and one-element floats are host constants with their values (shape arithmetic
needs them). Every parameter is a meta tensor: a 7B-parameter ONNX model costs no memory.
A floating constant baked into the graph as an initializer (a positional-encoding table, a
mask) is counted as a parameter; ONNX does not say which tensors a trainer updates.

Host time: the tracer charges Python time per module call; :func:`module_count` recovers how
many modules the exported model called from the node names.

``forward`` runs the nodes in the file's (topological) order, after the rewrites of
:mod:`gpucast.graph.onnx.fuse`, with the op registry
(:mod:`gpucast.graph.onnx.base`), frees each value after its last use (as eager PyTorch frees
temporaries, so the memory timeline matches), and returns the graph's outputs.

The default loss of an ONNX training job (:func:`onnx_loss`): a graph that already ends in a
scalar (its loss) back-propagates that; logits ``(N, C)`` or ``(N, T, V)`` get cross-entropy
against random targets (classification and language models); anything else the mean of
squares (``gpucast.zoo.default_loss``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gpucast.graph.onnx import ops_nn, ops_shape, ops_tensor  # noqa: F401  (registers the op table)
from torch.utils._python_dispatch import _disable_current_modes

from gpucast.graph.onnx.base import DTYPES, HOST_CONST_ELEMS, Ctx, NeedsValue, is_host, lookup
from gpucast.graph.onnx.custom import unknown
from gpucast.graph.onnx.fuse import fuse
from gpucast.graph.onnx.reader import OnnxError, OnnxGraph

# Integer initializers larger than this many elements are kept as meta tensors (index tables).
_HOST_INT_ELEMS = 1 << 20


class OnnxModule(nn.Module):
    def __init__(self, graph: OnnxGraph) -> None:
        super().__init__()
        self.graph = graph
        g = graph.model.graph
        self.nodes = fuse(list(g.node))
        bn_stats = {n.input[i] for n in g.node if n.op_type == "BatchNormalization" for i in (3, 4) if i < len(n.input)}
        self.weights = nn.ParameterList()
        self._param_index: dict[str, int] = {}
        self._buffer_names: dict[str, str] = {}
        self._consts: dict[str, torch.Tensor] = {}
        for init in g.initializer:
            dtype = DTYPES.get(init.data_type, torch.float32)
            shape = tuple(init.dims)
            n = math.prod(shape)
            if dtype.is_floating_point and n > 1:
                t = torch.empty(shape, dtype=dtype, device="meta")
                if init.name in bn_stats:
                    key = f"buf{len(self._buffer_names)}"
                    self.register_buffer(key, t)
                    self._buffer_names[init.name] = key
                else:
                    self._param_index[init.name] = len(self.weights)
                    self.weights.append(nn.Parameter(t))
            elif n > _HOST_INT_ELEMS or (dtype.is_floating_point and n > HOST_CONST_ELEMS) or init.data_location == 1:
                # (data_location 1: ONNX external data, never read)
                self._consts[init.name] = torch.empty(shape, dtype=dtype, device="meta")
            else:
                from onnx import numpy_helper

                self._consts[init.name] = torch.from_numpy(numpy_helper.to_array(init).copy())
        self._counters: dict[int, str] = {}
        for i, node in enumerate(self.nodes):
            if node.op_type == "BatchNormalization":
                self._counters[i] = f"count{i}"
                self.register_buffer(f"count{i}", torch.zeros((), dtype=torch.long, device="meta"))
        self.gpucast_module_count = module_count(g)
        outputs = {o.name for o in g.output}
        self._last_use: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            for name in node.input:
                if name:
                    self._last_use[name] = i
        self._free_after: list[list[str]] = [[] for _ in self.nodes]
        for name, i in self._last_use.items():
            if name not in outputs:
                self._free_after[i].append(name)

    def _value(self, env, name):
        if not name:
            return None
        if name in env:
            return env[name]
        if name in self._param_index:
            return self.weights[self._param_index[name]]
        if name in self._buffer_names:
            return getattr(self, self._buffer_names[name])
        if name in self._consts:
            return self._consts[name]
        raise OnnxError(f"the ONNX graph uses {name!r} before any node produces it")

    def forward(self, *inputs):
        g = self.graph.model.graph
        env: dict[str, torch.Tensor] = {spec.name: t if isinstance(t, torch.Tensor) else torch.tensor(t)
                                        for spec, t in zip(self.graph.inputs, inputs)}
        for i, node in enumerate(self.nodes):
            args = [self._value(env, n) for n in node.input]
            counter = self._counters.get(i)
            ctx = Ctx(node, self.graph, self.training, getattr(self, counter) if counter else None)
            fn = lookup(node.domain, node.op_type)
            try:
                if fn is not None and _folds_on_host(node, args):
                    with _disable_current_modes():  # shape arithmetic: not part of the step
                        out = fn(ctx, *args)
                else:
                    out = fn(ctx, *args) if fn is not None else unknown(ctx, args)
            except NeedsValue:
                out = unknown(ctx, args)
            except (RuntimeError, ValueError, IndexError, TypeError) as exc:
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise OnnxError(f"node {node.name or i!s} ({node.op_type}): shapes do not fit: {msg[:200]}"
                                f"{self.graph.batch_hint()}") from None
            if not isinstance(out, (tuple, list)):
                out = (out,)
            for name, value in zip(node.output, out):
                if name and value is not None:
                    env[name] = value
            for name in self._free_after[i]:
                env.pop(name, None)
        outs = tuple(env.get(o.name) for o in g.output)
        return outs[0] if len(outs) == 1 else outs


_ALWAYS_HOST = frozenset({"Shape", "Size", "Constant"})
_NEVER_HOST = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli",
                         "ConstantOfShape", "Range", "Dropout"})


def _folds_on_host(node, args) -> bool:
    """Shape arithmetic an exporter or runtime folds away: ``Shape``/``Size``/``Constant``, and
    any deterministic node whose inputs are all host constants. It runs outside the recorder
    (no op, no host time), as the Python integers of the eager model it came from would."""
    if node.op_type in _ALWAYS_HOST:
        return True
    if node.op_type in _NEVER_HOST:
        return False
    tensors = [a for a in args if a is not None]
    return bool(tensors) and all(is_host(a) for a in tensors)


def module_count(g) -> int:
    """How many ``nn.Module`` calls the exported model made per forward (the host pays Python
    time for each): PyTorch's exporters name nodes by module scope (``/layer1/layer1.0/conv1/Conv``),
    so count the distinct scopes, plus the root. A graph without scoped names counts one module
    per node that holds weights (each was a layer of some framework)."""
    scopes = set()
    for node in g.node:
        parts = node.name.split("/")[1:-1] if node.name.startswith("/") else []
        for k in range(1, len(parts) + 1):
            scopes.add("/".join(parts[:k]))
    if scopes:
        return len(scopes) + 1
    inits = {i.name for i in g.initializer}
    return 1 + sum(1 for n in g.node if any(x in inits for x in n.input[1:]))


def onnx_inputs(graph: OnnxGraph, batch_size: int) -> tuple:
    """One tensor per graph input, with the bound shapes (values never matter on meta)."""
    out = []
    for spec in graph.inputs:
        if spec.shape is None:
            raise OnnxError(f"input {spec.name!r} has no static shape after binding")
        dtype = DTYPES.get(spec.dtype, torch.float32)
        if spec.shape == () and not dtype.is_floating_point:
            # A scalar integer input is an option, not data (HF's logits_to_keep, a step count):
            # passed as a host value, 0 (the exporter's example value), so shape arithmetic folds.
            out.append(0)
        elif dtype.is_floating_point:
            out.append(torch.randn(spec.shape, dtype=dtype))
        else:
            out.append(torch.zeros(spec.shape, dtype=dtype))
    return tuple(out)


def onnx_loss(output, inputs):
    """The default training loss of an ONNX graph (see module docstring)."""
    import torch.nn.functional as F

    from gpucast.zoo.base import default_loss, first_tensor

    out = first_tensor(output)
    if out.numel() == 1:
        return out.float().sum()
    if out.dim() in (2, 3):
        logits = out.float().reshape(-1, out.shape[-1])
        target = torch.randint(0, out.shape[-1], (logits.shape[0],), device=out.device)
        return F.cross_entropy(logits, target)
    return default_loss(output, inputs)
