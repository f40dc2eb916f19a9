"""BatchNorm's two kernels: which name a traced BatchNorm op is recorded under.

In training mode BatchNorm reduces each channel over the batch (mean and variance, Welford) before it
normalises: a reduction and an elementwise pass, whose rates our H200 measured well below an elementwise
kernel's (``achieved.yaml``'s ``batchnorm`` families). In eval mode (``module.eval()``, ``training=False``)
it normalises with the running statistics: one elementwise pass (PyTorch's ``batch_norm_elementwise``).
The aten ops are the same for both (``native_batch_norm``, ``cudnn_batch_norm``,
``_native_batch_norm_legit``), told apart only by their ``training`` argument, so the tracer records an
eval-mode call under the name PyTorch's decompositions give it, :data:`BATCH_NORM_EVAL`, and the kernel
model (:func:`gpucast.estimate.achieved.memory_family_of`) runs it at the elementwise roofline.
"""

from __future__ import annotations

BATCH_NORM_EVAL = "_native_batch_norm_legit_no_training"
# BatchNorm ops whose sixth argument is ``training``.
_BATCH_NORMS = frozenset({"native_batch_norm", "cudnn_batch_norm", "_native_batch_norm_legit", "miopen_batch_norm"})


def batch_norm_name(name: str, args) -> str:
    """``name``, or :data:`BATCH_NORM_EVAL` for a BatchNorm op called with ``training=False``."""
    return BATCH_NORM_EVAL if name in _BATCH_NORMS and len(args) > 5 and args[5] is False else name
