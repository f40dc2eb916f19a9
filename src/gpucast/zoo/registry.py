"""The zoo's registry: the workloads the family modules register (loaded on first use, so listing the
zoo imports no model library), looked up by name, and the zoo and ``module`` model sources
(:mod:`gpucast.model_sources`) that build a job's model from them; the package's docstring,
:mod:`gpucast.zoo`, says what a workload is."""

from __future__ import annotations

import importlib

from gpucast import imports
from gpucast.model_sources import Built, Source, register as _register_source
from gpucast.zoo.base import FAMILIES, SOURCES, Workload, default_loss

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
    """Import the family modules (each registers its workloads) once, under the import lock
    (:mod:`gpucast.imports`): a thread never reads a registry another thread is still filling."""
    global _LOADED
    if _LOADED:
        return
    with imports.LOCK:
        if not _LOADED:
            for mod in _FAMILY_MODULES:
                importlib.import_module(f"gpucast.zoo.{mod}")
            _LOADED = True


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


def _factories(job) -> Built:
    """A zoo job's factories, with the job's shape overrides applied."""
    w = get(job.model)
    spec = w.resolve(job.input_shape, job.seq_len)
    return Built(lambda: w.model_fn(spec), lambda b: w.input_fn(spec, b), w.loss_fn or default_loss)


def _module_factories(job) -> Built:
    """A module job's own factories, with the zoo's default loss when it gives none."""
    return Built(job.model_fn, job.input_fn, job.loss_fn or default_loss)


_register_source(Source("zoo", _factories, check=get))
_register_source(Source("module", _module_factories))
