"""Read an ONNX file safely and bind its shapes: what the ONNX path trusts and what it refuses.

Steps, each failing with one :class:`OnnxError` line (a :class:`~gpucast.job.JobError`, so the
CLI exits 2 and writes nothing):

1. **Refuse pickles.** A ``torch.save``/pickle file (``.pt``, ``.pth``, ``.pkl``, ``.bin``,
   ``.ckpt``, a zip archive or pickle bytes) is refused before anything parses it: unpickling
   runs arbitrary code. Users export to ONNX or pass a module factory instead.
2. **Size limit.** The protobuf must be at most :data:`MAX_ONNX_BYTES` (protobuf's own 2 GiB
   message limit; lower it with ``GPUCAST_ONNX_MAX_BYTES`` or ``max_bytes=``). Weights kept as
   ONNX external data are never read: only shapes and dtypes matter.
3. **Parse and check.** ``onnx.load`` (``load_external_data=False``) and ``onnx.checker`` catch
   corrupt and truncated files.
4. **Bind dimensions.** The batch dimension of each graph input (a symbolic dim named like a
   batch: ``N``, ``B``, ``batch``, ``batch_size``...; else dim 0) is set to the job's batch size;
   ``input_shape`` replaces the per-sample dims of a single image-like input; every other
   symbolic dim is bound to ``seq_len``. A symbolic dim left over is an error naming it.
5. **Infer shapes.** ``onnx.shape_inference.infer_shapes`` in strict mode with data propagation;
   an inconsistency ("shapes that do not fit") is an error naming the node.

Not done here: costing (``gpucast.graph.onnx.ops`` turns nodes into torch ops, which the core
tracer costs) and any execution of the graph's weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gpucast import imports
from gpucast.job import JobError

# Protobuf refuses to parse a message over 2 GiB (its int32 size limit); ONNX moves larger
# weights to external data files, which this reader never opens.
MAX_ONNX_BYTES = int(os.environ.get("GPUCAST_ONNX_MAX_BYTES", (1 << 31) - 1))
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt", ".joblib", ".npy", ".npz")
_PICKLE_WHY = ("unpickling runs arbitrary code, so gpucast never loads one; export the model with "
               "torch.onnx.export, or pass its factory with --module FILE.py:FUNCTION")


class OnnxError(JobError):
    """An ONNX file gpucast will not or cannot read; one line."""


@dataclass
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: int  # onnx.TensorProto element type


@dataclass
class OnnxGraph:
    """A parsed, shape-bound ONNX model (``onnx.ModelProto`` with inferred ``value_info``)."""

    model: object
    path: str
    inputs: list[InputSpec]
    opset: int
    shapes: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    dtypes: dict[str, int] = field(default_factory=dict)
    static_batch: int | None = None  # the batch size a static-shape file was exported with, if rebound

    def batch_hint(self) -> str:
        if self.static_batch is None:
            return ""
        return (f" (the file was exported with a static batch size of {self.static_batch}: export it with a "
                f"dynamic batch axis, or use --batch-size {self.static_batch})")


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1 << 20 else f"{n / 2**20:.1f} MiB"


def _short(path) -> str:
    return repr(os.fspath(path))


def refuse_pickle(path: Path, head: bytes) -> None:
    is_pickle = len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5
    is_zip = head.startswith(b"PK\x03\x04")  # torch.save's default format is a zip of pickles
    if path.suffix.lower() in PICKLE_SUFFIXES or is_pickle or is_zip:
        kind = "a PyTorch/pickle checkpoint" if (is_pickle or is_zip) else f"a {path.suffix} file"
        raise OnnxError(f"refusing {_short(path)}: it is {kind}; {_PICKLE_WHY}")


def read(path: str | os.PathLike, *, max_bytes: int | None = None):
    """The file's ``onnx.ModelProto``, after the pickle, size and integrity checks."""
    onnx = imports.load("onnx")  # the first import of onnx, under the import lock (gpucast.imports)
    from google.protobuf.message import DecodeError

    path = Path(path)
    limit = MAX_ONNX_BYTES if max_bytes is None else max_bytes
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise OnnxError(f"ONNX model {_short(path)} is not a file")
        with open(path, "rb") as f:
            head = f.read(8)
    except OnnxError:
        raise
    except OSError as exc:
        raise OnnxError(f"cannot read ONNX model {_short(path)}: {exc.strerror or type(exc).__name__}") from None
    refuse_pickle(path, head)
    if size > limit:
        raise OnnxError(f"ONNX model {_short(path)} is {_size(size)}, over the limit of {_size(limit)} "
                        f"(keep weights as ONNX external data, or raise GPUCAST_ONNX_MAX_BYTES)")
    if size == 0:
        raise OnnxError(f"ONNX model {_short(path)} is empty")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OnnxError(f"{_short(path)} is not a valid ONNX model (corrupt or truncated?): {first}") from None
    if not model.graph.node:
        raise OnnxError(f"{_short(path)} is not a valid ONNX model (corrupt or truncated?): its graph has no nodes")
    try:
        onnx.checker.check_model(_checkable(model))
    except Exception as exc:  # onnx.checker.ValidationError and friends
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OnnxError(f"{_short(path)} is not a valid ONNX model (corrupt or truncated?): {first}") from None
    return model


