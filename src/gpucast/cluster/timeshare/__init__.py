"""Jobs that share one GPU: each job's slowdown, the GPU's held share and its NVML utilization.

The model and its solve are :mod:`.shared` (what is modelled, how it is fitted, its errors), the job's
timeline and the constants :mod:`.model`, the fixed-point iteration :mod:`.solve` (compiled in
:mod:`.kernel_jit` through :mod:`.kernel`), the fitted worlds and the process's choice of world and
sharing mode :mod:`.worlds`; MPS :mod:`.mps`, the sharing modes :mod:`.modes`, fits :mod:`.fit` and
:mod:`.pairs`. Every name stays importable from here.
"""

from __future__ import annotations

from gpucast.cluster.timeshare import kernel  # noqa: F401
from gpucast.cluster.timeshare.model import (_HELD_CAP, _ITERATIONS, _TOLERANCE, Constants, JobTimeline,  # noqa: F401
                                             _by_held, _jit, _waits)
from gpucast.cluster.timeshare.shared import (_util_pct, compiled_scores, gpu_util_pct, held_pct,  # noqa: F401
                                              shared_state, slowdowns, slowdowns_many, throttled, throughputs)
from gpucast.cluster.timeshare.solve import _cached, _canonical, _iterate_held, _key, _plain, _solve, solve  # noqa: F401
from gpucast.cluster.timeshare.worlds import (_ACTIVE, _CURRENT_FIT, _FIT, _MODE, _WORLD_NAME, CURRENT,  # noqa: F401
                                              DEFAULT_WORLD, FITTED, GAVEL_CORRECTIONS, MEASURED_PAIRS, MODES,
                                              PREDICTED_IN, WORLDS, _constants, _packaged_current, _packaged_fit,
                                              anchored, corrected, mem_bound_share, mode, predicting,
                                              predicting_with, set_constants, set_mode, set_world, world,
                                              world_name)
