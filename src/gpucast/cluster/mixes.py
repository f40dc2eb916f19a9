"""Workload mixes: a Gavel trace's arrivals, durations and GPU counts, with each job's workload
drawn from the zoo so that the jobs' GPU utilization looks like a real cluster's.

A mix is a small YAML file (the packaged ones: ``gpucast/data/mixes/philly-mix.yaml``,
``pai-mix.yaml`` and ``llm-mix.yaml``; a user's own: ``gpucast simulate --trace my-mix.yaml``)::

    name: my-mix
    trace: gavel:ee9e8c          # arrivals, solo durations and GPU counts come from this trace
    gpu: v100-16gb               # utilization is matched as gpucast predicts it on this GPU
    seed: 0
    target:                      # the utilization distribution of the jobs (fractions of 1)
      mean: 0.52                 # or median: 0.10 (one of the two)
      concentration: 3.0         # a + b of the Beta distribution (spread; optional, default 3)
      source: "Jeon et al., ATC 2019"
    workloads:                   # candidates: every combination of the listed values
      - model: resnet50
        batch_size: [32, 64, 128]
        precision: [fp32, amp-fp16]
        data: [{}, {num_workers: 0}]   # Job fields (data, loop, stack, seq_len, optimizer ...)
        weight: 2                # relative weight of this entry (default 1)
    gangs:                       # optional: multi-GPU jobs with a parallel plan, named one by one
      - id: llama-7b-fsdp        # job id (default <mix name>-gang<N>; -1, -2 ... per arrival)
        arrival_s: [600, 90000]  # one job per arrival, seconds from the trace's start
        steps: 2000              # optimizer steps (its work); or duration_s: solo run time on the
                                 # cluster's reference GPU type
        model: llama-7b          # the rest are Job fields, as a job spec file has them (an
        batch_size: 2            # hf:<type> model with its hf_config works too)
        seq_len: 2048
        precision: bf16
        optimizer: adamw
        gpus: 32
        parallel: {sharding: fsdp-full, recompute: selective}
    services:                    # optional: inference services with a latency target, named one by one
      - id: resnet50-serving     # job id (default <mix name>-service<N>; -1, -2 ... per arrival)
        arrival_s: [0, 3600]     # one service per arrival, seconds from the trace's start
        duration_s: 86400        # how long it serves (its lifetime: it ends then, slowed or not)
        latency_ms: 20           # the most a batch may take, on its GPU, shared or not
        model: resnet50          # the rest are Job fields of a one-GPU job; mode is infer
        batch_size: 8
      - id: llama-1b-chat        # an LLM deployment (mode serve, by its serve group)
        arrival_s: [0]
        duration_s: 86400
        tpot_ms: 25              # the most one decode iteration may take (its TPOT), shared or not
        model: hf:llama
        hf_config: '{"model_type": "llama", ...}'
        batch_size: 8
        precision: bf16
        serve: {engine: vllm, input_len: 512, output_len: 128, request_rate: 4, gpu_memory_utilization: 0.3}

How a mix is drawn (:func:`build`, fixed by ``seed``):

1. Every candidate (each combination of an entry's values) is predicted once on ``gpu``
   (cached like every simulator prediction); an entry's weight is shared among its candidates.
2. The target is a Beta distribution over utilization with the given mean (or median) and
   ``concentration``. Each trace job gets a target quantile, stratified by the job's GPU-hours
   (jobs sorted by GPU-hours, in blocks of ten, each block's ten quantiles one in each tenth, in
   a random order), so that both the per-job and the GPU-hour-weighted distributions follow the
   target.
3. The job takes a candidate whose predicted utilization is within :data:`WINDOW` of the
   target's value at that quantile, drawn by weight (the nearest candidate when none is).

The trace job's arrival and GPU count are kept; its solo duration on ``gpu`` is the trace job's
(Gavel's steps times Gavel's measured solo step time of its job type on a V100), so only *what*
runs changes. A drawn workload therefore names no ``gpus`` and no ``parallel`` group (the trace
says how many GPUs, and a plan is made for one GPU count): a multi-GPU job with a plan is a
*gang*, named with its plan under ``gangs``.

Gangs are added to the drawn trace as named, not drawn to the target: each arrival is a job with
the entry's fields (its ``gpus`` and ``parallel`` among them, so the simulator predicts its plan:
one optimizer step of the whole job, and places it by node, :mod:`gpucast.cluster.gangs`) and the
entry's ``steps`` (its service time is then steps times its true optimizer-step time: the
prediction times the truth's error) or ``duration_s``. A gang needs ``gpus`` of at least 2 and a
``parallel`` group (``parallel: {sharding: ddp}`` is plain DDP with the plan's placement). A gang
given in steps has no run time before it is predicted, so it counts no work in
:func:`~gpucast.cluster.trace_formats.offered_load` (``--load``) nor in :func:`statistics`.

Services are added as named too: each arrival is a one-GPU inference job (``mode: infer``, the
default for a service) that serves batches back to back for ``duration_s`` and then ends, with
``latency_ms``, the most one batch may take (the simulator and the ``gpucast`` policy read it:
:mod:`gpucast.cluster.engine`). Its batch size and model say how much GPU it uses; request
arrivals and queueing between batches are not modelled (a batch's time is its latency). A service
with a ``serve`` group is an LLM deployment (``mode: serve``, :mod:`gpucast.estimate.serving`): its
step is one decode iteration of its engine under its load (continuous batching at its request rate),
its target ``tpot_ms`` the most one such iteration may take (its TPOT), its memory what its engine
is told to take (``serve.gpu_memory_utilization`` of the GPU: vLLM's default 0.9 keeps a GPU to
itself; a smaller share lets it sit beside other jobs).

Bad YAML raises :class:`MixError`: one line naming the file and the field.

One module of this size because a mix's file, its draw and the fit of the draw to the target distribution are
one pipeline over the same draw.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpucast.cluster.trace_formats import Trace, TraceError, TraceJob, load_named, solo_duration_s

WINDOW = 0.04          # our choice: a candidate within 4 utilization points of the target value
DEFAULT_CONCENTRATION = 3.0
MIX_NAMES = ("philly-mix", "pai-mix", "llm-mix")
_TOP_KEYS = {"name", "description", "trace", "gpu", "seed", "target", "workloads", "gangs", "services"}
_GANG_KEYS = {"id", "arrival_s", "steps", "duration_s"}     # the rest of a gang entry are Job fields
_SERVICE_KEYS = {"id", "arrival_s", "duration_s", "latency_ms", "tpot_ms"}  # the rest of a service entry are Job fields
_NOT_DRAWN = ("gpus", "parallel")                           # fields a drawn workload may not set
_TARGET_KEYS = {"mean", "median", "concentration", "source"}


class MixError(TraceError):
    """A mix file that cannot be used; the message is one line naming the file and field."""


@dataclass(frozen=True)
class Mix:
    name: str
    trace: str
    gpu: str
    seed: int
    mean: float | None
    median: float | None
    concentration: float
    source: str
    candidates: tuple        # ((fields dict as sorted items), weight)
    path: str = ""
    gangs: tuple = ()        # Gang entries, in file order
    services: tuple = ()     # Service entries, in file order

    def beta(self) -> tuple[float, float]:
        """(a, b) of the target Beta distribution."""
        k = self.concentration
        if self.mean is not None:
            return self.mean * k, (1.0 - self.mean) * k
        return _beta_for_median(self.median, k)


@dataclass(frozen=True)
class Gang:
    """One ``gangs`` entry of a mix: a planned multi-GPU job, once per arrival."""

    id: str
    arrivals: tuple[float, ...]
    steps: float | None
    duration_s: float | None
    fields: tuple            # Job fields as sorted items (gpus, precision and parallel among them)
    gpus: int

    def trace_jobs(self) -> list[TraceJob]:
        f = dict(self.fields)
        many = len(self.arrivals) > 1
        return [TraceJob(f"{self.id}-{n}" if many else self.id, float(t), f["model"], int(f["batch_size"]),
                         self.gpus, f["precision"], self.steps, self.duration_s, None, self.fields)
                for n, t in enumerate(self.arrivals, 1)]


@dataclass(frozen=True)
class Service:
    """One ``services`` entry of a mix: an inference service with a latency target, once per arrival."""

    id: str
    arrivals: tuple[float, ...]
    duration_s: float
    latency_s: float
    fields: tuple            # Job fields as sorted items (mode infer among them)

    def trace_jobs(self) -> list[TraceJob]:
        f = dict(self.fields)
        many = len(self.arrivals) > 1
        return [TraceJob(f"{self.id}-{n}" if many else self.id, float(t), f["model"], int(f["batch_size"]), 1,
                         f["precision"], None, self.duration_s, None, self.fields, self.latency_s)
                for n, t in enumerate(self.arrivals, 1)]


def _beta_for_median(median: float, k: float) -> tuple[float, float]:
    """(a, b) with a + b = k whose median is ``median`` (bisection on a)."""
    from scipy.stats import beta

    lo, hi = 1e-3, k - 1e-3
    for _ in range(80):
        a = 0.5 * (lo + hi)
        if beta.median(a, k - a) < median:
            lo = a
        else:
            hi = a
    return a, k - a


def is_mix(name) -> bool:
    """Whether a trace name is a workload mix: a packaged mix's name or a ``.yaml``/``.yml`` file."""
    s = str(name)
    return s in MIX_NAMES or s.lower().endswith((".yaml", ".yml"))


