"""A serving engine's host time per iteration, fitted on a cluster's measured serving runs.

``gpucast calibrate`` hands its ``mode: serve`` rows (:data:`gpucast.learn.rows.SERVING_COLUMNS`:
a static batch's wall time, mean TTFT, mean TPOT, output tokens/s) here. The one constant the
serving model leaves to a cluster is each engine's host time per iteration
(:class:`gpucast.estimate.serving.engines.Engine`: its scheduler, input preparation and sampling on
the cluster's CPUs, with its release's habits): the kernels are the kernel model's, the iterations
the engine's batching. Every iteration's wall time moves by a change of it, so each measured figure
is, to first order, linear in it (a wall time by the run's iterations, TPOT by one decode iteration;
tokens/s by the reciprocal): each row is predicted twice (at the engine's host time in force and
1 ms more) and the fit searches :data:`HOST_GRID_S` for the least median absolute percentage error
of the engine's rows, as ``benchmarks/llm_inference_a100.py`` fits the packaged times.

Held out by group (a row's ``group``, the model by default): each group's rows are predicted with the
time fitted on the other groups' rows, so the report says how the fit carries to a model it did not
see. The figures after the fit are predicted again, not extrapolated. The result goes into the
environment (``Environment.serving_host_s``); predictions with that environment use it.

Not fitted: anything of the GPU (the kernel model's constants; ``calibrate``'s training rows move
the kernel factors), engine settings (a row says them in its ``serve`` group), memory.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

from gpucast.estimate.environment import PER_ENGINE, Environment

HOST_GRID_S = tuple(i * 1e-4 for i in range(0, 301))  # 0-30 ms per iteration, 0.1 ms apart
STEP_S = 1e-3  # the second prediction's host time, above the one in force
PER_TOKEN = "output_tokens_per_s"  # the one figure that falls as the host time grows


@dataclass(frozen=True)
class Term:
    """One measured figure of one row: predicted at the host time ``prior`` and its slope per second
    of host time (for tokens/s, of its reciprocal)."""

    predicted: float
    slope: float
    prior: float
    measured: float
    reciprocal: bool = False

    def at(self, host_s: float) -> float:
        if self.reciprocal:
            return 1.0 / max(1e-12, 1.0 / self.predicted + self.slope * (host_s - self.prior))
        return self.predicted + self.slope * (host_s - self.prior)


def mdape(terms: list[Term], host_s: float) -> float:
    return statistics.median(abs(t.at(host_s) / t.measured - 1) for t in terms)


def best_host(terms: list[Term]) -> float | None:
    """The host time per iteration on :data:`HOST_GRID_S` with the least MdAPE over ``terms``."""
    if not terms:
        return None
    return min(HOST_GRID_S, key=lambda h: mdape(terms, h))


@dataclass
class EngineFit:
    engine: str
    rows: int
    groups: list[str]
    prior_s: float
    fitted_s: float
    mdape_before: float
    mdape_after: float
    mdape_held_out: float | None  # None with one group


@dataclass
class ServingFit:
    engines: dict[str, EngineFit] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)  # rows the model could not predict, with why

    def values(self) -> dict[str, float]:
        return {e: f.fitted_s for e, f in self.engines.items()}

    def apply(self, env: Environment) -> Environment:
        return env.with_params({f"{PER_ENGINE}:{e}": v for e, v in self.values().items()})

    def summary(self) -> dict:
        return {e: {"rows": f.rows, "groups": len(f.groups), "prior_s": f.prior_s, "fitted_s": f.fitted_s,
                    "mdape_before": f.mdape_before, "mdape_after": f.mdape_after,
                    "mdape_held_out_by_group": f.mdape_held_out} for e, f in self.engines.items()}


def _figures(pred) -> dict:
    return {k: float(v) for k, v in (pred.serving or {}).items() if k in ("latency_s", "ttft_s", "tpot_s", PER_TOKEN)}


def _terms(row, env: Environment) -> tuple[str, float, list[Term]]:
    """The row's engine, host time in force and terms (module docstring: two predictions)."""
    from gpucast.api import predict
    from gpucast.estimate.serving.engines import resolve
    from gpucast.hardware import get_gpu

    engine = resolve(row.job.serve, env, get_gpu(row.gpu))
    h0 = engine.host_per_iteration_s
    at0 = _figures(predict(row.job, row.gpu, env=env))
    at1 = _figures(predict(row.job, row.gpu, env=env.with_params({f"{PER_ENGINE}:{engine.name}": h0 + STEP_S})))
    terms = []
    for col, measured in row.serving:
        p0, p1 = at0[col], at1[col]
        if col == PER_TOKEN:
            terms.append(Term(p0, (1 / p1 - 1 / p0) / STEP_S, h0, measured, reciprocal=True))
        else:
            terms.append(Term(p0, (p1 - p0) / STEP_S, h0, measured))
    return engine.name, h0, terms


def fit_serving(rows: list, env: Environment, progress: Callable[[int, int], None] | None = None) -> ServingFit:
    """Each engine's host time per iteration fitted on ``rows`` (serving rows) over ``env``."""
    from gpucast.api import predict
    from gpucast.job import JobError

    out = ServingFit()
    by_engine: dict[str, list] = {}
    for i, row in enumerate(rows):
        try:
            name, h0, terms = _terms(row, env)
        except (JobError, ValueError, KeyError) as exc:
            out.unanswered.append(f"{row.label}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        else:
            by_engine.setdefault(name, []).append((row, h0, terms))
        if progress:
            progress(i + 1, len(rows))
    for name, items in by_engine.items():
        terms = [t for _, _, ts in items for t in ts]
        h0 = items[0][1]
        fitted = best_host(terms)
        groups = sorted({r.group for r, _, _ in items})
        held = None
        if len(groups) > 1:
            ape = []
            for g in groups:
                h = best_host([t for r, _, ts in items if r.group != g for t in ts])
                ape += [abs(t.at(h) / t.measured - 1) for r, _, ts in items if r.group == g for t in ts]
            held = statistics.median(ape)
        env_fit = env.with_params({f"{PER_ENGINE}:{name}": fitted})
        after = []
        for r, _, _ in items:
            got = _figures(predict(r.job, r.gpu, env=env_fit))
            after += [abs(got[col] / m - 1) for col, m in r.serving]
        out.engines[name] = EngineFit(engine=name, rows=len(items), groups=groups, prior_s=h0, fitted_s=fitted,
                                      mdape_before=mdape(terms, h0), mdape_after=statistics.median(after),
                                      mdape_held_out=held)
    return out


__all__ = ["HOST_GRID_S", "Term", "best_host", "mdape", "EngineFit", "ServingFit", "fit_serving"]
