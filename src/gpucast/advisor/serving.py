"""Sizing an LLM deployment: which GPU type, how many (tensor parallelism), which precision and engine,
and how many replicas of it, meet a latency target at the job's load for the fewest dollars per million
output tokens.

Every candidate is the job (``mode: serve``) with one GPU type, tensor degree, precision and engine,
predicted by :func:`gpucast.api.predict` (its ``serving`` run: gpucast.estimate.serving). A candidate
is feasible when the deployment fits in memory, every request of the run finishes, the p90 time to
first token and the p90 time per output token are within the targets, and, for a Poisson load, it
keeps up (over the run, less one typical latency, it serves at least 95 % of the rate requests arrived
at: a deployment that falls behind ends its run with a queue). Its cost per million output tokens is its GPUs'
hourly price over the tokens it generates in an hour at the load (the load's own rate when it keeps
up: a deployment is paid for by the hour, busy or not). The cheapest feasible candidate is the answer.

Replicas (``replicas``: at most that many copies of a deployment behind a load balancer, 1 by default):
a candidate that misses a latency target or falls behind its load with one replica is tried with 2, 4,
... copies, each serving its share of the load (:func:`replica_share`), until one count meets the
targets; the answer is the smallest such count. The load balancer sends each request to a replica at
random, so a Poisson stream of rate ``lambda`` reaches each of ``r`` replicas as a Poisson stream of
rate ``lambda / r`` (the splitting property of Poisson processes); a closed loop of ``C`` requests in
flight keeps ``ceil(C / r)`` on each and a static batch of ``B`` prompts gives each ``ceil(B / r)``.
Identical replicas under identical loads have the same latency distribution, so one replica's run is
the fleet's percentiles; the fleet generates ``r`` times its tokens and costs ``r`` times its GPUs.

Layouts (``layouts``): ``tp`` spreads every layer over the ``t`` ranks (tensor parallelism; a
mixture-of-experts model's experts too); ``dep`` runs a mixture-of-experts model's attention
data-parallel over them and its experts expert-parallel (``parallel.attention_dp`` with ``expert = t``,
TensorRT-LLM's and SGLang's DEP layouts: each rank its own requests and cache,
:mod:`gpucast.estimate.serving.stages`). A mixture-of-experts model is tried both ways unless told
otherwise, a dense one as ``tp``. A job that drafts (``serve.spec_method``) is tried with its drafter and
without (the ``spec`` column): speculation shortens a step's tokens at low load and costs draft passes and
verified tokens at high load; ``spec_tokens`` tries other draft counts, the job's acceptance carried to each
(:func:`gpucast.estimate.serving.speculative.acceptance_at`). ``pd`` (asked for by name) splits ``r >= 2``
replicas into prefill and decode sides (``serve.prefill_replicas``: :mod:`gpucast.estimate.serving.disagg`),
the whole load on the one deployment, the prefill side a quarter or a half of the replicas
(:data:`PD_SHARES`), each prefill instance at the decode side's tensor degree or at each of
``prefill_tensors`` (``serve.prefill_tensor``), the cheaper feasible split kept.

Not modelled: routing smarter than random (least-loaded or prefix-affine balancers shorten queues and
raise prefix-cache hits), pipeline parallelism, autoscaling, the price of the CPU hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from gpucast.job import Job, JobError
from gpucast.serving import Serve

DEFAULT_TENSORS = (1, 2, 4, 8)
# Data-center GPUs of the catalog a deployment is usually sized on, when the caller names none.
DEFAULT_GPUS = ("l4", "a10", "a100-40gb", "a100-80gb", "h100", "h200", "b200")
LAYOUTS = ("tp", "dep", "pd")
# Disaggregated candidates ("pd"): the prefill side's shares of the replicas tried (at least one replica each side).
PD_SHARES = (0.25, 0.5)
DEFAULT_ENGINES = ("vllm",)
KEEP_UP = 0.95  # share of a Poisson load's rate a deployment must serve to count as keeping up


@dataclass
class ServingOption:
    gpu: str
    tensor: int
    precision: str
    engine: str
    feasible: bool
    why: str
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    output_tokens_per_s: float | None = None
    usd_per_gpu_hour: float | None = None
    usd_per_million_tokens: float | None = None
    replicas: int = 1  # copies of the deployment behind a load balancer (the tensor degree's GPUs each)
    layout: str = "tp"  # tp | dep | pd (LAYOUTS)
    prefill_replicas: int | None = None   # pd: the replicas that prefill (the others decode)
    spec: str | None = None               # the speculative decoding method it drafts with (serve.spec_method)
    spec_tokens: int | None = None        # its drafts a step (serve.spec_tokens)
    prefill_tensor: int | None = None     # pd: a prefill instance's tensor degree (None: the decode side's)

    @property
    def gpu_count(self) -> int:
        """GPUs of the whole fleet (:func:`fleet_gpus`)."""
        return fleet_gpus(self.tensor, self.replicas, self.prefill_replicas, self.prefill_tensor)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class ServingAdvice:
    options: list[ServingOption]
    best: int | None
    message: str
    targets: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"options": [o.to_dict() for o in self.options], "best": self.best, "message": self.message,
                "targets": self.targets}


def fleet_gpus(tensor: int, replicas: int, prefill: int | None = None, prefill_tensor: int | None = None) -> int:
    """GPUs of ``replicas`` copies of a ``tensor``-GPU deployment; of a pd split, ``prefill`` of them prefill
    instances of ``prefill_tensor`` GPUs each (the decode side's degree when unset)."""
    if not prefill:
        return tensor * replicas
    return prefill * (prefill_tensor or tensor) + (replicas - prefill) * tensor


def replica_share(job: Job, r: int) -> Job:
    """The load one of ``r`` replicas serves (module docstring): a Poisson rate over ``r``, a closed loop's
    requests in flight or a static batch's prompts shared out, ``ceil`` of their share each."""
    if r == 1:
        return job
    serve = job.serve or Serve()
    if serve.load == "poisson":
        return job.with_(serve=replace(serve, request_rate=serve.request_rate / r))
    if serve.load == "closed":
        return job.with_(serve=replace(serve, concurrency=math.ceil(serve.concurrency / r)))
    return job.with_(batch_size=math.ceil(job.batch_size / r), serve=replace(serve, num_requests=None))


def _candidate(job: Job, gpu: str, t: int, precision: str, engine: str, r: int = 1, layout: str = "tp",
               prefill: int | None = None, prefill_tensor: int | None = None) -> Job:
    serve = replace(job.serve or Serve(), engine=engine)
    if layout == "pd":   # one disaggregated deployment of r replicas takes the whole load
        return job.with_(precision=precision, gpus=fleet_gpus(t, r, prefill, prefill_tensor),
                         parallel=dict(tensor=t) if t > 1 else None,
                         serve=replace(serve, prefill_replicas=prefill, prefill_tensor=prefill_tensor))
    par = (dict(tensor=t, expert=t, attention_dp=True) if layout == "dep" else dict(tensor=t)) if t > 1 else None
    one = job.with_(precision=precision, gpus=t, parallel=par, serve=serve)
    return replica_share(one, r)


def default_layouts(job: Job) -> tuple[str, ...]:
    """``tp`` and ``dep`` for a mixture-of-experts model (its config names routed experts), else ``tp``."""
    from gpucast.advisor.search import routed_experts

    return ("tp", "dep") if routed_experts(job) else ("tp",)


def _replica_counts(most: int) -> list[int]:
    """1, 2, 4, ... up to ``most`` (``most`` itself last when it is not a power of two)."""
    out, r = [], 1
    while r < most:
        out.append(r)
        r *= 2
    return out + [most]


def advise_serving(job: Job, gpus: Sequence[str], *, tensors: Sequence[int] = DEFAULT_TENSORS,
                   precisions: Sequence[str] | None = None, engines: Sequence[str] = DEFAULT_ENGINES,
                   ttft_s: float | None = None, tpot_s: float | None = None, prices=None, provider: str | None = None,
                   progress: Callable[[int, int], None] | None = None, predict=None,
                   replicas: int = 1, layouts: Sequence[str] | None = None,
                   spec_tokens: Sequence[int] | None = None,
                   prefill_tensors: Sequence[int] | None = None) -> ServingAdvice:
    """The cheapest deployment of ``job`` meeting the targets, with at most ``replicas`` copies of it
    (module docstring)."""
    from gpucast.advisor import prices as price_tables

    if job.mode != "serve":
        raise JobError("advise --serve takes a mode 'serve' job (an LLM deployment)")
    for name, v in (("ttft", ttft_s), ("tpot", tpot_s)):
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise JobError(f"--{name} must be positive seconds, got {v!r}")
    if not (isinstance(replicas, int) and not isinstance(replicas, bool) and 1 <= replicas <= 1024):
        raise JobError(f"--replicas must be a whole number from 1 to 1024, got {replicas!r}")
    if predict is None:
        from gpucast.api import predict
    table = prices if isinstance(prices, price_tables.PriceTable) else price_tables.load(prices)
    precisions = list(precisions or [job.precision])
    layouts = tuple(layouts or default_layouts(job))
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad:
        raise JobError(f"--layouts takes {', '.join(LAYOUTS)}, got {', '.join(bad)}")
    # a DEP layout of one GPU is the TP one: tried once
    serve = job.serve or Serve()
    # a job that drafts (serve.spec_method) is tried with its drafter and without: speculation pays at low load
    variants = _draft_variants(job, serve, spec_tokens) + (
        [job.with_(serve=replace(serve, spec_method=None, spec_tokens=None, spec_acceptance=None, draft_model=None))]
        if serve.spec_method else [])
    pts = _whole_numbers(prefill_tensors, "--prefill-tensors")
    if pts and "pd" not in layouts:
        raise JobError("--prefill-tensors sizes the prefill instances of a disaggregated layout: add pd to --layouts")
    combos = [(g, t, p, e, x, v) for g in gpus for t in tensors for p in precisions for e in engines
              for x in layouts for v in variants if not (x == "dep" and t == 1 and "tp" in layouts)]
    options = []
    for i, (g, t, p, e, x, v) in enumerate(combos):
        usd = (table.price(g, provider) or _NO_PRICE).usd_per_gpu_hour

        def one(r):
            option, bound = _option(v, v.serve or Serve(), predict, g, t, p, e, r, usd, ttft_s, tpot_s, x, pts)
            if v.serve is not None and v.serve.spec_method:
                option.spec, option.spec_tokens = v.serve.spec_method, v.serve.spec_tokens or 1
            return option, bound
        below = 0  # the most replicas known to fall short of the targets
        for r in _replica_counts(replicas):
            option, load_bound = one(r)
            if option.feasible or not load_bound:
                break  # more replicas only help a deployment that its load holds back
            below = r
        if option.feasible:  # the fewest replicas between the last count that fell short and this one
            above = option.replicas
            while above - below > 1:
                mid = (above + below) // 2
                trial, _ = one(mid)
                if trial.feasible:
                    above, option = mid, trial
                else:
                    below = mid
        options.append(option)
        if progress is not None:
            progress(i + 1, len(combos))
    feasible = [i for i, o in enumerate(options) if o.feasible]
    best = min(feasible, key=lambda i: options[i].usd_per_million_tokens) if feasible else None
    targets = {"ttft_p90_s": ttft_s, "tpot_p90_s": tpot_s, "load": serve.load, "request_rate": serve.request_rate}
    if best is None:
        message = f"no deployment of the {len(options)} tried meets the targets"
    else:
        o = options[best]
        copies = f"{o.replicas} replicas of " if o.replicas > 1 else ""
        shape = ", attention DP + expert parallel" if o.layout == "dep" and o.tensor > 1 else ""
        if o.layout == "pd":
            decode = o.replicas - o.prefill_replicas
            copies = f"{o.replicas} replicas ({o.prefill_replicas} prefill, {decode} decode) of "
            shape = ", disaggregated" + (f", prefill on {o.prefill_tensor} GPUs each"
                                         if o.prefill_tensor and o.prefill_tensor != o.tensor else "")
        if o.spec:
            shape += f", {o.spec} speculation ({o.spec_tokens} drafts a step)"
        message = (f"{copies}{o.tensor} x {o.gpu} ({o.precision}, {o.engine}{shape}): p90 TTFT {o.ttft_p90_s:.3g} s, "
                   f"p90 TPOT "
                   f"{o.tpot_p90_s * 1e3:.3g} ms, {o.output_tokens_per_s:.0f} output tokens/s, "
                   f"${o.usd_per_million_tokens:.2f} per million output tokens: the cheapest of {len(feasible)} "
                   f"that meet the targets ({len(options)} tried)")
    return ServingAdvice(options, best, message, targets)


def _whole_numbers(values, flag: str) -> list[int]:
    out = list(values or [])
    bad = [v for v in out if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024)]
    if bad:
        raise JobError(f"{flag} takes whole numbers from 1 to 1024, got {bad[0]!r}")
    return out


