"""Several one-GPU jobs on one GPU: each sharing mode, the best MIG layout, which to choose and why.

``gpucast pack JOB JOB ... --gpu GPU`` and :func:`pack`. For 2 to ``MAX_JOBS`` one-GPU jobs and a
whole GPU, every way an operator can configure the GPU for them:

* **time-slicing** (CUDA's default; the NVIDIA device plugin's time-slicing replicas): the jobs in
  the GPU's time slices, :func:`gpucast.cluster.timeshare.slowdowns` in mode ``timeslice`` with the
  measured-pairs constants (:data:`gpucast.cluster.timeshare.CURRENT`, as the advisor uses; on a
  data-center GPU with exclusive slices, ``Constants.exclusive``);
* **time-slicing with HAMi core limits** (``nvidia.com/gpucores`` = 100 / N each): the same, then
  the duty-cycle throttle (:func:`gpucast.cluster.timeshare.throttled`): each job held to its share
  of the time even while the others idle;
* **MPS** without limits: mode ``mps`` (kernels of different jobs at once, no context switch);
* **MPS replicas** (the device plugin's ``sharing.mps.replicas: N``): each job limited to 1 / N of
  the SMs (:func:`gpucast.cluster.timeshare.mps.slowdowns`);
* **MIG**, where the GPU has profiles (:mod:`gpucast.mig`): each job alone on a slice of its own,
  predicted on the slice as a GPU (:func:`gpucast.api.explain`: the slice's SMs, memory, bandwidth
  and L2), its slowdown its step there over its step alone on the whole GPU. Of the layouts of N
  slices the GPU can hold (:func:`gpucast.mig.layout`: compute and memory slices, instance counts;
  not the guide's placement rules) and the assignments of the jobs to their slices
  (:func:`scipy.optimize.linear_sum_assignment`), the one with the most total progress.

Each arrangement is scored by the jobs' **total progress**, the sum of 1 / slowdown: how many GPUs'
worth of their solo whole-GPU speed the set keeps together (above 1 sharing beats running them one
after another; N: no job slowed); ties go to the lower worst slowdown. An arrangement whose memory
does not fit (the predicted peaks summed over the GPU's memory; under MIG each job's over its
slice's) is listed, not chosen. :func:`why` says which is best and what decided it; each arrangement
carries its Kubernetes requests (:mod:`gpucast.integrations.k8s_pack`).

LLM serving deployments (``mode: serve``) are packed as their engines run side by side: each engine
that preallocates is started at a share of the GPU's memory and predicted again there, and each
arrangement carries its TTFT and TPOT (:mod:`gpucast.advisor.pack_serving`).

Not modelled: phases of a job that change over its run (the slowdowns are steady state), two jobs
in one MIG slice, MIG placement rules beyond the totals, HAMi's memory limits (``gpumem``), a
limiter lending idle capacity to a busy neighbour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import combinations_with_replacement
from typing import Callable, Sequence

MAX_JOBS = 7    # the most slices a MIG GPU holds (the MIG user guide: 7 x 1g on A100/H100/H200)


class PackError(ValueError):
    """Jobs or a GPU that cannot be packed; one line."""


@dataclass(frozen=True)
class Arrangement:
    """One way to configure the GPU for the jobs: ``mode`` (``timeslice``, ``timeslice+hami``,
    ``mps``, ``mps:N``, ``mig``), what an operator sets (``detail``), each job's slowdown over its
    solo step on the whole GPU (in the jobs' order), whether their memory fits, and under MIG each
    job's slice profile."""

    mode: str
    detail: str
    slowdowns: tuple[float, ...]
    memory_fits: bool
    slices: tuple[str, ...] | None = None
    requests: tuple = ()     # each job's Kubernetes container limits (gpucast.integrations.k8s_pack)
    node: str = ""                      # the GPU's configuration for them
    serving: tuple = ()      # each job's TTFT/TPOT here (gpucast.advisor.pack_serving.figures; None: not serving)

    @property
    def progress(self) -> float:
        """The jobs' total progress: the sum of 1 / slowdown (module docstring)."""
        return math.fsum(1.0 / s for s in self.slowdowns)

    @property
    def worst(self) -> float:
        return max(self.slowdowns)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "detail": self.detail, "slowdowns": list(self.slowdowns),
                "progress": self.progress, "worst_slowdown": self.worst, "memory_fits": self.memory_fits,
                **({"slices": list(self.slices)} if self.slices is not None else {}),
                "requests": list(self.requests), "node": self.node,
                **({"serving": list(self.serving)} if any(x is not None for x in self.serving) else {})}


