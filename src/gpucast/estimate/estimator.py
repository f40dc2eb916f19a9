"""The estimate of one traced step on a GPU: kernel and host times, the step simulated on two clocks,
utilization as NVML samples it, memory as nvidia-smi shows it, and the bottleneck (the package's
docstring, :mod:`gpucast.estimate`, says what each term models)."""


from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucast.estimate.constants import DEFAULT, EstimatorConfig
from gpucast.estimate.environment import Environment
from gpucast.estimate.host import host_times
from gpucast.estimate.loader import LoaderCost, loader_cost
from gpucast.estimate.kernels import PHASE_CODES, KernelTimes, OpArrays, absent, kernel_times
from gpucast.estimate.memory import MemoryEstimate, device_memory
from gpucast.estimate.nvml import held_share, reported_share
from gpucast.estimate.stack import host_factor, kernel_scales, torch_host_factor
from gpucast.estimate.step import Timeline, simulate
from gpucast.graph.trace import Trace
from gpucast.hardware import GpuSpec
from gpucast.job import Job
from gpucast.surroundings import Surroundings, infer_source, resolve

# Below this utilization, a GPU waiting on its host is called launch-bound.
LAUNCH_BOUND_UTIL = 0.6


@dataclass
class Estimate:
    step_time_s: float
    gpu_busy_s: float
    gpu_util_pct: float
    host_time_s: float
    memory: MemoryEstimate
    bottleneck: str
    bottleneck_reason: str
    step_time_interval: tuple[float, float]
    gpu_util_interval: tuple[float, float]
    memory_interval: tuple[int, int]
    time_by_phase: dict[str, float] = field(default_factory=dict)
    time_by_category: dict[str, float] = field(default_factory=dict)
    costed_time_share: float = 1.0
    timeline: Timeline | None = None
    kernel_times: KernelTimes | None = None  # per-op GPU seconds, aligned with the trace's ops
    surroundings: Surroundings | None = None
    loader: LoaderCost | None = None
    util_basis: str = "steady-state"
    gpu_held_pct: float = 0.0   # share of the step the job's kernels hold the GPU (estimate.nvml)
    gpu_held_interval: tuple[float, float] = (0.0, 0.0)
    prepared: "Prepared | None" = None  # what the estimate was computed from (reused by learned corrections)
    plan: dict | None = None  # a parallel plan's breakdown (gpucast.estimate.parallel), None for one replica


def reported_util(tl: Timeline, env: Environment) -> float:
    """The utilization (0-1) a monitor reports for a simulated step: NVML's sampler rule
    (:func:`gpucast.estimate.nvml.reported_share`, the environment's tick) through the
    environment's calibrated response."""
    if tl.step_time_s <= 0:
        return 0.0
    return env.util_response(reported_share(tl.step_time_s, tl.gpu_busy_s, tl.gap_lengths, env.nvml_tick_s))


def surroundings_of(job: Job, trace: Trace) -> Surroundings:
    """The job's data, loop and stack with the workload's (or the inputs') typical values."""
    wdata = wloop = None
    if not (job.is_module or job.is_onnx or job.is_hf):
        from gpucast import zoo

        w = zoo.get(job.model)
        wdata, wloop = w.data, w.loop
    return resolve(job, wdata, wloop, infer_source(trace.input_kinds))


@dataclass
class Prepared:
    """What does not change with the Environment's fitted constants: the resolved surroundings,
    the effective estimator constants, per-op kernel and dispatch times."""

    trace: Trace
    job: Job
    gpu: GpuSpec
    cfg: EstimatorConfig
    surroundings: Surroundings
    kt: KernelTimes
    host: np.ndarray
    scales: dict = field(default_factory=dict)  # family multipliers the kernel times were computed with

    def run(self, env: Environment, kernel_scale: float = 1.0, host_scale: float = 1.0
            ) -> tuple[Timeline, LoaderCost]:
        """The step simulated with ``env``'s loader, loop and idle-kernel constants and its
        kernel and host time factors (``kernel_scale``/``host_scale`` multiply them)."""
        lc = loader_cost(self.surroundings, self.trace, self.gpu, env, self.cfg.host_link_efficiency,
                         self.job.input_pipeline_s)
        stack = self.surroundings.stack
        dispatch = torch_host_factor(stack.torch, env)
        host = self.host if dispatch == 1.0 else self.host * dispatch
        tl = simulate(self.trace, self.job, self.gpu, self.cfg, self.kt, host,
                      kernel_scale * kernel_scales(stack, self.gpu.name, env, OpArrays.of(self.trace).library),
                      host_scale * host_factor(stack, env), lc, env.idle_kernel_s)
        return tl, lc

    def memory(self, env: Environment) -> MemoryEstimate:
        return device_memory(self.trace, self.job, self.gpu, self.cfg, env, self.surroundings)


def prepare(trace: Trace, job: Job, gpu: GpuSpec, config: EstimatorConfig | None = None,
            env: Environment | None = None) -> Prepared:
    cfg = config or DEFAULT
    env = env or Environment.default()
    sur = surroundings_of(job, trace)
    scales = family_scales(sur, env)
    kt = kernel_times(trace, gpu, job.precision, cfg, sur.stack, scales)
    return Prepared(trace, job, gpu, cfg, sur, kt, host_times(trace, cfg, absent(trace, gpu, cfg)), scales)


def family_scales(sur: Surroundings, env: Environment) -> dict[str, float]:
    """Multipliers of kernel families' achieved fractions the job's loop sets: without
    ``cudnn.benchmark`` the convolutions run cuDNN's heuristic first choice
    (``Environment.cudnn_heuristic_efficiency``)."""
    return {} if sur.loop.cudnn_benchmark else {"conv": env.cudnn_heuristic_efficiency}