def _base_trace(name: str) -> Trace:
    """The trace a mix is drawn over (as :func:`gpucast.cluster.traces.load_trace` reads it)."""
    return build(name) if is_mix(name) else load_named(name)


def mix_path(name: str) -> Path:
    return Path(str(resources.files("gpucast") / "data" / "mixes" / f"{name}.yaml"))


def load(name_or_path) -> Mix:
    """A packaged mix by name (``philly-mix``, ``pai-mix``) or a mix YAML file."""
    import yaml

    s = str(name_or_path)
    path = mix_path(s) if s in MIX_NAMES else Path(s)
    try:
        d = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MixError(f"{path}: no such mix file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MixError(f"{path}: cannot read: {e}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise MixError(f"{path}: not valid YAML{at}") from None
    return parse(d, str(path))


def parse(d, where: str = "mix") -> Mix:
    """Validate a mix given as a mapping (the YAML's content)."""
    from gpucast.job import Job

    def bad(field, msg):
        raise MixError(f"{where}: {field}: {msg}")

    if not isinstance(d, dict):
        raise MixError(f"{where}: a mix is a mapping with 'trace', 'target' and 'workloads'")
    unknown = sorted(set(d) - _TOP_KEYS, key=str)
    if unknown:
        bad(unknown[0], f"unknown field (allowed: {', '.join(sorted(_TOP_KEYS))})")
    trace = d.get("trace", "gavel")
    if not isinstance(trace, str):
        bad("trace", "must be a trace name such as gavel:ee9e8c")
    gpu = d.get("gpu", "v100-16gb")
    try:
        from gpucast.hardware import get_gpu

        gpu = get_gpu(gpu).name
    except Exception as e:  # noqa: BLE001 - one line for any unknown GPU
        bad("gpu", str(e).splitlines()[0] if str(e) else "unknown GPU")
    seed = d.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        bad("seed", "must be an integer")
    t = d.get("target")
    if not isinstance(t, dict):
        bad("target", "must be a mapping with 'mean' or 'median' (fractions of 1)")
    unknown = sorted(set(t) - _TARGET_KEYS, key=str)
    if unknown:
        bad(f"target.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(_TARGET_KEYS))})")
    if ("mean" in t) == ("median" in t):
        bad("target", "give exactly one of 'mean' and 'median'")
    which = "mean" if "mean" in t else "median"
    v = t[which]
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 < v < 1.0:
        bad(f"target.{which}", f"must be a number between 0 and 1 (a fraction), got {v!r}")
    k = t.get("concentration", DEFAULT_CONCENTRATION)
    if not isinstance(k, (int, float)) or isinstance(k, bool) or k <= 0:
        bad("target.concentration", f"must be a positive number, got {k!r}")
    wl = d.get("workloads")
    if not isinstance(wl, list) or not wl:
        bad("workloads", "must be a non-empty list of workload entries")
    cands = []
    for i, e in enumerate(wl, 1):
        if not isinstance(e, dict) or "model" not in e:
            bad(f"workloads[{i}]", "must be a mapping with at least 'model'")
        for key in _NOT_DRAWN:
            if key in e:
                bad(f"workloads[{i}].{key}", "a drawn workload runs on the trace job's GPUs; name a multi-GPU "
                                             "job with its plan under 'gangs'")
        w = e.get("weight", 1.0)
        if not isinstance(w, (int, float)) or isinstance(w, bool) or w <= 0:
            bad(f"workloads[{i}].weight", f"must be a positive number, got {w!r}")
        keys = [key for key in e if key != "weight"]
        values = [e[key] if isinstance(e[key], list) else [e[key]] for key in keys]
        if any(not vs for vs in values):
            bad(f"workloads[{i}]", "a field lists no values")
        combos = list(itertools.product(*values))
        for combo in combos:
            f = {key: val for key, val in zip(keys, combo) if not (isinstance(val, dict) and not val)}
            try:
                job = Job(**f)
            except TypeError as err:
                bad(f"workloads[{i}]", str(err).replace("__init__() ", ""))
            except Exception as err:  # noqa: BLE001 - Job's own one-line validation message
                bad(f"workloads[{i}]", str(err).splitlines()[0])
            f.setdefault("precision", job.precision)
            items = tuple(sorted((key, getattr(job, key)) for key in f))
            cands.append((items, float(w) / len(combos)))
    name = str(d.get("name", Path(where).stem))
    return Mix(name, trace, gpu, seed, t.get("mean"), t.get("median"), float(k),
               str(t.get("source", "")), tuple(cands), where, _parse_gangs(d.get("gangs", []), name, bad),
               _parse_services(d.get("services", []), name, bad))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _parse_gangs(gangs, mix_name: str, bad) -> tuple:
    """The ``gangs`` entries (module docstring), validated."""
    from gpucast.job import Job

    if not isinstance(gangs, list):
        bad("gangs", "must be a list of multi-GPU jobs with a parallel plan")
    out, ids = [], set()
    for i, e in enumerate(gangs, 1):
        at = f"gangs[{i}]"
        gid, arrivals = _named(e, at, f"{mix_name}-gang{i}", bad)
        if ("steps" in e) == ("duration_s" in e):
            bad(at, "give exactly one of 'steps' (optimizer steps) and 'duration_s'")
        work_key = "steps" if "steps" in e else "duration_s"
        work = e[work_key]
        if not _number(work) or work <= 0:
            bad(f"{at}.{work_key}", f"must be a positive number, got {work!r}")
        f = {k: v for k, v in e.items() if k not in _GANG_KEYS}
        try:
            job = Job.from_dict(f)
        except Exception as err:  # noqa: BLE001 - Job's own one-line validation message
            bad(at, str(err).splitlines()[0])
        if job.parallel is None or job.gpus < 2:
            bad(at, "a gang needs 'gpus' of at least 2 and a 'parallel' group (e.g. parallel: {sharding: fsdp-full})")
        many = len(arrivals) > 1
        for jid in ([f"{gid}-{n}" for n in range(1, len(arrivals) + 1)] if many else [gid]):
            if jid in ids:
                bad(f"{at}.id", f"job id {jid!r} is used twice")
            ids.add(jid)
        keys = set(f) | {"precision", "gpus"}
        items = tuple(sorted((key, getattr(job, key)) for key in keys))
        out.append(Gang(gid, tuple(float(a) for a in arrivals), float(work) if work_key == "steps" else None,
                        float(work) if work_key == "duration_s" else None, items, job.gpus))
    return tuple(out)


def _named(e, at: str, default_id: str, bad) -> tuple[str, list]:
    """A named entry's (``gangs``, ``services``) id and arrivals, checked."""
    if not isinstance(e, dict) or "model" not in e:
        bad(at, "must be a mapping of job fields with at least 'model'")
    eid = e.get("id", default_id)
    if not isinstance(eid, str) or not eid.strip():
        bad(f"{at}.id", "must be a non-empty string")
    arr = e.get("arrival_s", 0.0)
    arrivals = arr if isinstance(arr, list) else [arr]
    if not arrivals or not all(_number(a) and a >= 0 for a in arrivals):
        bad(f"{at}.arrival_s", f"must be seconds >= 0 or a non-empty list of them, got {arr!r}")
    return eid, arrivals


def _parse_services(services, mix_name: str, bad) -> tuple:
    """The ``services`` entries (module docstring), validated."""
    from gpucast.job import Job

    if not isinstance(services, list):
        bad("services", "must be a list of inference services")
    out = []
    for i, e in enumerate(services, 1):
        at = f"services[{i}]"
        sid, arrivals = _named(e, at, f"{mix_name}-service{i}", bad)
        f = {k: v for k, v in e.items() if k not in _SERVICE_KEYS}
        f.setdefault("mode", "serve" if "serve" in f else "infer")
        target = "tpot_ms" if f["mode"] == "serve" else "latency_ms"
        other = "latency_ms" if target == "tpot_ms" else "tpot_ms"
        if other in e:
            bad(f"{at}.{other}", f"a mode {f['mode']} service's target is {target}"
                                 + (" (the most one decode iteration may take)" if target == "tpot_ms" else
                                    " (the most one batch may take)"))
        for key in ("duration_s", target):
            if not _number(e.get(key)) or e[key] <= 0:
                bad(f"{at}.{key}", f"must be a positive number, got {e.get(key)!r}")
        try:
            job = Job.from_dict(f)
        except Exception as err:  # noqa: BLE001 - Job's own one-line validation message
            bad(at, str(err).splitlines()[0])
        if job.gpus != 1 or job.parallel is not None or job.mode not in ("infer", "serve"):
            bad(at, "a service is a one-GPU inference job (gpus 1, no parallel group, mode infer) or an LLM "
                    "deployment (mode serve, with its serve group)")
        keys = set(f) | {"precision"}
        items = tuple(sorted((key, getattr(job, key)) for key in keys))
        out.append(Service(sid, tuple(float(a) for a in arrivals), float(e["duration_s"]),
                           float(e[target]) / 1e3, items))
    return tuple(out)


def build(mix: Mix | str, *, predictor=None, progress=None) -> Trace:
    """Draw ``mix`` (a :class:`Mix`, a packaged name or a file) over its trace (see the module
    docstring). ``predictor(profile, gpu)`` defaults to the simulator's cached prediction."""
    import numpy as np
    from scipy.stats import beta as beta_dist

    from gpucast.cluster.truth import Profile, predict_cached

    if not isinstance(mix, Mix):
        mix = load(mix)
    predictor = predictor or predict_cached
    base = _base_trace(mix.trace)
    utils = []
    for i, (items, _w) in enumerate(mix.candidates):
        f = dict(items)
        prof = Profile(f["model"], int(f["batch_size"]), f.get("precision", "fp32"), None, items)
        try:
            utils.append(predictor(prof, mix.gpu).util_pct / 100.0)
        except Exception as e:  # noqa: BLE001 - one line naming the candidate
            raise MixError(f"{mix.path}: workload {f['model']!r} (batch {f['batch_size']}) cannot be "
                           f"predicted: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        if progress:
            progress(i + 1, len(mix.candidates))
    utils = np.array(utils)
    weights = np.array([w for _i, w in mix.candidates])
    rng = np.random.default_rng(mix.seed)
    jobs = base.jobs
    order = np.argsort([-solo_duration_s(j) * j.gpus for j in jobs], kind="stable")
    q = np.empty(len(jobs))
    for s in range(0, len(jobs), 10):
        block = order[s:s + 10]
        qs = (np.arange(10) + rng.random(10)) / 10.0
        q[block] = rng.permutation(qs)[:len(block)]
    a, b = mix.beta()
    want = beta_dist.ppf(q, a, b)
    out = []
    for j, u in zip(jobs, want):
        near = np.flatnonzero(np.abs(utils - u) <= WINDOW)
        if not len(near):
            near = np.array([int(np.argmin(np.abs(utils - u)))])
        p = weights[near] / weights[near].sum()
        c = int(near[rng.choice(len(near), p=p)])
        items = mix.candidates[c][0]
        f = dict(items)
        out.append(TraceJob(j.job_id, j.arrival_s, f["model"], int(f["batch_size"]), j.gpus,
                            f.get("precision", "fp32"), None, solo_duration_s(j), None, items))
    notes = list(base.notes) + [
        f"mix {mix.name}: {len(mix.candidates)} candidates, target Beta(a={a:.3f}, b={b:.3f}) "
        f"({'mean' if mix.mean is not None else 'median'} {mix.mean if mix.mean is not None else mix.median}; "
        f"{mix.source}), seed {mix.seed}, predicted on {mix.gpu}"]
    for what, entries, how in (("gangs", mix.gangs, "named with their parallel plans"),
                               ("services", mix.services, "named with their latency targets")):
        if not entries:
            continue
        seen = {j.job_id for j in out}
        named = [tj for g in entries for tj in g.trace_jobs()]
        clash = None
        for tj in named:
            if tj.job_id in seen:
                clash = tj.job_id
                break
            seen.add(tj.job_id)
        if clash is not None:
            raise MixError(f"{mix.path}: {what}: job id {clash!r} is used twice (or by a job of trace {mix.trace!r})")
        out = sorted(out + named, key=lambda tj: tj.arrival_s)     # stable: the trace's order kept
        notes.append(f"mix {mix.name}: {len(named)} {what[:-1]} jobs ({len(entries)} entries) {how}, not drawn")
    return Trace(mix.name, out, source=f"mix:{mix.path}", notes=notes)


def statistics(trace: Trace, util_of) -> dict:
    """Per-job and GPU-hour-weighted utilization statistics of a trace (``util_of(job)`` in %)."""
    import numpy as np

    u = np.array([util_of(j) for j in trace.jobs], dtype=float)
    w = np.array([solo_duration_s(j) * j.gpus for j in trace.jobs], dtype=float)
    return {"jobs": len(u), "mean_pct": float(u.mean()), "median_pct": float(np.median(u)),
            "gpu_hour_mean_pct": float((u * w).sum() / w.sum()) if w.sum() > 0 else math.nan,
            "p10_pct": float(np.percentile(u, 10)), "p90_pct": float(np.percentile(u, 90)),
            "share_under_100_pct": float(100.0 * (u < 99.5).mean())}