@dataclass(frozen=True)
class Packing:
    """The jobs (``labels``, their solo step and peak memory on the whole ``gpu``), every
    arrangement, the best one (an index into ``arrangements``; None when none fits) and why."""

    gpu: str
    labels: tuple[str, ...]
    solo_step_s: tuple[float, ...]
    memory_bytes: tuple[int, ...]
    gpu_memory_bytes: int
    arrangements: tuple[Arrangement, ...]
    best: int | None
    why: tuple[str, ...]
    model_version: str = ""      # gpucast.api.model_version of the predictions
    # a serving job's gpu_memory_utilization when the jobs share the whole GPU (None: not a serving job
    # that preallocates; gpucast.advisor.pack_serving), and its TTFT/TPOT alone on the whole GPU
    memory_shares: tuple = ()
    solo_serving: tuple = ()

    @property
    def shared_memory_bytes(self) -> int:
        """What the jobs hold together on the whole GPU: each serving engine its share, the others
        their peaks."""
        shares = self.memory_shares or (None,) * len(self.memory_bytes)
        return sum(int(f * self.gpu_memory_bytes) if f is not None else m for m, f in zip(self.memory_bytes, shares))

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "model_version": self.model_version,
                "jobs": [{"job": lab, "solo_step_s": s, "memory_bytes": m,
                          **({"gpu_memory_utilization": f} if f is not None else {}),
                          **({"serving": sv} if sv is not None else {})}
                         for lab, s, m, f, sv in zip(self.labels, self.solo_step_s, self.memory_bytes,
                                                     self.memory_shares or (None,) * len(self.labels),
                                                     self.solo_serving or (None,) * len(self.labels))],
                "gpu_memory_bytes": self.gpu_memory_bytes, "shared_memory_bytes": self.shared_memory_bytes,
                "arrangements": [a.to_dict() for a in self.arrangements],
                "best": None if self.best is None else self.arrangements[self.best].mode, "why": list(self.why)}


def label(job) -> str:
    """A job's short name: model, batch size and precision."""
    return f"{job.model} b{job.batch_size} {job.precision}"


def _rank(a: Arrangement) -> tuple:
    return (a.progress, -a.worst)


def pack(jobs: Sequence, gpu: str = "a100-80gb", config=None, env=None,
         progress: Callable[[int, int], None] | None = None) -> Packing:
    """Every arrangement of ``jobs`` (Jobs, zoo names or job dicts; one GPU each) on one whole
    ``gpu`` and the best (module docstring). ``progress(done, total)`` is called as predictions end."""
    from gpucast import mig
    from gpucast.api import _as_job, explain, model_version
    from gpucast.hardware import get_gpu
    from gpucast.integrations import k8s_pack

    from gpucast.advisor import pack_serving
    from gpucast.serving import Serve

    js = [_as_job(j) for j in jobs]
    if not 2 <= len(js) <= MAX_JOBS:
        raise PackError(f"pack takes 2 to {MAX_JOBS} jobs, got {len(js)} (one job: `gpucast advise`)")
    for j in js:
        if j.gpus != 1 or j.parallel is not None:
            raise PackError(f"{label(j)} runs on {j.gpus} GPUs: pack places one-GPU jobs")
    if isinstance(gpu, str) and mig.is_slice_name(gpu):
        raise PackError(f"{gpu} is a MIG slice: pack takes a whole GPU and chooses the slices")
    spec = get_gpu(gpu)
    profs = [p for p in mig.profiles(spec.name) if p.compute_slices < p.of_compute] if spec.name in mig.capable() else []
    preallocating = sum(1 for j in js if j.mode == "serve" and (j.serve is None or j.serve.engine != "hf"))
    total, done = len(js) * (1 + len(profs)) + preallocating, 0

    def predicted(job, g):
        nonlocal done
        pred = explain(job, g, config, env).prediction
        done += 1
        if progress is not None:
            progress(done, total)
        return pred

    whole = [predicted(j, spec) for j in js]
    on_slice = {p.name: [predicted(j, get_gpu(p.full_name)) for j in js] for p in profs}
    # serving engines that preallocate each get their share of the whole GPU, and are predicted at it
    shares = pack_serving.memory_shares(whole, spec.memory_bytes)
    at_share = [predicted(j.with_(serve=replace(j.serve or Serve(), gpu_memory_utilization=f)), spec)
                if f is not None else w for j, w, f in zip(js, whole, shares)]
    mem = [int(f * spec.memory_bytes) if f is not None else int(p.memory_peak_bytes) for p, f in zip(whole, shares)]
    fits = sum(mem) <= spec.memory_bytes and all(p.fits_in_memory for p, f in zip(at_share, shares) if f is not None)
    arrangements = list(_shared(whole, at_share, fits))
    best_mig = _best_layout(spec.name, profs, whole, on_slice)
    if best_mig is not None:
        arrangements.append(best_mig)
    for i, a in enumerate(arrangements):
        reqs, node = k8s_pack.requests(a.mode, spec.name, mem, a.slices)
        arrangements[i] = replace(a, requests=tuple(reqs), node=node)
    fitting = [i for i, a in enumerate(arrangements) if a.memory_fits]
    best = max(fitting, key=lambda i: _rank(arrangements[i])) if fitting else None
    labels = tuple(label(j) for j in js)
    why_lines = why(arrangements, best, labels, spec.name, bool(profs)) + pack_serving_why(labels, shares, fits)
    return Packing(spec.name, labels, tuple(p.step_time_s for p in whole),
                   tuple(int(p.memory_peak_bytes) for p in whole), int(spec.memory_bytes), tuple(arrangements), best,
                   tuple(why_lines), model_version(env), tuple(shares),
                   tuple(pack_serving.figures(p) for p in whole))


