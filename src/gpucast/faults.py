"""Whose fault a failed prediction is: the input's (a 4xx answer, exit code 2) or gpucast's (a 5xx, exit 1).

The line, by exception type:

* **the input's**: ``ValueError`` (``JobError``, ``OnnxError``, ``SpecError`` and the other
  refusals of bad specs are ValueErrors) and ``KeyError`` (unknown names: a workload, a GPU, a MIG
  profile); and a capture failure (:class:`gpucast.graph.tracer.CaptureError`, which marks itself
  with ``input_error = True``) whose cause is not one of the types below: what a model raises while
  it is built or traced from what the client sent (a shape mismatch is a ``RuntimeError``, a bad
  argument a ``TypeError``, an op without a meta kernel a ``NotImplementedError``).
* **gpucast's**: the :data:`INTERNAL` types (``AttributeError``, ``ImportError``, ``NameError``,
  ``AssertionError``, ``RecursionError``, ``MemoryError``, ``SystemError``), raised anywhere or as
  the cause of a capture failure: gpucast or a library it builds models with broke, whatever the
  request said (a half-imported ``transformers`` raises ``AttributeError``); and any exception not
  named above.

One exception to the exception: a failure inside the user's own code (a ``module:`` job, whose
factories the user wrote; the capture marks it ``user_code = True``) is the input's whatever its
type. The service never runs user code, so there every :data:`INTERNAL` failure is a 500.
"""

from __future__ import annotations

__all__ = ["INTERNAL", "internal_cause", "is_input_error"]

INTERNAL: tuple[type[BaseException], ...] = (AttributeError, ImportError, NameError, AssertionError, RecursionError,
                                             MemoryError, SystemError)


def internal_cause(exc: BaseException) -> BaseException | None:
    """The first exception of ``exc``'s ``__cause__`` chain (``exc`` included) of an :data:`INTERNAL` type, or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, INTERNAL):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__
    return None


def is_input_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the input's fault (see the module docstring), not gpucast's."""
    if getattr(exc, "user_code", False):
        return True
    if internal_cause(exc) is not None:
        return False
    return bool(getattr(exc, "input_error", False)) or isinstance(exc, (ValueError, KeyError))
