"""The optimizer a job's step uses: one definition for the tracer (what gpucast predicts) and the
profiler's runner (what it measures), so both run the same step.

``sgd`` is SGD with momentum 0.9, as the classic CNN recipes train (He et al. 2016); ``adam`` and
``adamw`` are torch's defaults; ``none`` is no optimizer. All use ``foreach=True``, the
multi-tensor kernels PyTorch picks by default on CUDA since 2.0, unless the job's stack is an
older PyTorch (``foreach=False``: a Python loop over the parameters, a few kernels per parameter).
Learning rates do not change the cost.
"""

from __future__ import annotations

SGD_MOMENTUM = 0.9


def make_optimizer(name: str, params, foreach: bool = True):
    """The torch optimizer for ``Job.optimizer`` over ``params``, or None for ``none``."""
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=SGD_MOMENTUM, foreach=foreach)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=foreach)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=foreach)
    return None
