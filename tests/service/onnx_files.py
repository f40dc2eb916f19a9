"""Small ONNX files for upload tests, written with onnx.helper (no export, no torch)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def mlp_onnx_bytes(hidden: int = 64) -> bytes:
    """x[N, 32] -> Gemm(hidden) -> Relu -> Gemm(10): a valid ONNX model with a symbolic batch."""
    f32 = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f32, ["N", 32])
    y = helper.make_tensor_value_info("y", f32, ["N", 10])

    def w(name, shape):
        n = 1
        for d in shape:
            n *= d
        return helper.make_tensor(name, f32, shape, [0.0] * n)

    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "mlp", [x], [y], [w("w1", [hidden, 32]), w("b1", [hidden]), w("w2", [10, hidden]),
                                                  w("b2", [10])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()