def _checkable(model):
    """The model as the checker can see it without the external data files: weights stored
    outside the protobuf become typed graph inputs of the same shape (a copy; the protobuf
    without its weights is small). Their data is never needed to cost the graph."""
    import onnx
    from onnx import helper

    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    kept = [t for t in copy.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    del copy.graph.initializer[:]
    copy.graph.initializer.extend(kept)
    names = {i.name for i in copy.graph.input}
    copy.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                            for t in external if t.name not in names)
    return copy


def opset_of(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def graph_inputs(model) -> list:
    """Inputs that are data, not weights (old exporters list initializers as inputs too)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def bind(model, batch_size: int, input_shape: tuple[int, ...] | None = None, seq_len: int | None = None) -> int | None:
    """Set every graph input's dims in place (see the module docstring, step 4). Returns the
    static batch size the file was exported with when it differs from ``batch_size``, else None."""
    inputs = graph_inputs(model)
    if not inputs:
        raise OnnxError("the ONNX graph has no inputs to bind the batch size to")
    floats = [i for i in inputs if _elem_type(i) in _FLOAT_TYPES]
    rebound = False  # a static dim changed: the exporter's recorded shapes no longer hold
    static_batch = None
    if input_shape is not None and len(floats) != 1:
        raise OnnxError(f"--input-shape applies to a graph with one floating input; this one has "
                        f"{len(floats)} ({', '.join(i.name for i in floats) or 'none'})")
    for inp in inputs:
        dims = inp.type.tensor_type.shape.dim
        if len(dims) == 0:
            continue  # a scalar input
        b = next((k for k, d in enumerate(dims) if _is_batch_name(d.dim_param)), 0)
        if input_shape is not None and inp is floats[0]:
            if len(input_shape) != len(dims) - 1:
                raise OnnxError(f"input {inp.name!r} has rank {len(dims)}: --input-shape needs {len(dims) - 1} "
                                f"per-sample dims, got {','.join(map(str, input_shape))}")
            for d, v in zip(dims[1:], input_shape):
                rebound |= d.HasField("dim_value") and d.dim_value != v
                d.ClearField("dim_param")
                d.dim_value = v
        if dims[b].HasField("dim_value") and dims[b].dim_value not in (0, batch_size):
            rebound = True
            static_batch = dims[b].dim_value
        dims[b].ClearField("dim_param")
        dims[b].dim_value = batch_size
        for k, d in enumerate(dims):
            if k == b or (d.HasField("dim_value") and d.dim_value > 0):
                continue
            if seq_len is None:
                label = d.dim_param or "?"
                raise OnnxError(f"input {inp.name!r} dim {k} ({label!r}) is symbolic: pass --seq-len "
                                f"(or --input-shape) to bind it")
            d.ClearField("dim_param")
            d.dim_value = seq_len
    if rebound:  # let inference recompute every shape from the new inputs
        del model.graph.value_info[:]
        for out in model.graph.output:
            out.type.tensor_type.ClearField("shape")
    return static_batch


def _is_batch_name(name: str) -> bool:
    n = name.lower()
    return n in ("n", "b", "bs", "batch", "batch_size", "batchsize", "nbatch") or "batch" in n


_FLOAT_TYPES = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _elem_type(value_info) -> int:
    return value_info.type.tensor_type.elem_type


def _shape_of(value_info) -> tuple[int, ...] | None:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(d.dim_value)
    return tuple(dims)


def infer(model) -> tuple[object, dict, dict]:
    """Strict shape inference; returns (model, name -> shape or None, name -> elem type)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:  # onnx.shape_inference.InferenceError
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        first = lines[0] if lines else type(exc).__name__
        raise OnnxError(f"the ONNX graph's shapes do not fit with these inputs: {first}"[:400]) from None
    shapes, dtypes = {}, {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        shapes[vi.name] = _shape_of(vi)
        dtypes[vi.name] = _elem_type(vi)
    for init in g.initializer:
        shapes[init.name] = tuple(init.dims)
        dtypes[init.name] = init.data_type
    return inferred, shapes, dtypes


def load(path, *, batch_size: int, input_shape=None, seq_len=None, max_bytes=None) -> OnnxGraph:
    """Read, check, bind and infer: the graph ready for :class:`gpucast.graph.onnx.module.OnnxModule`."""
    model = read(path, max_bytes=max_bytes)
    static_batch = bind(model, batch_size, input_shape, seq_len)
    try:
        model, shapes, dtypes = infer(model)
    except OnnxError as exc:
        hint = OnnxGraph(None, "", [], 0, static_batch=static_batch).batch_hint()
        raise OnnxError(f"{exc}{hint}") from None
    inputs = [InputSpec(i.name, _shape_of(i), _elem_type(i)) for i in graph_inputs(model)]
    return OnnxGraph(model=model, path=os.fspath(path), inputs=inputs, opset=opset_of(model),
                     shapes=shapes, dtypes=dtypes, static_batch=static_batch)
