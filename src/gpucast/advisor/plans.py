"""The parallel plans the advisor tries for a job that spans GPUs, and their predictions.

Used for a job with a ``parallel`` group (:class:`gpucast.plan.Parallel`) or when asked
(``advise(..., plans=True)``, ``gpucast advise --plans``). An option is then one way to lay the
job over GPUs; every number of it is ``gpucast.api.explain`` of that plan
(:mod:`gpucast.estimate.parallel`): nothing here re-derives a step time or a byte.

What is tried, for each GPU type (:func:`gpucast.advisor.search.gpu_types`) and precision (default:
the job's own, where the GPU runs it, :func:`gpucast.advisor.search.runs`):

* **GPU counts**: default 8, 16, 32, ..., 512 up to ``max_gpus`` (default 512). One GPU is always
  tried first (it shows whether the job needs more than one), and 2 and 4 GPUs are added when
  some plan fits on one. A count above ``gpus_per_node`` spans ``ceil(gpus / gpus_per_node)``
  nodes over the job's ``parallel.network``.
* **Sharding**: the job's, ``ddp``, ``zero1``, ``fsdp-full`` (ZeRO-3's layout) and, above one node,
  ``fsdp-hybrid``. With one data-parallel replica (``d = 1``) there is nothing to shard: that plan
  is tried once, as ``ddp``.
* **Tensor and pipeline degrees**: 1, 2, 4, 8 and the job's; tensor at most a node's GPUs (the job's
  ``gpus_per_node``, else the GPU's NVLink domain as :meth:`gpucast.plan.Parallel.resolved` sets it:
  72 on a GB200/GB300 NVL72 rack, 8 elsewhere);
  ``tensor x pipeline x context`` dividing the count (other shapes are not plans of that count).
* **Context, expert and virtual-pipeline degrees**: the job's own unless asked (``contexts``,
  ``experts``, ``virtuals``; ``--contexts``, ``--experts``, ``--virtual-pipelines``), except that a
  mixture-of-experts model whose job sets no expert degree tries 1 and :data:`EXPERT_LADDER`'s degrees
  that divide its routed experts; an expert
  degree must divide ``count / pipeline``, a virtual pipeline applies to ``pipeline`` > 1 only.
  Context parallelism uses replicas as tensor and pipeline do: a plan's level of model parallelism
  is ``tensor x pipeline x context``; expert parallelism folds into the same ranks and uses none.
* **Sequence parallelism**: the job's own unless asked (``sequence_parallel``, ``--sequence-parallel
  on,off``), tried at tensor degrees above 1 only (one tensor rank has no sequence to split).
* **Recompute**: none, selective, full.
* **Micro-batch**: the job's ``batch_size``, half of it and twice it. With the global batch kept
  (the default for plans: it is what the user trains with) the accumulation is what makes
  ``micro-batch x accumulation x d`` the job's global batch (its micro-batch x its ``grad_accum``
  x its ``d``); a micro-batch and ``d`` whose product does not divide it is skipped. Without
  keeping it, every plan accumulates the job's ``grad_accum`` micro-batches.

Bounds, each counted in the advice's notes. The first three follow from how the estimator's memory
and time grow; the fourth is a heuristic; the fifth a cap:

1. **Micro-batch ladder**: memory grows with the micro-batch, so once a plan does not fit, the
   same plan with a larger micro-batch and the same recompute is not tried.
2. **Recompute ladder**: memory falls and time grows with recompute (none, selective, full). Once
   a plan surely fits (``fits``, not ``risky``) the same plan with more recompute is not tried
   (slower at the same GPUs and price); once it does not fit with more recompute, it is not tried
   with less. For a job that needs recompute (the last plan tried without it did not fit) the
   ladder starts from full recompute, so that a hopeless plan costs one prediction.
3. **Across counts**: counts are tried from the largest down. Memory per GPU does not fall with
   fewer data-parallel replicas (shards grow; the pipeline keeps at least as many micro-batches
   in flight), so a plan that does not fit on more GPUs is not tried on fewer, as long as the
   fewer keep the same communicators: ``d > 1`` (a lone replica has no data-parallel
   communicator or gradient buckets) and, for ``fsdp-hybrid``, more than one node per pipeline
   stage (its replicas across nodes).
4. **Model parallelism**: for one count and sharding, ``tensor x pipeline`` levels are tried from 1
   up to the least level at which a plan fits (every pair of that level), and one level beyond
   only for what the least level could not surely fit: lighter recompute at a micro-batch, or a
   micro-batch that did not surely fit at all. More model parallelism than memory needs adds
   collectives and a pipeline bubble at the same GPUs; what it can buy is memory, for less
   recompute (Narayanan et al. 2021, "Efficient large-scale language model training on GPU
   clusters", sec. 3.3: model parallelism up to what fits, data parallelism beyond). A
   heuristic, not a proof: it can miss a plan one level up that is faster at the same recompute.
5. **max_plans** predictions at most (default :data:`MAX_PLANS`); the rest are counted.

A plan that cannot run (a tensor degree that does not divide the heads, more stages than layers,
ZeRO-2/3 with a pipeline, an accumulation above the limit: the job's or the estimator's
:class:`gpucast.job.JobError`) is skipped and counted by its one-line reason; the rest of the run
goes on.

At one count of one GPU type every plan costs the same per hour, so its cost per epoch is
proportional to its time per epoch: only the fastest fitting plan of each count can be on the
Pareto front; the others are listed (``--all``, JSON) for comparison.

One module of this size because the plan grid, its pruning and an option per plan are one search.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from gpucast.advisor.options import FITS, NO, Option, from_plan_prediction
from gpucast.advisor.prices import PriceTable
from gpucast.advisor.search import AdviseError, _data_source, gpu_types, routed_experts, runs
from gpucast.hardware import GpuSpec

DEFAULT_COUNTS = (8, 16, 32, 64, 128, 256, 512)
SMALL_COUNTS = (2, 4)          # added when a plan fits one GPU
MAX_GPUS = 512                 # the default cap of the plan search's counts
MAX_COUNT = 4096               # a job's largest GPU count (gpucast.job)
DEGREES = (1, 2, 4, 8)
SHARDINGS = ("ddp", "zero1", "fsdp-full", "fsdp-hybrid")
HYBRID = "fsdp-hybrid"         # shards within a node: tried above one node only
RECOMPUTE_ORDER = ("none", "selective", "full")  # memory falls, time grows
MAX_PLANS = 400                # predictions per advice (~0.05-0.1 s each once captured)

# Why plans were not predicted (bounds 1-5 of the module docstring), as the notes say it.
_PRUNED = {
    "micro": "the same plan with a smaller micro-batch already does not fit (memory grows with the micro-batch)",
    "recompute": "the same plan with less recompute surely fits and is faster at the same price",
    "counts": "the same plan does not fit on more GPUs (memory per GPU does not fall with fewer replicas)",
    "lighter": "the same plan with more recompute already does not fit (memory falls with recompute)",
    "level": "more tensor x pipeline parallelism than fitting needs (the least level that fits, and one beyond "
             "only for lighter recompute or a larger micro-batch)",
}


@dataclass(frozen=True)
class PlanSpace:
    """What the plan search will try (before any capture)."""

    gpus: tuple[GpuSpec, ...]
    counts: tuple[int, ...]
    grow_small: bool               # add SMALL_COUNTS when a plan fits one GPU
    max_gpus: int
    micro_batches: tuple[int, ...]
    precisions: tuple[str, ...]
    shardings: tuple[str, ...]
    tensors: tuple[int, ...]
    pipelines: tuple[int, ...]
    recomputes: tuple[str, ...]
    keep_global_batch: bool
    global_batch: int              # the job's: micro-batch x grad_accum x d
    grad_accum: int                # the job's
    gpus_per_node: int | None     # the job's (None: each GPU's NVLink domain, _Search.node)
    max_plans: int
    notes: tuple[str, ...]
    contexts: tuple[int, ...] = (1,)
    experts: tuple[int, ...] = (1,)
    virtuals: tuple[int, ...] = (1,)
    sequences: tuple[bool | None, ...] = (None,)   # sequence parallelism (None: the job's own)


# Expert degrees tried for a mixture-of-experts model whose job sets none (those dividing its routed
# experts): Megatron-Bridge's MoE recipes run expert parallelism of 8 (Mixtral, Qwen3-30B-A3B, GPT-OSS)
# up to 64 (DeepSeek-V3).
EXPERT_LADDER = (8, 16, 32, 64)


def _default_experts(job, e0: int) -> tuple[int, ...]:
    """The job's expert degree, or for a mixture-of-experts model whose job sets none, 1 and the
    :data:`EXPERT_LADDER` degrees that divide its routed experts."""
    n = routed_experts(job) if e0 == 1 else 0
    return (1,) + tuple(e for e in EXPERT_LADDER if e <= n and n % e == 0) if n else (e0,)


def _ints(name: str, values, lo: int, hi: int) -> tuple[int, ...]:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise AdviseError(f"{name} must be integers between {lo} and {hi}, got {v!r}")
    return tuple(sorted(set(values)))


def _names(name: str, values, allowed: Sequence[str]) -> tuple[str, ...]:
    for v in values:
        if v not in allowed:
            raise AdviseError(f"unknown {name} {v!r} ({', '.join(allowed)})")
    return tuple(dict.fromkeys(values))


def space(job, prices: PriceTable, gpus: Sequence[str | GpuSpec] | None = None, counts: Sequence[int] | None = None,
          batches: Sequence[int] | None = None, precisions: Sequence[str] | None = None,
          keep_global_batch: bool | None = None, max_gpus: int | None = None, provider: str | None = None,
          shardings: Sequence[str] | None = None, tensors: Sequence[int] | None = None,
          pipelines: Sequence[int] | None = None, recomputes: Sequence[str] | None = None,
          max_plans: int | None = None, contexts: Sequence[int] | None = None,
          experts: Sequence[int] | None = None, virtuals: Sequence[int] | None = None,
          global_batch: int | None = None, sequence_parallel: Sequence[bool] | None = None) -> PlanSpace:
    """Check the request and say which plans will be tried; an impossible request is one
    :class:`AdviseError`. ``batches`` are micro-batches here; ``global_batch`` (sequences) replaces
    the job's micro-batch x accumulation x replicas and keeps it."""
    from gpucast.job import PRECISIONS
    from gpucast.plan import RECOMPUTE, SHARDINGS as ALL_SHARDINGS, Parallel

    specs, notes = gpu_types(prices, gpus, provider)
    max_gpus = MAX_GPUS if max_gpus is None else max_gpus
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or not 1 <= max_gpus <= MAX_COUNT:
        raise AdviseError(f"max_gpus must be an integer between 1 and {MAX_COUNT}, got {max_gpus!r}")
    max_plans = MAX_PLANS if max_plans is None else max_plans
    if isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1:
        raise AdviseError(f"max_plans must be a positive integer, got {max_plans!r}")
    if counts:
        counts = _ints("GPU counts", counts, 1, MAX_COUNT)
        if max(counts) > max_gpus:
            raise AdviseError(f"GPU count {max(counts)} is above max_gpus {max_gpus}")
        grow = False
    else:
        counts = (1,) + tuple(c for c in DEFAULT_COUNTS if c <= max_gpus)
        grow = True
    if (job.data is not None and job.data.environment is not None) or _data_source(job) == "environment":
        if counts != (1,):
            notes.append("an RL job steps its environment in one process: not spread over GPUs here (1 GPU only)")
        counts, grow = (1,), False
    par = job.parallel or Parallel()
    t0, p0, m0, c0 = par.tensor or 1, par.pipeline or 1, par.grad_accum or 1, par.context or 1
    g = job.batch_size * m0 * (job.gpus // (t0 * p0 * c0))
    keep = True if keep_global_batch is None else bool(keep_global_batch)
    if global_batch is not None:
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
            raise AdviseError(f"the global batch must be a positive integer (sequences), got {global_batch!r}")
        if keep_global_batch is False:
            raise AdviseError("a global batch is kept by definition: drop keep_global_batch=False "
                              "(--no-keep-global-batch) or the global batch")
        g, keep = global_batch, True
    if batches:
        micro = _ints("micro-batch sizes", batches, 1, 1 << 20)
        bad = [b for b in micro if keep and g % b]
        if bad:
            raise AdviseError(f"micro-batch {bad[0]} does not divide the global batch {g} (keep_global_batch)")
    else:
        b = job.batch_size
        micro = tuple(sorted({v for v in (b // 2 if b % 2 == 0 else b, b, 2 * b) if not keep or g % v == 0}))
    if precisions:
        precisions = _names("precision", precisions, PRECISIONS)
    else:
        precisions = (job.precision,)
    if not any(runs(s, p) for s in specs for p in precisions):
        raise AdviseError(f"none of these GPUs runs {', '.join(precisions)}")
    shardings = (_names("sharding", shardings, ALL_SHARDINGS) if shardings else
                 tuple(dict.fromkeys(([par.sharding] if par.sharding else []) + list(SHARDINGS))))
    tensors = _ints("tensor degrees", tensors, 1, MAX_COUNT) if tensors else tuple(sorted(set(DEGREES) | {t0}))
    pipelines = _ints("pipeline degrees", pipelines, 1, MAX_COUNT) if pipelines else tuple(sorted(set(DEGREES) | {p0}))
    recomputes = _names("recompute", recomputes, RECOMPUTE) if recomputes else RECOMPUTE_ORDER
    recomputes = tuple(r for r in RECOMPUTE_ORDER if r in recomputes)
    contexts = _ints("context degrees", contexts, 1, MAX_COUNT) if contexts else (c0,)
    experts = _ints("expert degrees", experts, 1, MAX_COUNT) if experts else _default_experts(job, par.expert or 1)
    virtuals = _ints("virtual pipeline degrees", virtuals, 1, MAX_COUNT) if virtuals else (par.virtual_pipeline or 1,)
    if sequence_parallel:
        bad = [v for v in sequence_parallel if not isinstance(v, bool)]
        if bad:
            raise AdviseError(f"sequence parallelism must be true or false, got {bad[0]!r}")
        sequences = tuple(dict.fromkeys(sequence_parallel))
    else:
        sequences = (par.sequence,)
    return PlanSpace(specs, counts, grow, max_gpus, micro, precisions, shardings, tensors, pipelines, recomputes,
                     keep, g, m0, par.gpus_per_node, max_plans, tuple(notes), contexts, experts, virtuals, sequences)


def _less_recompute(rc: str, rcs: tuple[str, ...], failed: set) -> bool:
    """Whether a mode with more recompute than ``rc`` is known not to fit (so ``rc`` does not)."""
    return any(r in failed for r in rcs[rcs.index(rc) + 1:])


class _Search:
    """The search's state: options so far, what failed where, and the tallies for the notes."""

    def __init__(self, job, sp: PlanSpace, prices: PriceTable, samples: float | None, epochs: float, config, env,
                 provider: str | None, progress: Callable[[int, int], None] | None):
        self.job, self.sp, self.prices, self.samples, self.epochs = job, sp, prices, samples, epochs
        self.config, self.env, self.provider, self.progress = config, env, provider, progress
        self.options: list[Option] = []
        self.failed: dict[tuple, int] = {}     # plan without its count -> the largest count it did not fit
        self.skipped: Counter = Counter()      # one-line reason -> plans
        self.pruned: Counter = Counter()       # _PRUNED key or "cap" -> plans
        self.predicted = 0
        self._heavy_first = False  # the last plan predicted without recompute did not fit
        self.done = 0
        self.total = 0

    # ------------------------------------------------------------------ progress
    def _tick(self, n: int = 1) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)

    # ------------------------------------------------------------------ structure
    def node(self, spec: GpuSpec) -> int:
        """GPUs of a node of ``spec``: the job's ``gpus_per_node``, else the GPU's NVLink domain, else 8."""
        return self.sp.gpus_per_node or getattr(spec, "nvlink_domain", None) or 8

    def shapes(self, n: int, node: int) -> list[tuple]:
        """The (tensor, pipeline, context, expert, virtual, sequence) of count ``n`` on nodes of ``node``
        GPUs (module docstring)."""
        sp = self.sp
        one = sp.sequences if len(sp.sequences) == 1 else (None,)   # sequence parallelism at tensor 1: nothing
        return [(t, p, c, e, v, sq) for t in sp.tensors for p in sp.pipelines for c in sp.contexts
                for e in sp.experts for v in (sp.virtuals if p > 1 else (1,)) for sq in (sp.sequences if t > 1 else one)
                if t <= node and n % (t * p * c) == 0 and (n // p) % e == 0]

    def groups(self, n: int, seen: set, node: int) -> list[tuple[str, list[list[tuple]]]]:
        """Per sharding, the shapes (:meth:`shapes`) of count ``n`` by level ``t x p x c``; a lone
        replica's plan (``d = 1``) once, as ddp."""
        out = []
        for s in self.sp.shardings:
            if s == HYBRID and n <= node:
                continue
            levels: dict[int, list[tuple]] = {}
            for shape in self.shapes(n, node):
                t, p, c = shape[:3]
                s_eff = "ddp" if n == t * p * c else s
                if (s_eff,) + shape in seen:
                    continue
                seen.add((s_eff,) + shape)
                levels.setdefault(t * p * c, []).append(shape)
            if levels:
                out.append((s, [levels[k] for k in sorted(levels)]))
        return out

    def cells(self, d: int) -> list[tuple[int, int | None]]:
        """(micro-batch, accumulation) of a plan with ``d`` replicas; accumulation None: the global
        batch is not a multiple of micro-batch x d."""
        sp = self.sp
        if not sp.keep_global_batch:
            return [(b, sp.grad_accum) for b in sp.micro_batches]
        return [(b, sp.global_batch // (b * d) if sp.global_batch % (b * d) == 0 else None) for b in sp.micro_batches]

    def size(self, n: int, node: int) -> int:
        """Plans of count ``n`` on nodes of ``node`` GPUs (for the progress bar)."""
        per = len(self.sp.micro_batches) * len(self.sp.recomputes)
        return sum(per for _, levels in self.groups(n, set(), node) for lv in levels for _ in lv)

    # ------------------------------------------------------------------ the search
    def gpu(self, spec: GpuSpec, prec: str) -> None:
        price = self.prices.price(spec.name, self.provider)
        self._heavy_first = False
        counts = list(self.sp.counts)
        if 1 in counts:
            self.count(spec, prec, price, 1)
            counts.remove(1)
            if self.sp.grow_small and any(o.gpus == 1 and o.memory_fit != NO and o.gpu == spec.name
                                          and o.precision == prec for o in self.options):
                extra = [c for c in SMALL_COUNTS if c <= self.sp.max_gpus and c not in counts]
                self.total += sum(self.size(c, self.node(spec)) for c in extra)
                counts += extra
        for n in sorted(counts, reverse=True):
            self.count(spec, prec, price, n)

    def count(self, spec: GpuSpec, prec: str, price, n: int) -> None:
        """Every sharding's plans of ``n`` GPUs, by level of model parallelism (bound 4)."""
        per = len(self.sp.micro_batches) * len(self.sp.recomputes)
        for s, levels in self.groups(n, set(), self.node(spec)):
            fit_at, lightest = None, {}  # the least level that fits; its lightest safe recompute per micro-batch
            for i, level in enumerate(levels):
                beyond = fit_at is not None
                if beyond and (i > fit_at + 1 or all(lightest.get(b) == 0 for b in self.sp.micro_batches)):
                    k = sum(len(lv) for lv in levels[i:]) * per
                    self.pruned["level"] += k
                    self._tick(k)
                    break
                fitted = False
                for shape in level:
                    s_eff = "ddp" if n == shape[0] * shape[1] * shape[2] else s
                    ok, safe = self.group(spec, prec, price, n, s_eff, shape, lightest if beyond else None)
                    fitted = fitted or ok
                    if not beyond:
                        for b, r in safe.items():
                            lightest[b] = min(r, lightest.get(b, r))
                if fit_at is None and fitted:
                    fit_at = i

    def group(self, spec: GpuSpec, prec: str, price, n: int, s: str, shape: tuple,
              lighter_than: dict | None = None) -> tuple[bool, dict[int, int]]:
        """The plans of one (count, sharding, shape): micro-batches up, each with the
        recompute ladder (:meth:`ladder`); bounds 1-3 and 5, and with ``lighter_than`` (micro-batch
        -> index of a recompute mode) only lighter modes (bound 4). Returns whether a plan fits
        (``fits`` or ``risky``) and, per micro-batch, the index of the lightest recompute mode that
        surely fits."""
        d = n // (shape[0] * shape[1] * shape[2])
        rcs = self.sp.recomputes
        fitted, safe = False, {}
        failed_rc: set = set()
        cells = self.cells(d)
        for ci, (b, acc) in enumerate(cells):
            if acc is None:
                self.skipped[f"micro-batch x data-parallel replicas does not divide the global batch "
                             f"{self.sp.global_batch}"] += len(rcs)
                self._tick(len(rcs))
                continue
            if rcs[-1] in failed_rc:  # the most recompute did not fit a smaller micro-batch: nothing larger will
                left = (len(cells) - ci) * len(rcs)
                self.pruned["micro"] += left
                self._tick(left)
                break
            allowed = rcs[:lighter_than.get(b, len(rcs))] if lighter_than is not None else rcs
            if len(allowed) < len(rcs):
                self.pruned["level"] += len(rcs) - len(allowed)
                self._tick(len(rcs) - len(allowed))
            if not allowed:
                continue
            ok, light, why, ticked = self.ladder(spec, prec, price, n, s, shape, b, acc, allowed, failed_rc)
            if why:  # the plan cannot run (its recompute mode does not change that)
                self.skipped[why] += len(allowed) - ticked
                self._tick(len(allowed) - ticked)
            fitted = fitted or ok
            if light is not None:
                safe[b] = light
        return fitted, safe

    def ladder(self, spec: GpuSpec, prec: str, price, n: int, s: str, shape: tuple, b: int, acc: int,
               allowed: tuple[str, ...], failed_rc: set) -> tuple[bool, int | None, str, int]:
        """One micro-batch's recompute modes (``allowed``, lightest first): (whether one fits, the
        index of the lightest that surely fits or None, why the plan cannot run or "", modes done
        before it stopped).

        Memory falls and time grows with recompute. Forward (from no recompute up), the first mode
        that surely fits ends the ladder: the rest are slower at the same price. Backward (from
        full recompute down), the first mode that does not fit ends it: the lighter ones hold more.
        The ladder runs backward when no recompute did not fit a smaller micro-batch of this plan,
        or the last plan predicted without recompute did not fit (a job that needs recompute
        somewhere: one prediction then shows a hopeless plan)."""
        rcs = self.sp.recomputes
        backward = rcs[0] in failed_rc or self._heavy_first
        order = tuple(reversed(allowed)) if backward else allowed
        ok, light, done = False, None, False
        for i, rc in enumerate(order):
            key = (spec.name, prec, s, *shape, rc, b)
            if done:
                self.pruned["recompute"] += 1
            elif rc in failed_rc:
                self.pruned["micro"] += 1
            elif _less_recompute(rc, rcs, failed_rc):
                self.pruned["lighter"] += 1
                failed_rc.add(rc)
            elif self.failed.get(key, 0) > n and self._same_buffers(s, n, shape, self.node(spec)):
                self.pruned["counts"] += 1
                failed_rc.add(rc)
            elif self.predicted >= self.sp.max_plans:
                self.pruned["cap"] += 1
            else:
                opt, why = self.one(spec, prec, price, n, s, shape, rc, b, acc)
                if opt is None:
                    return ok, light, why, i
                if rc == rcs[0]:
                    self._heavy_first = opt.memory_fit == NO
                if opt.memory_fit == NO:
                    failed_rc.add(rc)
                    self.failed[key] = max(self.failed.get(key, 0), n)
                else:
                    ok = True
                    if opt.memory_fit == FITS:
                        light = min(rcs.index(rc), light if light is not None else len(rcs))
                        done = not backward
            self._tick()
        return ok, light, "", len(order)

    def _same_buffers(self, s: str, n: int, shape: tuple, node: int) -> bool:
        """Whether ``n`` GPUs keep the communicators of the larger count (bound 3): more than one
        data-parallel replica, and for fsdp-hybrid more than one node per pipeline stage."""
        t, p, c = shape[:3]
        return n > t * p * c and (s != HYBRID or n > p * node)

    def one(self, spec: GpuSpec, prec: str, price, n: int, s: str, shape: tuple, rc: str, b: int,
            acc: int) -> tuple[Option | None, str]:
        from gpucast.api import explain
        from gpucast.job import JobError
        from gpucast.plan import replace_parallel

        t, p, c, e, v, sq = shape
        par = replace_parallel(self.job.parallel, tensor=t, pipeline=p, sharding=s, recompute=rc, grad_accum=acc,
                               context=c if c > 1 else None, expert=e if e > 1 else None,
                               virtual_pipeline=v if v > 1 else None, sequence=sq)
        try:
            job = self.job.with_(batch_size=b, precision=prec, gpus=n, parallel=par)
            pred = explain(job, spec, self.config, self.env).prediction
        except JobError as exc:
            return None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        self.predicted += 1
        if self.samples is None:
            self.samples = pred.surroundings.get("data", {}).get("dataset_samples")
            if not self.samples:
                raise AdviseError("the job names no dataset size: give samples per epoch (--samples-per-epoch N)")
        opt = from_plan_prediction(pred, price, self.samples, self.epochs, spec.memory_bytes)
        self.options.append(opt)
        return opt, ""

    def notes(self) -> list[str]:
        sp = self.sp
        out = [f"{self.predicted} plans predicted of {self.total} considered"]
        out += [f"{k} plans skipped: {why}" for why, k in self.skipped.most_common()]
        out += [f"{self.pruned[k]} plans not tried: {why}" for k, why in _PRUNED.items() if self.pruned[k]]
        if self.pruned["cap"]:
            out.append(f"{self.pruned['cap']} plans not tried: over the bound of {sp.max_plans} predictions "
                       f"(max_plans, --max-plans; or narrow the search with --counts, --shardings, --tensors, "
                       f"--pipelines, --contexts, --experts, --virtual-pipelines, --recomputes)")
        return out


def evaluate(job, sp: PlanSpace, prices: PriceTable, samples_per_epoch: float | None, epochs: float,
             config=None, env=None, provider: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> tuple[list[Option], float, list[str]]:
    """Every plan of the space that the bounds leave, predicted: (options, samples per epoch used, notes)."""
    s = _Search(job, sp, prices, samples_per_epoch, epochs, config, env, provider, progress)
    pairs = [(spec, prec) for spec in sp.gpus for prec in sp.precisions if runs(spec, prec)]
    s.total = sum(s.size(n, s.node(spec)) for spec, _ in pairs for n in sp.counts)
    if progress is not None:
        progress(0, s.total)
    for spec, prec in pairs:
        s.gpu(spec, prec)
    notes = s.notes()
    gone = [f"{spec.name} {prec}" for spec in sp.gpus for prec in sp.precisions if not runs(spec, prec)]
    if gone:
        notes.append(f"not tried (the GPU does not run the precision): {', '.join(gone)}")
    return s.options, float(s.samples or 0), notes
