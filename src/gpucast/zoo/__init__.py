"""Named workloads: one file per family, each entry a small builder over a maintained library.

``get(name)`` returns a :class:`~gpucast.zoo.base.Workload`; ``workloads()`` lists them all.
Family modules import torch/torchvision/transformers only inside their builders, so listing
the zoo is cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from gpucast.zoo.base import FAMILIES, SOURCES, Workload, WorkloadSpec, default_loss, first_tensor

_FAMILY_MODULES = ("vision", "rnn", "transformers_lm", "gan", "recsys", "pointnet", "rl", "mlp")
_REGISTRY: dict[str, Workload] = {}
_LOADED = False


def register(workload: Workload) -> Workload:
    if workload.name in _REGISTRY:
        raise ValueError(f"zoo: duplicate workload name {workload.name!r}")
    if workload.family not in FAMILIES:
        raise ValueError(f"zoo: {workload.name}: unknown family {workload.family!r}")
    if workload.source not in SOURCES:
        raise ValueError(f"zoo: {workload.name}: unknown source {workload.source!r}")
    if workload.data is None or workload.loop is None:
        from dataclasses import replace

        from gpucast.zoo.recipes import recipe

        r = recipe(workload.family, workload.tags)
        if r is not None:
            workload = replace(workload, data=workload.data or r.data, loop=workload.loop or r.loop,
                               script=workload.script or r.script)
    _REGISTRY[workload.name] = workload
    return workload


def _load() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        for mod in _FAMILY_MODULES:
            importlib.import_module(f"gpucast.zoo.{mod}")


def workloads() -> list[Workload]:
    _load()
    return list(_REGISTRY.values())


def names() -> list[str]:
    return [w.name for w in workloads()]


def get(name: str) -> Workload:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (see `gpucast zoo`)"
        raise KeyError(f"unknown zoo workload {name!r}{hint}") from None


@dataclass
class Built:
    """What gpucast calls to build a job: ``model_fn()``, ``input_fn(batch_size)``, ``loss_fn(out, inputs)``."""

    model_fn: Callable[[], Any]
    input_fn: Callable[[int], tuple]
    loss_fn: Callable[[Any, tuple], Any]


def factories(job) -> Built:
    """The model, input and loss factories of a job (a zoo name, an ONNX file, a Hugging Face
    config or a user module), with the
    job's shape overrides applied. The callers choose the device (meta to trace, cuda to run)."""
    if job.is_module:
        return Built(job.model_fn, job.input_fn, job.loss_fn or default_loss)
    if job.is_onnx:
        from gpucast.graph.onnx import factories as onnx_factories

        return onnx_factories(job)
    if job.is_hf:
        from gpucast.graph.hf import factories as hf_factories

        return hf_factories(job)
    w = get(job.model)
    spec = w.resolve(job.input_shape, job.seq_len)
    return Built(lambda: w.model_fn(spec), lambda b: w.input_fn(spec, b), w.loss_fn or default_loss)


__all__ = ["Built", "factories", "FAMILIES", "SOURCES", "Workload", "WorkloadSpec", "default_loss", "first_tensor",
           "register", "workloads", "names", "get"]