def pack_serving_why(labels, shares, fits: bool) -> list[str]:
    """A line on the serving engines' memory shares when the jobs share the whole GPU."""
    parts = [f"{lab} {f:.2f}" for lab, f in zip(labels, shares) if f is not None]
    if not parts:
        return []
    return [f"sharing the whole GPU, each serving engine is started with serve.gpu_memory_utilization at its share "
            f"(its weights and the KV cache its load holds, and a part of what is left): {', '.join(parts)}"
            + ("" if fits else "; these do not fit the GPU")]


def _shared(whole, at_share, fits: bool):
    """The arrangements of the jobs sharing the whole GPU: time-slicing (with and without HAMi core
    limits), MPS (without limits and as replicas). ``at_share``: each job as it runs there (a serving
    engine at its memory share, gpucast.advisor.pack_serving); a slowdown is over the job alone on the
    whole GPU (``whole``)."""
    from gpucast.advisor import pack_serving
    from gpucast.advisor.sharing import timeline
    from gpucast.cluster import timeshare
    from gpucast.cluster.timeshare import mps

    tls = [timeline(p) for p in at_share]
    own = [a.step_time_s / w.step_time_s for a, w in zip(at_share, whole)]  # a smaller cache's own cost
    n = len(tls)

    def arrangement(mode, detail, slowdowns):
        s = tuple(x * o for x, o in zip(slowdowns, own))
        return Arrangement(mode, detail, s, fits,
                           serving=tuple(pack_serving.figures(p, x) for p, x in zip(at_share, slowdowns)))

    c = timeshare.CURRENT.on(whole[0].gpu)     # exclusive slices on a data-center GPU (Constants.exclusive)
    ts = timeshare.slowdowns(tls, c, "timeslice")
    yield arrangement("timeslice", f"time-slicing, {n} replicas", ts)
    yield arrangement("timeslice+hami", f"time-slicing + HAMi gpucores {100 // n}",
                      [max(1.0, s) for s in timeshare.throttled(tls, ts, [1.0 / n] * n)])
    yield arrangement("mps", "MPS, no limits", timeshare.slowdowns(tls, c, "mps"))
    yield arrangement(f"mps:{n}", f"MPS, {n} replicas ({100 // n} % of the SMs each)",
                      mps.slowdowns(tls, [1.0 / n] * n, c))


