"""How a job's software stack and host change its times: PyTorch's version and the host CPU.

Two multipliers, both 1 for the reference stack of the constants (PyTorch >= 2.0 on the
reference server core, :class:`~gpucast.estimate.constants.EstimatorConfig`):

* :func:`host_factor` multiplies every host cost of the step (op dispatch, module calls, the
  loop's habits, the loader): ``Environment.host_time_factor`` (the cluster's hosts) over the
  stack's ``cpu_speed``; :func:`torch_host_factor` multiplies, on top, the per-op dispatch
  costs only (:data:`TORCH_HOST_TIERS`: PyTorch's own Python and C++ per op; a PIL transform in
  the loader does not depend on PyTorch's release);
* :func:`kernel_factor` multiplies GPU kernel time: ``Environment.kernel_factor(gpu)`` (the
  cluster's cards); :func:`kernel_scales` adds, per op, the version factor of the GPU libraries
  that PyTorch release shipped (:data:`TORCH_KERNEL_TIERS`) to the kernels those libraries run
  (:data:`LIBRARY_CATEGORIES`: cuDNN convolutions and RNNs, cuBLAS GEMMs, fused attention).
  PyTorch's own elementwise, normalization, reduction and optimizer kernels (TensorIterator,
  the same code path across releases) and the launch floor of every kernel keep factor 1: a
  model of many small ops is not slowed by an older cuDNN.

What changes between releases and is *structure*, not a factor, is modelled where it happens:
PyTorch < 2.0 steps optimizers parameter by parameter in Python (``Stack.foreach_optimizers``:
the trace then holds a few ops per parameter, each paying dispatch), CUDA modules load eagerly
before 2.0 (``Stack.lazy``: the context's memory). AMP's GradScaler unscales with one foreach
kernel per device and dtype from PyTorch 1.6 on (``torch._amp_foreach_non_finite_check_and_unscale_``,
the release that introduced ``torch.cuda.amp``) and reads ``found_inf`` on the host before the
optimizer step (a sync, in the trace): the per-parameter optimizer loop that follows runs while
the GPU idles, which is why AMP measures slower than fp32 for small host-bound jobs on 1.x.

The version factors are tiers by release (monotone: an older release never dispatches faster):

* ``>= 2.0``: 1 (the constants' reference);
* ``1.x``: ``Environment.torch1_host_factor`` / ``torch1_kernel_factor``, each with a prior and a
  spread: the C++ part of a dispatch (~2 us for a small CPU op from Python in 2020, PyTorch issue
  #41383) is about what it is today, but 1.x releases pay more Python per op (argument parsing,
  ``__torch_function__`` checks added in 1.5, PyTorch issue #30831; the autograd engine's
  bookkeeping), and shipped older cuDNN/cuBLAS (cuDNN 7.6 with 1.4, 8.2 with 1.11) whose kernels
  are slower on the same GPU. Fitted by ``scripts/fit_environment.py`` on sets measured on 1.x
  stacks (Gavel: PyTorch 1.4; Lucid: 1.11) and judged by leaving one set out
  (``benchmarks/accuracy.py --leave-one-set-out``).

The host (a cluster's CPUs) and the release are separate terms: ``Environment.host_time_factor``
is the host's, ``torch1_host_factor`` the release's. Each measured set ran one release on one
cluster's hosts, so the packaged fit (:mod:`gpucast.learn.set_fit`) gives every set its own host
factor (a nuisance with the host's prior) and shares the release factors between the sets: what
differs between two 1.x clusters is put on their hosts, what they share on the release.

Not modelled: differences inside 1.x (one tier), the Python interpreter's version, the CUDA
launch path's own speed (driver, ``cudaLaunchKernel``; part of the host factor), CPU frequency
scaling under load.
"""

from __future__ import annotations

import numpy as np

from gpucast.estimate.kernels import LIBRARY_CATEGORIES  # noqa: F401 (the categories kernel_scales slows)
from gpucast.surroundings import Stack, version_tuple

# (first version of the tier, Environment field giving its factor; None: the reference, 1).
TORCH_HOST_TIERS: tuple[tuple[tuple[int, int], str | None], ...] = (
    ((2, 0), None),
    ((0, 0), "torch1_host_factor"),
)
TORCH_KERNEL_TIERS: tuple[tuple[tuple[int, int], str | None], ...] = (
    ((2, 0), None),
    ((0, 0), "torch1_kernel_factor"),
)


def _tier(torch_version: str, tiers, env) -> float:
    v = version_tuple(torch_version)[:2]
    for first, name in tiers:
        if v >= first:
            return 1.0 if name is None else float(getattr(env, name))
    return 1.0


def torch_host_factor(torch_version: str, env) -> float:
    """Host-time multiplier of a PyTorch release relative to >= 2.0 (the constants' reference)."""
    return _tier(torch_version, TORCH_HOST_TIERS, env)


def torch_kernel_factor(torch_version: str, env) -> float:
    """Kernel-time multiplier of the GPU libraries a PyTorch release shipped, relative to >= 2.0."""
    return _tier(torch_version, TORCH_KERNEL_TIERS, env)


def host_factor(stack: Stack, env) -> float:
    """Every host cost's multiplier for this host: the cluster's hosts over the stack's CPU speed
    (the per-op dispatch costs get :func:`torch_host_factor` on top)."""
    return env.host_time_factor / stack.cpu_speed


def kernel_factor(stack: Stack, gpu: str, env) -> float:
    """GPU kernel time's multiplier for every kernel of this stack on ``gpu`` (the cluster's
    cards); the release's library factor is :func:`kernel_scales`'."""
    return env.kernel_factor(gpu)


def kernel_scales(stack: Stack, gpu: str, env, library: np.ndarray) -> float | np.ndarray:
    """Per-op kernel-time multipliers (``library``: which ops run cuDNN/cuBLAS kernels,
    :attr:`OpArrays.library <gpucast.estimate.kernels.OpArrays>`): :func:`kernel_factor` on every
    kernel, times the release's library factor on :data:`LIBRARY_CATEGORIES`' ops. A scalar when
    the release is the reference (every op alike)."""
    base = kernel_factor(stack, gpu, env)
    lib = torch_kernel_factor(stack.torch, env)
    if lib == 1.0:
        return base
    return base * np.where(library, lib, 1.0)