def _draft_variants(job: Job, serve: Serve, spec_tokens) -> list[Job]:
    """The job at each of ``spec_tokens`` drafts a step (its own count when none are given), its acceptance
    carried to each count (:func:`gpucast.estimate.serving.speculative.acceptance_at`)."""
    counts = _whole_numbers(spec_tokens, "--spec-tokens")
    if not counts:
        return [job]
    if not serve.spec_method:
        raise JobError("--spec-tokens tries draft counts of a job that drafts: set serve.spec_method "
                       "(and serve.spec_acceptance)")
    if any(k > 16 for k in counts):
        raise JobError(f"--spec-tokens takes 1 to 16 drafts a step, got {max(counts)}")
    from gpucast.estimate.serving.speculative import acceptance_at

    k0 = serve.spec_tokens or 1
    return [job.with_(serve=replace(serve, spec_tokens=k, spec_acceptance=acceptance_at(serve.spec_acceptance, k0, k)))
            for k in dict.fromkeys(counts)]


class _NoPrice:
    usd_per_gpu_hour = None


_NO_PRICE = _NoPrice()


def _option(job: Job, serve: Serve, predict, g: str, t: int, p: str, e: str, r: int, usd: float | None,
            ttft_s: float | None, tpot_s: float | None, layout: str = "tp",
            prefill_tensors: Sequence[int] = ()) -> tuple[ServingOption, bool]:
    """One candidate with ``r`` replicas, and whether what it misses is its load's doing (latency, a queue,
    requests left unfinished): more replicas may then meet the targets. ``pd``: the cheaper feasible of its
    splits (:data:`PD_SHARES` x the prefill instances' degrees), else the first."""
    if layout != "pd":
        return _split_option(job, serve, predict, g, t, p, e, r, usd, ttft_s, tpot_s, layout, None)
    if r < 2:
        return ServingOption(g, t, p, e, False, "disaggregation needs 2 replicas or more", replicas=r,
                             layout=layout), True
    tried = [_split_option(job, serve, predict, g, t, p, e, r, usd, ttft_s, tpot_s, layout, k, pt)
             for k in sorted({min(r - 1, max(1, round(r * f))) for f in PD_SHARES})
             for pt in [None] + [x for x in prefill_tensors if x != t]]
    ok = [x for x in tried if x[0].feasible]
    return min(ok, key=lambda x: x[0].usd_per_million_tokens) if ok else tried[0]