def _best_layout(gpu: str, profs, whole, on_slice) -> Arrangement | None:
    """The MIG layout of one slice per job, and the assignment, with the most total progress among
    those where every job fits its slice (the lower worst slowdown on a tie); None where the GPU has
    no MIG or no layout of that many slices exists. A layout where some job fits no slice it could
    get is returned only when no layout fits, marked as not fitting."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    from gpucast import mig
    from gpucast.advisor import pack_serving
    from gpucast.hardware import get_gpu

    n = len(whole)
    # each job's 1 / slowdown (at most 1) and memory fit on each profile, once
    gain_by = np.array([[min(1.0, w.step_time_s / on_slice[p.name][i].step_time_s) for p in profs]
                        for i, w in enumerate(whole)])
    fit_by = np.array([[on_slice[p.name][i].memory_peak_bytes <= get_gpu(p.full_name).memory_bytes for p in profs]
                       for i in range(n)])
    best = None
    for combo in combinations_with_replacement(range(len(profs)), n):
        text = ",".join(profs[c].name for c in combo)
        try:
            mig.layout(gpu, text)
        except mig.LayoutError:
            continue
        gain, fit = gain_by[:, combo], fit_by[:, combo]
        # a job that does not fit a slice takes it only when nothing else is left: progress first
        # among fitting assignments (a large penalty per misfit), then the progress itself
        rows, cols = linear_sum_assignment(gain - n * 10.0 * ~fit, maximize=True)
        a = Arrangement("mig", f"MIG {text}", tuple(1.0 / gain[i, k] for i, k in zip(rows, cols)),
                        bool(fit[rows, cols].all()), tuple(profs[combo[k]].name for k in cols),
                        serving=tuple(pack_serving.figures(on_slice[profs[combo[k]].name][i]) for i, k in zip(rows, cols)))
        if best is None or (a.memory_fits, *_rank(a)) > (best.memory_fits, *_rank(best)):
            best = a
    return best


def _exclusive(gpu: str) -> bool:
    from gpucast.cluster import timeshare

    return timeshare.CURRENT.on(gpu).exclusive == "yes"


def why(arrangements: Sequence[Arrangement], best: int | None, labels: Sequence[str], gpu: str,
        has_mig: bool) -> list[str]:
    """What decided the choice, a line each: the best arrangement and its progress, time-slicing
    against MPS, MIG against sharing the whole GPU, the limits' cost, what does not fit."""
    by = {a.mode: a for a in arrangements}
    ts, hami, mp, mg = (by.get(k) for k in ("timeslice", "timeslice+hami", "mps", "mig"))
    rep = next((a for a in arrangements if a.mode.startswith("mps:")), None)
    out = []
    if best is None:
        out.append(f"nothing fits: the jobs' memory exceeds {gpu}'s in every arrangement")
    else:
        b = arrangements[best]
        n = len(b.slowdowns)
        out.append(f"best: {b.detail}: together the jobs keep {b.progress:.2f} of {n} GPUs' worth of their solo "
                   f"speed (worst x{b.worst:.2f}); one after another they would keep 1")
    if ts is not None and mp is not None:
        if mp.progress > ts.progress + 1e-3:
            out.append(f"MPS keeps {mp.progress:.2f} against time-slicing's {ts.progress:.2f}: kernels of different "
                       "jobs run at once, no context switches")
        elif abs(mp.progress - ts.progress) <= 1e-3:
            out.append(f"MPS and time-slicing alike ({ts.progress:.2f}): the jobs' kernels rarely overlap")
        else:
            out.append(f"time-slicing keeps {ts.progress:.2f} against MPS's {mp.progress:.2f}: under MPS the jobs' "
                       "concurrent kernels compete for the SMs and memory bandwidth")
    if ts is not None and _exclusive(gpu):
        out.append(f"time slices on {gpu} are exclusive (a data-center GPU): the jobs' kernels together hold it at "
                   "most all the time, as measured pairs on data-center GPUs did (a GeForce card's pairs did more)")
    if hami is not None and ts is not None and hami.progress < ts.progress - 1e-3:
        out.append(f"HAMi core limits cost {ts.progress - hami.progress:.2f}: each job is held to its share of the "
                   "time even while the others idle")
    if rep is not None and mp is not None and rep.progress < mp.progress - 1e-3:
        out.append(f"MPS replicas cost {mp.progress - rep.progress:.2f} against unlimited MPS: each job's kernels get "
                   f"1/{len(rep.slowdowns)} of the SMs even alone")
    if mg is not None:
        k = max(range(len(mg.slowdowns)), key=lambda i: mg.slowdowns[i])
        if mg.progress > max([a.progress for a in (ts, mp) if a is not None], default=0.0) + 1e-3:
            out.append(f"MIG keeps them apart ({mg.progress:.2f}): on its own slice each job loses only what the "
                       f"slice's smaller share of SMs and bandwidth costs it (worst {labels[k]} on "
                       f"{mg.slices[k]}: x{mg.slowdowns[k]:.2f})")
        else:
            out.append(f"MIG keeps {mg.progress:.2f}: {labels[k]} on {mg.slices[k]} runs x{mg.slowdowns[k]:.2f} "
                       f"(on a slice a job has the slice's SMs and bandwidth only, even while the others idle; "
                       f"sharing the whole GPU it gets all of it whenever its neighbours do not use it)")
    elif not has_mig:
        out.append(f"{gpu} has no MIG profiles")
    else:
        out.append(f"{gpu} holds no MIG layout of {len(labels)} slices")
    for a in arrangements:
        if not a.memory_fits:
            out.append(f"{a.detail} does not fit: "
                       + ("a job's memory exceeds its slice's" if a.mode == "mig" else "the jobs' memory together "
                          "exceeds the GPU's"))
    return out
