"""The ``onnx`` model source: an ``onnx:<path>`` job's model, input and loss factories (the file checked
against the job's digest, its shapes bound to the job's batch), and the op types with a cost rule; the package's
docstring, :mod:`gpucast.graph.onnx`, says what is read and how."""

from __future__ import annotations

from gpucast.graph.onnx.reader import OnnxError, load
from gpucast.model_sources import Built, Source, register


def factories(job):
    from gpucast.graph.onnx.module import OnnxModule, onnx_inputs, onnx_loss
    from gpucast.job import file_digest

    if file_digest(job.onnx_path) != job.model_digest:
        raise OnnxError(f"ONNX model {str(job.onnx_path)!r} changed since the job was made "
                        f"(sha256 {job.model_digest} expected); make the job again")
    graph = load(job.onnx_path, batch_size=job.batch_size, input_shape=job.input_shape, seq_len=job.seq_len)

    def input_fn(batch_size: int):
        if batch_size != job.batch_size:
            raise OnnxError(f"the ONNX graph was bound to batch size {job.batch_size}, not {batch_size}")
        return onnx_inputs(graph, batch_size)

    return Built(lambda: OnnxModule(graph), input_fn, onnx_loss)


def supported_ops() -> frozenset[str]:
    """ONNX op types (default domain) with a cost rule."""
    from gpucast.graph.onnx import ops_nn, ops_shape, ops_tensor  # noqa: F401  (they register the op table)
    from gpucast.graph.onnx.base import registered

    return registered()


register(Source("onnx", factories))
