"""Named workloads: one file per family, each entry a small builder over a maintained library.

``get(name)`` returns a :class:`~gpucast.zoo.base.Workload`; ``workloads()`` lists them all.
Family modules import torch/torchvision/transformers only inside their builders, so listing
the zoo is cheap.
"""

from __future__ import annotations

import importlib

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


__all__ = ["FAMILIES", "SOURCES", "Workload", "WorkloadSpec", "default_loss", "first_tensor",
           "register", "workloads", "names", "get"]