def estimate(trace: Trace, job: Job, gpu: GpuSpec, config: EstimatorConfig | None = None,
             env: Environment | None = None, window_s: float | None = None) -> Estimate:
    env = env or Environment.default()
    prep = prepare(trace, job, gpu, config, env)
    cfg, sur, kt = prep.cfg, prep.surroundings, prep.kt

    def run(k: float = 1.0, hs: float = 1.0) -> Timeline:
        return prep.run(env, k, hs)[0]

    tl, lc = prep.run(env)
    util = reported_util(tl, env)
    held = held_share(tl.step_time_s, tl.gpu_busy_s)
    corners = [run(k, hs) for k in cfg.kernel_time_range for hs in cfg.host_time_range]
    steps = [c.step_time_s for c in corners] + [tl.step_time_s]
    utils = [reported_util(c, env) for c in corners] + [util]
    helds = [held_share(c.step_time_s, c.gpu_busy_s) for c in corners] + [held]
    basis = "steady-state"
    if window_s is not None:
        running = max(0.0, window_s - env.startup_s) / window_s
        util, utils = util * running, [u * running for u in utils]
        held, helds = held * running, [u * running for u in helds]
        basis = f"average over the first {window_s:g} s of the run ({env.startup_s:g} s of start-up at 0 %)"
    mem = prep.memory(env)
    lo, hi = cfg.memory_range
    a = OpArrays.of(trace)
    by_phase = {p: float(kt.time[a.phase == code].sum()) for p, code in PHASE_CODES.items()
                if (a.phase == code).any()}
    by_cat = {c: float(kt.time[a.category == c].sum()) for c in dict.fromkeys(a.category)}
    total = float(kt.time.sum())
    costed_share = float(kt.time[a.costed].sum() / total) if total > 0 else 1.0
    label, reason = _bottleneck(job, tl, util, kt, lc)
    return Estimate(
        step_time_s=tl.step_time_s, gpu_busy_s=tl.gpu_busy_s, gpu_util_pct=100.0 * util,
        gpu_held_pct=100.0 * min(held, util), gpu_held_interval=(100.0 * min(helds), 100.0 * max(helds)),
        host_time_s=tl.host_time_s, memory=mem, bottleneck=label, bottleneck_reason=reason,
        step_time_interval=(min(steps), max(steps)),
        gpu_util_interval=(100.0 * min(utils), 100.0 * max(utils)),
        memory_interval=(int(mem.total_bytes * lo), int(mem.total_bytes * hi)),
        time_by_phase=by_phase, time_by_category=dict(sorted(by_cat.items(), key=lambda kv: -kv[1])),
        costed_time_share=costed_share, timeline=tl, kernel_times=kt, surroundings=sur, loader=lc,
        util_basis=basis, prepared=prep,
    )


def _bottleneck(job: Job, tl: Timeline, util: float, kt, lc: LoaderCost) -> tuple[str, str]:
    if tl.input_wait_s > 0:
        return "input-bound", (f"the loader's workers need {tl.step_time_s * 1e3:.2f} ms per batch, "
                               f"the step {tl.compute_step_s * 1e3:.2f} ms")
    if tl.loader_in_loop_s > 0.5 * tl.step_time_s:
        return "input-bound", (f"the loop spends {tl.loader_in_loop_s * 1e3:.2f} ms of the "
                               f"{tl.step_time_s * 1e3:.2f} ms step fetching and copying the batch "
                               f"({'no workers' if not lc.workers else f'{lc.workers} workers'})")
    busy = float(kt.time.sum())
    if util < LAUNCH_BOUND_UTIL and tl.host_time_s >= busy:
        return "launch-bound", (f"the host spends {tl.host_time_s * 1e3:.2f} ms issuing ops per step, "
                                f"the GPU is busy {tl.gpu_busy_s * 1e3:.2f} ms")
    launched = kt.time > 0
    dom_floor = float(kt.time[launched & (kt.floor >= np.maximum(kt.compute, kt.memory))].sum())
    dom_compute = float(kt.time[launched & (kt.compute > np.maximum(kt.memory, kt.floor))].sum())
    dom_memory = float(kt.time[launched & (kt.memory > np.maximum(kt.compute, kt.floor))].sum())
    if busy > 0 and dom_floor / busy > 0.5:
        return "launch-bound", (f"{dom_floor / busy:.0%} of GPU time is kernels too small to leave the "
                                f"per-kernel floor")
    if dom_compute >= dom_memory:
        return "compute-bound", f"{dom_compute / busy:.0%} of GPU time is in math-limited kernels"
    return "memory-bound", f"{dom_memory / busy:.0%} of GPU time is in bandwidth-limited kernels"


def load_constants(path, env: Environment | None = None) -> tuple[EstimatorConfig, Environment]:
    """A YAML/JSON file of ``name: value`` pairs, each a field of EstimatorConfig or of
    Environment (over ``env``, by default :meth:`Environment.default`); an unknown name is a
    ValueError."""
    from dataclasses import fields as dc_fields

    from gpucast.estimate.constants import read_constants_file

    data = read_constants_file(path)
    env_names = {f.name for f in dc_fields(Environment)}
    cfg_names = {f.name for f in dc_fields(EstimatorConfig)}
    unknown = sorted(set(data) - env_names - cfg_names, key=str)
    if unknown:
        raise ValueError(f"unknown constant {unknown[0]!r}")
    cfg = EstimatorConfig().replace(**{k: v for k, v in data.items() if k in cfg_names})
    env = (env or Environment.default()).replace(**{k: v for k, v in data.items() if k in env_names})
    return cfg, env


__all__ = ["Environment", "Estimate", "EstimatorConfig", "Prepared", "estimate", "load_constants", "prepare"]
