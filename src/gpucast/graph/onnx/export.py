"""Export a zoo workload to an ONNX file: test material for the ONNX path, and a file users can
read with other tools.

The model is built on the CPU with random weights and exported in training mode with PyTorch's
TorchScript exporter (``torch.onnx.export(..., dynamo=False, training=TRAINING)``), which keeps
``BatchNormalization`` and ``Dropout`` as training nodes, with a symbolic batch dimension on every
input, so one file serves every batch size. (The dynamo exporter folds batch norm into the
convolutions, which changes what training costs.) Not every zoo model exports: the TorchScript
exporter refuses multi-layer RNNs with dropout in training mode and non-divisible adaptive
pooling; those raise the exporter's own error.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path


def export_zoo(name: str, path: str | os.PathLike, *, batch_size: int = 2, opset: int | None = None) -> Path:
    """Write zoo workload ``name`` as ONNX to ``path`` (atomically); returns the path."""
    import torch

    from gpucast.job import Job
    from gpucast.zoo import factories

    built = factories(Job(model=name, batch_size=batch_size))
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = built.model_fn()
        inputs = built.input_fn(batch_size)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    model.train()
    names = [f"input{i}" for i in range(len(inputs))]
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kwargs = {"opset_version": opset} if opset else {}
            torch.onnx.export(model, inputs, str(tmp), dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              input_names=names, dynamic_axes={n: {0: "batch"} for n in names}, **kwargs)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
