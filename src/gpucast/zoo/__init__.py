"""Named workloads: one file per family, each entry a small builder over a maintained library.

``get(name)`` returns a :class:`~gpucast.zoo.base.Workload`; ``workloads()`` lists them all.
Family modules import torch/torchvision/transformers only inside their builders, so listing
the zoo is cheap. The zoo registers itself as the ``zoo`` model source
(:mod:`gpucast.model_sources`); ``factories`` and ``Built`` are that module's, importable here.
"""

from __future__ import annotations

from gpucast.model_sources import Built, factories
from gpucast.zoo.base import FAMILIES, SOURCES, Workload, WorkloadSpec, default_loss, first_tensor
from gpucast.zoo.registry import get, names, register, workloads

__all__ = ["Built", "factories", "FAMILIES", "SOURCES", "Workload", "WorkloadSpec", "default_loss", "first_tensor",
           "register", "workloads", "names", "get"]
