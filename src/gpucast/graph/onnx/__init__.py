"""ONNX models in: read a file safely, bind its shapes, and hand it to the core tracer.

``factories(job)`` gives the model, input and loss factories of an ``onnx:<path>`` job (this
package registers it as the ``onnx`` model source, :mod:`gpucast.model_sources`); the core then
captures one step (forward, loss, backward, optimizer) exactly as for a PyTorch module. See
``reader`` (what is refused and how shapes are bound), ``base`` (how ONNX nodes are costed),
``ops_tensor``/``ops_shape``/``ops_nn`` (the operator table), ``custom`` (the default for unknown
ops) and ``module`` (weights, losses).
"""

from __future__ import annotations

from gpucast.graph.onnx.reader import MAX_ONNX_BYTES, OnnxError, load
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
    from gpucast.graph.onnx import ops_nn, ops_shape, ops_tensor  # noqa: F401
    from gpucast.graph.onnx.base import registered

    return registered()


register(Source("onnx", factories))

__all__ = ["MAX_ONNX_BYTES", "OnnxError", "factories", "load", "supported_ops"]
