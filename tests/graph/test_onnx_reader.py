"""The ONNX reader's refusals and the op table's rules, on files the tests build.

Graphs are written with onnx.helper. Shapes are checked against ONNX's own shape inference (an
independent implementation of the operator specification), FLOPs against the textbook formulas.
"""

from __future__ import annotations

import pickle

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from gpucast.api import explain
from gpucast.graph.onnx import OnnxError, load
from gpucast.graph.onnx.module import OnnxModule
from gpucast.job import Job, JobError

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])


def _weights(name, shape):
    return helper.make_tensor(name, F32, shape, np.zeros(shape, np.float32).tobytes(), raw=True)


def _save(model, path):
    onnx.save(model, str(path))
    return path


@pytest.fixture
def conv_file(tmp_path):
    x = helper.make_tensor_value_info("x", F32, ["N", 3, 32, 32])
    y = helper.make_tensor_value_info("y", F32, ["N", 10])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1)]
    inits = [_weights("w", [16, 3, 3, 3]), _weights("fc_w", [10, 16]), _weights("fc_b", [10])]
    return _save(_model(nodes, [x], [y], inits), tmp_path / "conv.onnx")


def test_conv_graph_flops_follow_the_formula(conv_file):
    ex = explain(Job.from_onnx(conv_file, batch_size=4, mode="infer"), "a100-80gb")
    conv = 2 * 4 * 16 * 16 * 16 * 3 * 3 * 3  # 2 * N * Cout * Hout * Wout * Cin * k * k
    fc = 2 * 4 * 16 * 10
    assert ex.prediction.flops == conv + fc
    assert ex.prediction.parameters == 16 * 27 + 160 + 10


def test_training_adds_backward_and_optimizer(conv_file):
    ex = explain(Job.from_onnx(conv_file, batch_size=4, optimizer="adam"), "a100-80gb")
    phases = {op.phase for op in ex.trace.ops}
    assert phases == {"fwd", "loss", "bwd", "optim"}
    # Backward of a conv whose input is the graph input: only the weight gradient (2x fwd is for
    # hidden layers); of the Gemm: both gradients. So bwd FLOPs = conv + 2 * fc.
    bwd = sum(op.flops for op in ex.trace.ops if op.phase == "bwd")
    assert bwd == 2 * 4 * 16 * 16 * 16 * 27 + 2 * (2 * 4 * 16 * 10)
    assert ex.estimate.memory.breakdown["optimizer_state"] > 0


def test_shapes_match_onnx_shape_inference(tmp_path):
    """Ops with shape arithmetic: the torch side's outputs have ONNX inference's shapes."""
    x = helper.make_tensor_value_info("x", F32, ["N", 4, 10, 10])
    outs = ["pad", "sl", "s1", "s2", "rs", "tr", "mp", "ap", "red"]
    vis = [helper.make_tensor_value_info(o, F32, [None] * (2 if o == "red" else 4)) for o in outs]
    ints = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)], v)  # noqa: E731
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["pad"]),
        helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["sl"]),
        helper.make_node("Split", ["x", "split"], ["s1", "s2"], axis=1),
        helper.make_node("Resize", ["x", "", "scales"], ["rs"], mode="nearest"),
        helper.make_node("Transpose", ["x"], ["tr"], perm=[0, 2, 3, 1]),
        helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["ap"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("ReduceMean", ["x"], ["red"], axes=[2, 3], keepdims=0),
    ]
    inits = [ints("pads", [0, 0, 1, 2, 0, 0, 3, 4]), ints("st", [-1, 2]), ints("en", [-11, 9]),
             ints("ax", [2, 3]), ints("sp", [-2, 3]), ints("split", [1, 3]),
             helper.make_tensor("scales", F32, [4], [1.0, 1.0, 2.0, 2.0])]
    path = _save(_model(nodes, [x], vis, inits), tmp_path / "shapes.onnx")
    graph = load(path, batch_size=2)
    module = OnnxModule(graph).eval()
    results = module(torch.empty(2, 4, 10, 10, device="meta"))
    for name, t in zip(outs, results):
        assert tuple(t.shape) == graph.shapes[name], name


def test_lstm_node_runs_as_one_fused_rnn(tmp_path):
    x = helper.make_tensor_value_info("x", F32, [20, "N", 16])
    y = helper.make_tensor_value_info("y", F32, [None] * 4)
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=32)
    inits = [_weights("W", [1, 128, 16]), _weights("R", [1, 128, 32]), _weights("B", [1, 256])]
    path = _save(_model([node], [x], [y], inits), tmp_path / "lstm.onnx")
    ex = explain(Job.from_onnx(path, batch_size=8), "a100-80gb")
    names = [op.op for op in ex.trace.ops]
    assert names.count("_cudnn_rnn") == 1 and names.count("_cudnn_rnn_backward") == 1
    # 2 GEMMs per step (input and recurrent) of 4 gates: 2 * 20 * 8 * 128 * (16 + 32) forward
    fwd = sum(op.flops for op in ex.trace.ops if op.op == "_cudnn_rnn")
    assert fwd == 2 * 20 * 8 * 128 * (16 + 32)


