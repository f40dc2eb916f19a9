"""The model libraries imported from several threads: one lock, so that no thread sees a module
another thread is still importing.

Why a lock (each seen in the service, where several threads capture jobs at once):

* transformers replaces its package in ``sys.modules`` with a lazy module at the end of its
  ``__init__`` (and each ``transformers.models.*`` package does the same). When CPython's
  ``import`` statement finds a module that another thread is still initialising, it waits for that
  thread and then hands back the object it found *before* waiting: the original module, which has
  none of the lazy names (``module 'transformers' has no attribute 'AttentionInterface'``).
  ``importlib.import_module`` reads ``sys.modules`` again after waiting and is not affected.
* Two threads whose first imports cross each other's circular imports (torchvision's model
  modules, transformers' architectures, onnx) can be handed a partially initialised module by
  CPython's deadlock avoidance.
* gpucast's own lazy registries (the zoo's family modules, Hugging Face's list of model types)
  are filled on first use.

So building a model runs under :data:`LOCK`, a re-entrant lock of the process: the tracer
(:func:`gpucast.graph.tracer.capture`) holds it while it resolves the job's source and builds its
model, adapters and inputs (an architecture's modules are imported on first use); the zoo holds it
while it imports its family modules, the Hugging Face reader while it lists model types or reads a
config class's defaults, the ONNX reader while it imports onnx. :func:`load` is how those places
import a library: through ``importlib`` under the lock, or at once, without the lock, when the
module is already fully imported (so the service's event loop, making a job from a config, never
waits for another thread's build).

Not locked: the trace itself (forward, backward, optimizer step), the estimate and everything
after it run side by side in several threads; the modules they use were imported while the
model was built. A build holds the lock for as long as it takes to construct the model on the meta
device (milliseconds to a second or two for the largest configs): builds of different jobs take
turns, their traces do not.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

__all__ = ["LOCK", "load", "imported"]

LOCK = threading.RLock()


def imported(name: str) -> bool:
    """Whether module ``name`` is in ``sys.modules`` and done initialising (no thread is importing it)."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def load(name: str) -> ModuleType:
    """Module ``name`` as ``sys.modules`` holds it once fully imported (for transformers: the lazy
    module, never the original one); imported under :data:`LOCK` unless it already is."""
    if not imported(name):
        with LOCK:
            importlib.import_module(name)
    return sys.modules[name]