def _split_option(job: Job, serve: Serve, predict, g: str, t: int, p: str, e: str, r: int, usd: float | None,
                  ttft_s: float | None, tpot_s: float | None, layout: str,
                  prefill: int | None, prefill_tensor: int | None = None) -> tuple[ServingOption, bool]:
    try:
        pred = predict(_candidate(job, g, t, p, e, r, layout, prefill, prefill_tensor), g)
    except JobError as exc:
        return ServingOption(g, t, p, e, False, str(exc), replicas=r, layout=layout, prefill_replicas=prefill,
                             prefill_tensor=prefill_tensor), False
    s = pred.serving
    why, load = [], []
    if not pred.fits_in_memory:
        why.append("does not fit")
    if s["finished"] < s["requests"]:
        load.append(f"{s['requests'] - s['finished']} requests never finish")
    if ttft_s is not None and not s["ttft_p90_s"] <= ttft_s:
        load.append(f"p90 TTFT {s['ttft_p90_s']:.3g} s > {ttft_s:g} s")
    if tpot_s is not None and not s["tpot_p90_s"] <= tpot_s:
        load.append(f"p90 TPOT {s['tpot_p90_s'] * 1e3:.3g} ms > {tpot_s * 1e3:g} ms")
    if serve.load == "poisson" and s["arrival_span_s"] > 0:
        # a deployment that keeps up finishes about one typical latency after the last arrival;
        # one that falls behind builds a queue that the run's end still holds
        offered = (s["requests"] - 1) / s["arrival_span_s"]
        served = s["finished"] / max(s["latency_s"] - s["e2e_p50_s"], 1e-9)
        if served < KEEP_UP * offered:
            load.append(f"serves {served:.3g} of {offered:.3g} requests/s: a queue builds")
    if usd is None:
        why.append("no price")
    why += load
    fleet = s["output_tokens_per_s"] * (1 if layout == "pd" else r)   # pd: one deployment of all r replicas
    option = ServingOption(g, t, p, e, not why, "; ".join(why) or "meets the targets", s["ttft_p90_s"],
                           s["tpot_p90_s"], fleet, usd, None, replicas=r, layout=layout, prefill_replicas=prefill,
                           prefill_tensor=prefill_tensor)
    if usd is not None and fleet > 0:
        option.usd_per_million_tokens = usd * option.gpu_count / (fleet * 3600) * 1e6
    return option, bool(load) and pred.fits_in_memory and usd is not None
