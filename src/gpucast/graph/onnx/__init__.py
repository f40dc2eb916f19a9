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
from gpucast.graph.onnx.source import factories, supported_ops

__all__ = ["MAX_ONNX_BYTES", "OnnxError", "factories", "load", "supported_ops"]
