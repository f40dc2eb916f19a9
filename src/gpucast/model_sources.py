"""Model sources: how a job's ``model`` resolves to what builds it, through a registry.

A job's ``model`` names one of four sources (:meth:`gpucast.job.Job.is_onnx` and friends say
which): a zoo name, ``onnx:<path>``, ``hf:<model_type>`` or ``module:<factory>``. The first three
live in packages that sit *above* :mod:`gpucast.job` (the readers import ``Job`` and ``JobError``;
the zoo is heavier than a spec needs), so the job does not import them; instead each registers its :class:`Source` here when it is imported
(:mod:`gpucast.zoo`, :mod:`gpucast.graph.hf`, :mod:`gpucast.graph.onnx`), and :func:`source`
imports the provider of a kind on first use (``PROVIDERS``: module names, the way the zoo loads
its family modules), so a lookup never finds the registry empty. A ``module:`` job carries its
own factories; the zoo registers that kind too, to give the zoo's default loss to a module job
without one.

:func:`factories` is the one dispatch from a job to its :class:`Built` factories
(``gpucast.zoo.factories`` is this function). This module imports nothing of gpucast at module
level or in a function, and knows no source's API: it is the lowest layer the job, the zoo and the
readers share.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Built", "Source", "PROVIDERS", "register", "source", "kind_of", "factories"]

# Which module registers each kind (imported on the first lookup of that kind).
PROVIDERS = {"zoo": "gpucast.zoo", "module": "gpucast.zoo", "onnx": "gpucast.graph.onnx", "hf": "gpucast.graph.hf"}
_REGISTRY: dict[str, "Source"] = {}


@dataclass
class Built:
    """What gpucast calls to build a job: ``model_fn()``, ``input_fn(batch_size)``, ``loss_fn(out, inputs)``."""

    model_fn: Callable[[], Any]
    input_fn: Callable[[int], tuple]
    loss_fn: Callable[[Any, tuple], Any]


@dataclass(frozen=True)
class Source:
    """One kind of model source. ``factories(job)`` builds a job of this kind; ``check(name)``
    (optional) raises ``KeyError`` with a one-line message for a ``model`` the source does not
    know; ``resolve(x)`` (optional) turns what a user has into the source's spec (the Hugging Face
    reader: a config dict)."""

    kind: str
    factories: Callable[[Any], Built]
    check: Callable[[str], Any] | None = None
    resolve: Callable[[Any], Any] | None = None


def register(src: Source) -> Source:
    """Register (or replace) the source of ``src.kind``."""
    _REGISTRY[src.kind] = src
    return src


def source(kind: str) -> Source:
    """The registered source of ``kind`` (``zoo``, ``module``, ``onnx``, ``hf``), importing its provider first."""
    if kind not in _REGISTRY and kind in PROVIDERS:
        importlib.import_module(PROVIDERS[kind])
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise KeyError(f"no model source of kind {kind!r} (have: {', '.join(sorted(PROVIDERS))})") from None


def kind_of(job) -> str:
    """``module``, ``onnx``, ``hf`` or ``zoo``: which source builds ``job``."""
    if job.is_module:
        return "module"
    if job.is_onnx:
        return "onnx"
    if job.is_hf:
        return "hf"
    return "zoo"


def factories(job) -> Built:
    """The model, input and loss factories of a job (a zoo name, an ONNX file, a Hugging Face
    config or a user module), with the job's shape overrides applied. The callers choose the
    device (meta to trace, cuda to run)."""
    return source(kind_of(job)).factories(job)
