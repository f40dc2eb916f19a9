"""The advice on one job: :func:`advise` searches, prices and ranks the options and returns an :class:`Advice`
(the options tried, the time/cost front, the recommendation and why); the package's docstring,
:mod:`gpucast.advisor`, says how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from gpucast.advisor.front import pareto, recommend
from gpucast.advisor.options import NO, Option
from gpucast.advisor.prices import PriceTable
from gpucast.advisor.prices import load as load_prices
from gpucast.advisor.search import AdviseError, plan as _plan, evaluate as _evaluate


@dataclass(frozen=True)
class Advice:
    """The options tried (by cost per epoch), the front (indices into ``options``), the recommendation."""

    job: dict
    samples_per_epoch: float
    epochs: float
    deadline_s: float | None
    budget_usd: float | None
    prices: PriceTable
    options: tuple[Option, ...]
    front: tuple[int, ...]
    recommended: int | None
    message: str
    model_version: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    plans: bool = False          # the options are parallel plans (gpucast.advisor.plans)

    @property
    def best(self) -> Option | None:
        return self.options[self.recommended] if self.recommended is not None else None

    @property
    def front_options(self) -> list[Option]:
        return [self.options[i] for i in self.front]

    def shown(self) -> list[int]:
        """The front and the recommended option where it is not on it (a safe pick off a risky
        front), by time per epoch: the rows the table and the report show."""
        rows = set(self.front) | ({self.recommended} if self.recommended is not None else set())
        return sorted(rows, key=lambda i: self.options[i].epoch_s)

    def to_dict(self) -> dict:
        return {"job": self.job, "samples_per_epoch": self.samples_per_epoch, "epochs": self.epochs,
                "deadline_s": self.deadline_s, "budget_usd": self.budget_usd,
                "prices": {"name": self.prices.name, "origin": self.prices.origin, "currency": self.prices.currency},
                "options": [dict(o.to_dict(), on_front=i in self.front) for i, o in enumerate(self.options)],
                "front": list(self.front), "recommended": self.recommended,
                "recommended_id": self.best.id if self.best is not None else None,
                "message": self.message, "model_version": self.model_version, "notes": list(self.notes),
                "plans": self.plans}


def _positive(name: str, v, unit: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v or v == float("inf"):
        raise AdviseError(f"{name} must be a positive number of {unit}, got {v!r}")
    return float(v)


def advise(job, gpus: Sequence | None = None, *, counts: Sequence[int] | None = None,
           batches: Sequence[int] | None = None, precisions: Sequence[str] | None = None,
           keep_global_batch: bool | None = None, share: bool = True, max_gpus: int | None = None,
           prices: PriceTable | str | None = None, provider: str | None = None,
           samples_per_epoch: int | None = None, epochs: float = 1.0,
           deadline_s: float | None = None, budget_usd: float | None = None,
           config=None, env=None, progress: Callable[[int, int], None] | None = None,
           plans: bool = False, shardings: Sequence[str] | None = None, tensors: Sequence[int] | None = None,
           pipelines: Sequence[int] | None = None, recomputes: Sequence[str] | None = None,
           max_plans: int | None = None, contexts: Sequence[int] | None = None,
           experts: Sequence[int] | None = None, virtual_pipelines: Sequence[int] | None = None,
           global_batch: int | None = None, sequence_parallel: Sequence[bool] | None = None) -> Advice:
    """Advise on where and how to run ``job`` (a :class:`~gpucast.job.Job`, zoo name or dict).

    ``gpus``: GPU names or specs to consider (default: every priced catalog GPU); ``counts``: data-
    parallel GPU counts (default 1, 2, 4, 8 up to ``max_gpus``, 8 by default); ``batches``: per-GPU
    batch sizes (default: the job's and 2x/4x/8x; with ``keep_global_batch`` micro-batches of the
    job's global batch, with accumulation); ``precisions`` (default: fp32, amp-fp16, amp-bf16 and the
    job's, each where the GPU runs it); ``share``: also offer a fraction of one GPU to small jobs;
    ``prices``: a :class:`PriceTable`, a packaged name or a file (default ``cloud-2024``);
    ``provider``: only that provider's offers; ``samples_per_epoch`` (default: the workload's dataset
    size); ``epochs`` per run; ``deadline_s`` and ``budget_usd`` for the whole run.

    ``plans`` (implied by a job with a ``parallel`` group): search parallel plans instead
    (:mod:`gpucast.advisor.plans`): ``counts`` default 1 and 8-512 (up to ``max_gpus``, 512 by
    default), ``batches`` are micro-batches (default the job's, half, twice), ``precisions``
    default the job's, ``keep_global_batch`` defaults to True, ``shardings``/``tensors``/
    ``pipelines``/``recomputes`` narrow the search, ``contexts``/``experts``/``virtual_pipelines``
    widen it (default: the job's degree), ``sequence_parallel`` (``[True, False]``: both) tries sequence
    parallelism on and off (default: the job's), ``global_batch`` (sequences) is the batch every plan keeps,
    ``max_plans`` bounds the predictions; ``share`` does not apply."""
    from gpucast.api import _as_job, model_version

    job = _as_job(job)
    if job.is_module and job.model_fn is None:
        raise AdviseError("a module job needs its factories (Job.from_module)")
    epochs = _positive("epochs", epochs, "epochs")
    deadline_s = _positive("deadline", deadline_s, "seconds")
    budget_usd = _positive("budget", budget_usd, "USD")
    if samples_per_epoch is not None and (isinstance(samples_per_epoch, bool) or not isinstance(samples_per_epoch, int)
                                          or samples_per_epoch < 1):
        raise AdviseError(f"samples per epoch must be a positive integer, got {samples_per_epoch!r}")
    plans = bool(plans) or job.parallel is not None
    if not plans:
        given = [n for n, v in (("shardings", shardings), ("tensors", tensors), ("pipelines", pipelines),
                                ("recomputes", recomputes), ("max_plans", max_plans), ("contexts", contexts),
                                ("experts", experts), ("virtual_pipelines", virtual_pipelines),
                                ("global_batch", global_batch), ("sequence_parallel", sequence_parallel))
                 if v is not None]
        if given:
            raise AdviseError(f"{given[0]} applies to the plan search (plans=True, --plans, or a job with a "
                              f"parallel group)")
    if gpus:
        from gpucast.hardware import get_gpu

        gpus = [get_gpu(g) for g in gpus]  # spec files read once; plan() takes the specs as they are
    table = prices if isinstance(prices, PriceTable) else load_prices(prices, [g.name for g in gpus or ()])
    if plans:
        from gpucast.advisor import plans as _plans

        sp = _plans.space(job, table, gpus, counts, batches, precisions, keep_global_batch, max_gpus, provider,
                          shardings, tensors, pipelines, recomputes, max_plans, contexts, experts,
                          virtual_pipelines, global_batch, sequence_parallel)
        options, samples, notes = _plans.evaluate(job, sp, table, samples_per_epoch, epochs, config, env, provider,
                                                  progress)
        keep, g, plan_notes = sp.keep_global_batch, sp.global_batch, list(sp.notes)
    else:
        p = _plan(job, table, gpus, counts, batches, precisions, bool(keep_global_batch), share,
                  8 if max_gpus is None else max_gpus, provider)
        options, samples, notes = _evaluate(job, p, table, samples_per_epoch, epochs, config, env, provider, progress)
        keep, g, plan_notes = p.keep_global_batch, p.global_batch, list(p.notes)
    order = sorted(range(len(options)), key=lambda i: (options[i].memory_fit == NO, options[i].cost_per_epoch,
                                                       options[i].epoch_s))
    options = [options[i] for i in order]
    front = pareto(options)
    best, message = recommend(options, deadline_s, budget_usd)
    if plans and keep:
        notes.append(f"global batch kept at {g} (micro-batch x accumulation x data-parallel replicas); a plan's "
                     f"step is one optimizer step: every micro-batch, the pipeline bubble, the collectives")
    elif plans:
        notes.append("the global batch changes with the data-parallel degree and micro-batch: convergence per "
                     "epoch may differ (not modelled)")
    elif keep:
        notes.append(f"global batch kept at {g}: accumulation steps cost a whole step each "
                     f"(optimizer included: an upper bound)")
    else:
        notes.append("batch sizes other than the job's change the global batch: convergence per epoch may differ "
                     "(not modelled)")
    return Advice(job=job.to_dict(), samples_per_epoch=samples, epochs=epochs, deadline_s=deadline_s,
                  budget_usd=budget_usd, prices=table, options=tuple(options), front=tuple(front),
                  recommended=best, message=message, model_version=model_version(env),
                  notes=tuple(plan_notes) + tuple(notes), plans=plans)
