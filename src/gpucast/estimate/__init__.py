"""The analytic model: from a Trace and a GPU spec to times, utilization, memory and a bottleneck.

``estimate(trace, job, gpu, config, env)`` combines the kernel model (``kernels``), the host
dispatch model (``host``), the data loader and loop habits (``loader``), the two-clock step
simulation (``step``) and device memory as nvidia-smi shows it (``memory``). ``config`` holds the
GPU-physics and dispatch constants, ``env`` (:class:`~gpucast.estimate.environment.Environment`)
those of the cluster's hosts and stack; the job's surroundings (data, loop, stack) are resolved
with the workload's typical values (:func:`gpucast.surroundings.resolve`).

Utilization is NVML's ``utilization.gpu`` as its sampler reports the simulated step
(:mod:`gpucast.estimate.nvml`: gaps shorter than the counter's tick read busy); ``gpu_held_pct``
is the share of the step the kernels really hold the GPU, what a co-located job competes for.
Both are the steady-state figure (a training loop past its first steps) unless
``window_s`` asks for what a monitor averages over a run of that many seconds from process
start: the start-up (imports, CUDA initialisation, building the model:
``Environment.startup_s``) reads 0 % and is averaged in. Intervals come from re-running the step simulation at the corners of the
constants' plausible ranges (``kernel_time_range`` x ``host_time_range``); they are rough
sensitivity bands, not calibrated quantiles (``gpucast.learn`` will fit those).

Bottleneck labels:

* ``input-bound``: the loader sets the pace: its workers take longer per batch than the step,
  or the loop spends more time fetching and copying the batch than anything else;
* ``launch-bound``: the GPU idles waiting for the host to issue work (low utilization with the
  host's dispatch time >= the GPU's busy time), or its busy time is mostly per-kernel floor
  (many tiny kernels);
* ``compute-bound`` / ``memory-bound``: whichever roofline term dominates the busy time.

Fits nothing.
"""

from gpucast.estimate.constants import DEFAULT, EstimatorConfig
from gpucast.estimate.environment import Environment
from gpucast.estimate.estimator import (LAUNCH_BOUND_UTIL, Estimate, Prepared, _bottleneck, estimate, family_scales,
                                        load_constants, prepare, reported_util, surroundings_of)

__all__ = ["DEFAULT", "Environment", "Estimate", "EstimatorConfig", "LAUNCH_BOUND_UTIL", "Prepared", "_bottleneck",
           "estimate", "family_scales", "load_constants", "prepare", "reported_util", "surroundings_of"]
