"""Sizing an LLM deployment: which GPU type, how many (tensor parallelism), which precision and engine
meet a latency target at the job's load for the fewest dollars per million output tokens.

Every candidate is the job (``mode: serve``) with one GPU type, tensor degree, precision and engine,
predicted by :func:`gpucast.api.predict` (its ``serving`` run: gpucast.estimate.serving). A candidate
is feasible when the deployment fits in memory, every request of the run finishes, the p90 time to
first token and the p90 time per output token are within the targets, and, for a Poisson load, it
keeps up (over the run, less one typical latency, it serves at least 95 % of the rate requests arrived
at: a deployment that falls behind ends its run with a queue). Its cost per million output tokens is its GPUs'
hourly price over the tokens it generates in an hour at the load (the load's own rate when it keeps
up: a deployment is paid for by the hour, busy or not). The cheapest feasible candidate is the answer.

Not modelled: replicas behind a load balancer (one deployment serves the whole load), pipeline
parallelism, autoscaling, the price of the CPU hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from gpucast.job import Job, JobError
from gpucast.serving import Serve

DEFAULT_TENSORS = (1, 2, 4, 8)
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


def _candidate(job: Job, gpu: str, t: int, precision: str, engine: str) -> Job:
    serve = replace(job.serve or Serve(), engine=engine)
    return job.with_(precision=precision, gpus=t, parallel=(dict(tensor=t) if t > 1 else None), serve=serve)


def advise_serving(job: Job, gpus: Sequence[str], *, tensors: Sequence[int] = DEFAULT_TENSORS,
                   precisions: Sequence[str] | None = None, engines: Sequence[str] = DEFAULT_ENGINES,
                   ttft_s: float | None = None, tpot_s: float | None = None, prices=None, provider: str | None = None,
                   progress: Callable[[int, int], None] | None = None, predict=None) -> ServingAdvice:
    """The cheapest deployment of ``job`` meeting the targets (module docstring)."""
    from gpucast.advisor import prices as price_tables

    if job.mode != "serve":
        raise JobError("advise --serve takes a mode 'serve' job (an LLM deployment)")
    for name, v in (("ttft", ttft_s), ("tpot", tpot_s)):
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise JobError(f"--{name} must be positive seconds, got {v!r}")
    if predict is None:
        from gpucast.api import predict
    table = prices if isinstance(prices, price_tables.PriceTable) else price_tables.load(prices)
    precisions = list(precisions or [job.precision])
    combos = [(g, t, p, e) for g in gpus for t in tensors for p in precisions for e in engines]
    serve = job.serve or Serve()
    options = []
    for i, (g, t, p, e) in enumerate(combos):
        price = table.price(g, provider)
        try:
            pred = predict(_candidate(job, g, t, p, e), g)
        except JobError as exc:
            options.append(ServingOption(g, t, p, e, False, str(exc)))
            continue
        finally:
            if progress is not None:
                progress(i + 1, len(combos))
        s = pred.serving
        why = []
        if not pred.fits_in_memory:
            why.append("does not fit")
        if s["finished"] < s["requests"]:
            why.append(f"{s['requests'] - s['finished']} requests never finish")
        if ttft_s is not None and not s["ttft_p90_s"] <= ttft_s:
            why.append(f"p90 TTFT {s['ttft_p90_s']:.3g} s > {ttft_s:g} s")
        if tpot_s is not None and not s["tpot_p90_s"] <= tpot_s:
            why.append(f"p90 TPOT {s['tpot_p90_s'] * 1e3:.3g} ms > {tpot_s * 1e3:g} ms")
        if serve.load == "poisson" and s["arrival_span_s"] > 0:
            # a deployment that keeps up finishes about one typical latency after the last arrival;
            # one that falls behind builds a queue that the run's end still holds
            offered = (s["requests"] - 1) / s["arrival_span_s"]
            served = s["finished"] / max(s["latency_s"] - s["e2e_p50_s"], 1e-9)
            if served < KEEP_UP * offered:
                why.append(f"serves {served:.3g} of {offered:.3g} requests/s: a queue builds")
        usd = price.usd_per_gpu_hour if price is not None else None
        per_m = (usd * t / (s["output_tokens_per_s"] * 3600) * 1e6
                 if usd is not None and s["output_tokens_per_s"] > 0 else None)
        if usd is None:
            why.append("no price")
        options.append(ServingOption(g, t, p, e, not why, "; ".join(why) or "meets the targets", s["ttft_p90_s"],
                                     s["tpot_p90_s"], s["output_tokens_per_s"], usd, per_m))
    feasible = [i for i, o in enumerate(options) if o.feasible]
    best = min(feasible, key=lambda i: options[i].usd_per_million_tokens) if feasible else None
    targets = {"ttft_p90_s": ttft_s, "tpot_p90_s": tpot_s, "load": serve.load, "request_rate": serve.request_rate}
    if best is None:
        message = f"no deployment of the {len(options)} tried meets the targets"
    else:
        o = options[best]
        message = (f"{o.tensor} x {o.gpu} ({o.precision}, {o.engine}): p90 TTFT {o.ttft_p90_s:.3g} s, p90 TPOT "
                   f"{o.tpot_p90_s * 1e3:.3g} ms, {o.output_tokens_per_s:.0f} output tokens/s, "
                   f"${o.usd_per_million_tokens:.2f} per million output tokens: the cheapest of {len(feasible)} "
                   f"that meet the targets ({len(options)} tried)")
    return ServingAdvice(options, best, message, targets)
