"""ONNX exports of zoo models cost what the PyTorch trace of the same model costs.

Each model is exported in the test (gpucast.graph.onnx.export_zoo: PyTorch's TorchScript
exporter, training mode, symbolic batch), read back through the ONNX path and predicted on one
GPU. The reference is the core's PyTorch trace of the same zoo workload: an independent path
(autograd over the original nn.Module) that shares only the estimator. The issue's bar: within
10%; FLOPs, which depend only on the layers' shapes, must agree within 1%, and parameter counts
exactly (they are the initializers' sizes against nn.Module.parameters()).
"""

from __future__ import annotations

import pytest

from gpucast.api import explain
from gpucast.graph.onnx.export import export_zoo
from gpucast.job import Job
from gpucast.surroundings import Data, Loop

# Both sides benchmark-style (inputs on the GPU): parity is about the graph, not the loader a
# zoo workload's script has (an ONNX file's job infers its own from its inputs).
BENCH = dict(data=Data(source="device"), loop=Loop.benchmark())

# Twelve zoo models from every family the TorchScript exporter can export in training mode.
MODELS = ("resnet18-cifar", "mobilenet-v2", "mobilenet-v3-small", "squeezenet", "shufflenet-v2",
          "efficientnet-b0", "regnet-y-400mf", "googlenet", "lstm-lm-small", "mlp-large", "pointnet", "resnet50")
BATCH = 8
GPU = "a100-80gb"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    return {name: export_zoo(name, root / f"{name}.onnx") for name in MODELS}


@pytest.mark.parametrize("name", MODELS)
def test_onnx_export_costs_like_the_pytorch_trace(name, exported):
    torch_side = explain(Job(model=name, batch_size=BATCH, **BENCH), GPU)
    onnx_side = explain(Job.from_onnx(exported[name], batch_size=BATCH, **BENCH), GPU)
    t, o = torch_side.prediction, onnx_side.prediction
    assert o.parameters == t.parameters
    assert o.flops == pytest.approx(t.flops, rel=0.01)
    assert o.step_time_s == pytest.approx(t.step_time_s, rel=0.10)
    assert o.gpu_busy_s == pytest.approx(t.gpu_busy_s, rel=0.10)
    assert o.memory_peak_bytes == pytest.approx(t.memory_peak_bytes, rel=0.10)
    assert o.op_coverage >= 0.99
    assert {op.phase for op in onnx_side.trace.ops} >= {"fwd", "loss", "bwd", "optim"}


def test_onnx_batch_dimension_is_bound_per_job(exported):
    path = exported["resnet18-cifar"]
    small = explain(Job.from_onnx(path, batch_size=4), GPU).prediction
    large = explain(Job.from_onnx(path, batch_size=32), GPU).prediction
    fwd_bwd = lambda p: p.flops  # noqa: E731  optimizer FLOPs are 0 for SGD; all FLOPs scale with batch
    assert fwd_bwd(large) == pytest.approx(8 * fwd_bwd(small), rel=1e-6)
    assert large.memory_peak_bytes > small.memory_peak_bytes


def test_inference_job_has_no_backward(exported):
    ex = explain(Job.from_onnx(exported["mobilenet-v2"], batch_size=BATCH, mode="infer"), GPU)
    assert {op.phase for op in ex.trace.ops} == {"fwd"}
    assert not any(op.op.startswith("native_dropout") for op in ex.trace.ops)