def test_unknown_custom_op_is_costed_by_default_and_named(tmp_path):
    x = helper.make_tensor_value_info("x", F32, ["N", 8])
    y = helper.make_tensor_value_info("y", F32, ["N", 8])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("FancyOp", ["h"], ["f"], domain="com.example"),
             helper.make_node("Relu", ["f"], ["y"])]
    path = _save(_model(nodes, [x], [y], [_weights("w", [8, 8])],
                        extra_opsets=[helper.make_opsetid("com.example", 1)]), tmp_path / "custom.onnx")
    p = explain(Job.from_onnx(path, batch_size=4), "a100-80gb").prediction
    assert p.uncosted_ops == {"onnx:com.example.FancyOp": 1, "onnx:com.example.FancyOpGrad": 1}
    assert 0 < p.op_coverage < 1 and 0 < p.time_coverage < 1
    assert p.kernels > 0 and p.step_time_s > 0


# ----------------------------------------------------------------------------- refusals
def test_pickles_are_refused_before_parsing(tmp_path):
    pt = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), pt)
    disguised = tmp_path / "model.onnx"
    disguised.write_bytes(pickle.dumps({"a": 1}))
    for path in (pt, disguised):
        with pytest.raises(OnnxError, match="unpickling runs arbitrary code"):
            load(path, batch_size=1)


def test_corrupt_and_truncated_files(tmp_path, conv_file):
    data = conv_file.read_bytes()
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not protobuf")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for path in (bad, cut, empty):
        with pytest.raises(OnnxError, match="not a valid ONNX model|is empty"):
            load(path, batch_size=1)


def test_size_limit(conv_file):
    with pytest.raises(OnnxError, match="over the limit of 100 bytes"):
        load(conv_file, batch_size=1, max_bytes=100)


def test_symbolic_dims_need_seq_len(tmp_path):
    x = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", "T"])
    y = helper.make_tensor_value_info("y", F32, [None] * 3)
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["y"])]
    path = _save(_model(nodes, [x], [y], [_weights("emb", [100, 8])]), tmp_path / "emb.onnx")
    with pytest.raises(OnnxError, match="dim 1 \\('T'\\) is symbolic: pass --seq-len"):
        load(path, batch_size=2)
    assert load(path, batch_size=2, seq_len=7).shapes["y"] == (2, 7, 8)


def test_shapes_that_do_not_fit(conv_file):
    # ONNX's inference does not check Conv's channels; the torch side names the node.
    with pytest.raises(Exception, match=r"node .* \(Conv\): shapes do not fit"):
        explain(Job.from_onnx(conv_file, batch_size=2, input_shape=(5, 32, 32)), "a100-80gb")
    with pytest.raises(OnnxError, match="needs 3 per-sample dims"):
        load(conv_file, batch_size=2, input_shape=(32, 32))


def test_changed_file_is_refused(conv_file):
    job = Job.from_onnx(conv_file, batch_size=2)
    conv_file.write_bytes(conv_file.read_bytes() + b"\x00")
    with pytest.raises(OnnxError, match="changed since the job was made"):
        explain(job, "a100-80gb")


def test_onnx_job_key_follows_content_and_round_trips(conv_file, tmp_path):
    job = Job.from_onnx(conv_file, batch_size=2)
    assert Job.from_dict(job.to_dict()) == job
    assert job.to_dict()["model_digest"] == job.model_digest
    with pytest.raises(JobError, match="model_digest"):
        Job(model="resnet50", model_digest="0123456789abcdef")


def test_external_weights_are_never_read(tmp_path, conv_file):
    """Weights saved as ONNX external data: the reader needs only their shapes, even when the
    data file is missing (a user may copy just the .onnx)."""
    model = onnx.load(str(conv_file))
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    (tmp_path / "ext.onnx.data").unlink()
    p = explain(Job.from_onnx(path, batch_size=4, mode="infer"), "a100-80gb").prediction
    assert p.parameters == 16 * 27 + 160 + 10


def test_static_batch_file_names_its_batch(tmp_path):
    x = helper.make_tensor_value_info("x", F32, [2, 4, 4])
    y = helper.make_tensor_value_info("y", F32, [2, 16])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 16])
    path = _save(_model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [x], [y], [shape]),
                 tmp_path / "static.onnx")
    assert load(path, batch_size=2).shapes["y"] == (2, 16)
    with pytest.raises(Exception, match="exported with a static batch size of 2"):
        explain(Job.from_onnx(path, batch_size=8, mode="infer"), "a100-80gb")
