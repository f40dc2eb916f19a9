"""Plain multilayer-perceptron classifiers (ReLU, dropout), written here over ``torch.nn``."""

from __future__ import annotations

from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec, classification_loss


def _mlp(hidden: tuple[int, ...], classes: int, dropout: float):
    """Flatten -> [Linear -> ReLU -> Dropout] per hidden layer -> Linear to the classes."""

    def model_fn(spec: WorkloadSpec):
        import math

        import torch.nn as nn

        sizes = (math.prod(spec.input_shape), *hidden)
        drop = [nn.Dropout(dropout)] if dropout else []
        layers = [m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU(), *drop)]
        return nn.Sequential(nn.Flatten(), *layers, nn.Linear(sizes[-1], classes))

    return model_fn


def _images(spec: WorkloadSpec, batch_size: int):
    import torch

    return (torch.randn(batch_size, *spec.input_shape),)


for _name, _hidden, _drop, _batch, _what in (
        ("mlp-small", (512, 256), 0.0, 128, "2 hidden layers 512-256"),
        ("mlp-large", (4096, 4096, 4096), 0.5, 256, "3 hidden layers of 4096, dropout 0.5")):
    register(Workload(
        name=_name, family="mlp", source="gpucast",
        description=f"MLP classifier, {_what}, MNIST 1x28x28 (784 inputs), 10 classes",
        model_fn=_mlp(_hidden, 10, _drop), input_fn=_images, loss_fn=classification_loss,
        default_batch_size=_batch, default_input_shape=(1, 28, 28), tags=("mnist",),
    ))
