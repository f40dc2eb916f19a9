"""BatchNorm in an inference step: one elementwise pass with the running statistics.

Independent reason: in eval mode PyTorch normalises with the stored mean and variance
(``batch_norm_elementwise``: no reduction over the batch), so the kernel moves its bytes as ReLU does;
the slow rates measured on our H200 (``achieved.yaml``'s ``batchnorm`` and ``batchnorm_bf16``, 0.06-0.22 of
the elementwise bandwidth) are training-mode BatchNorm's, which reduces over the batch first.
"""

from __future__ import annotations

import pytest

import gpucast
from gpucast import Job
from gpucast.graph.batchnorm import BATCH_NORM_EVAL


def _seconds_per_byte(mode: str, precision: str) -> dict[str, float]:
    ex = gpucast.explain(Job("resnet18", batch_size=64, precision=precision, mode=mode, data={"source": "device"}),
                         "h200")
    out = {"batch_norm": 0.0}
    for name in (BATCH_NORM_EVAL if mode == "infer" else "native_batch_norm", "relu_"):
        pairs = [(float(t), o.bytes) for o, t in zip(ex.trace.ops, ex.estimate.kernel_times.time)
                 if o.op == name and o.phase == "fwd"]
        out["batch_norm" if "batch_norm" in name else name] = sum(t for t, _ in pairs) / sum(b for _, b in pairs)
    return out


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16"])
def test_inference_batchnorm_moves_its_bytes_as_relu_does_and_training_batchnorm_does_not(precision):
    infer, train = _seconds_per_byte("infer", precision), _seconds_per_byte("train", precision)
    assert infer["batch_norm"] == pytest.approx(infer["relu_"], rel=0.25)
    assert train["batch_norm"] > 3 * train["relu_"]


def test_a_batchnorm_called_in_training_mode_keeps_its_name_whatever_the_step():
    import torch

    from gpucast.graph.batchnorm import batch_norm_name

    x = torch.empty(2, 3, 4, 4, device="meta")
    stats = torch.empty(3, device="meta")
    assert batch_norm_name("native_batch_norm", (x, stats, stats, stats, stats, True, 0.1, 1e-5)) == "native_batch_norm"
    assert batch_norm_name("native_batch_norm", (x, stats, stats, stats, stats, False, 0.1, 1e-5)) == BATCH_NORM_EVAL
    assert batch_norm_name("relu", (x,)) == "relu"
