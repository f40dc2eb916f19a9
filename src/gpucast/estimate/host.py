"""Host (CPU) time to dispatch each op in eager PyTorch.

Per op, by who issues it (``OpRecord.dispatch``): an op from Python costs ``python_op_s`` when
it launches a kernel and ``python_view_s`` when it does not; an op from the autograd engine
``engine_op_s``/``engine_view_s``; an op from a fused C++ loop ``cpp_op_s``; a host-only op
``host_op_s``. Each kernel past the first adds ``launch_s``. The forward's ``nn.Module`` calls
add ``module_call_s`` each, spread over the forward's ops. An inference trace (``Trace.mode``
``infer``: the forward under ``no_grad`` / ``inference_mode``) records no autograd graph: its
Python-issued ops cost their CPU part (``python_op_s`` less ``launch_s``; ``python_view_s``) divided
by ``autograd_record_factor`` (PyTorch issue #41383's ratio), plus the launch.

Not modelled: the host CPU's speed (one set of constants for a modern server core; the
interval spans slower and faster hosts), Python GC pauses, the GIL shared with loader threads,
CUDA graphs and torch.compile (which remove most of this cost).
"""

from __future__ import annotations

import numpy as np

from gpucast.estimate.constants import EstimatorConfig
from gpucast.estimate.kernels import DISPATCH_CODES, PHASE_CODES, OpArrays
from gpucast.graph.trace import Trace


def host_times(trace: Trace, cfg: EstimatorConfig, skip: np.ndarray | None = None) -> np.ndarray:
    """Host seconds per op; ``skip``: ops the GPU does not run (:func:`gpucast.estimate.kernels.absent`),
    which cost nothing and take no share of the module calls."""
    a = OpArrays.of(trace)
    launches = a.kernels > 0
    d = a.dispatch
    op_s, view_s = cfg.python_op_s, cfg.python_view_s
    if trace.mode == "infer":   # no autograd recording (module docstring)
        op_s = cfg.launch_s + (cfg.python_op_s - cfg.launch_s) / cfg.autograd_record_factor
        view_s = cfg.python_view_s / cfg.autograd_record_factor
    cost = np.select(
        [d == DISPATCH_CODES["python"], d == DISPATCH_CODES["engine"], d == DISPATCH_CODES["cpp"]],
        [np.where(launches, op_s, view_s),
         np.where(launches, cfg.engine_op_s, cfg.engine_view_s),
         np.full(len(d), cfg.cpp_op_s)],
        default=cfg.host_op_s,
    )
    cost = cost + np.maximum(a.kernels - 1, 0) * cfg.launch_s
    fwd = a.phase == PHASE_CODES["fwd"]
    if skip is not None:
        cost = np.where(skip, 0.0, cost)
        fwd = fwd & ~skip
    n_fwd = int(fwd.sum())
    if n_fwd and trace.modules:
        cost = cost + np.where(fwd, trace.modules * cfg.module_call_s / n_fwd, 0.0)
    return cost
