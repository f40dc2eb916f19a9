"""The ways a small job can share a GPU, each an option of its own, and which one is best and why.

For a one-GPU option whose share (:func:`gpucast.integrations.resources.gpu_share`: held compute
plus margin, memory plus headroom) is at most ``MAX_SHARE`` of a whole GPU, three modes:

* **time-slicing** (CUDA's default; the device plugin's time-slicing replicas) with HAMi's core
  limit at the share (``nvidia.com/gpucores``): the co-location model's time-sliced slowdown next
  to a copy of itself (:mod:`gpucast.cluster.timeshare`, the measured-pairs constants), then the
  throttle (:func:`gpucast.cluster.timeshare.throttled`);
* **MPS** with the share as its SM limit (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``; Kubernetes' MPS
  replicas give each client 1/N): :func:`gpucast.cluster.timeshare.mps.slowdowns` next to a copy of itself
  at the same limit;
* **MIG** where the GPU has profiles (:mod:`gpucast.mig`): the smallest slice whose memory holds
  the job's memory need, below the whole-GPU profile, predicted on the slice as a GPU of its own
  (no neighbour slows it; its own SMs, L2 and bandwidth do), priced at the slice's share.

Each is billed at its share (MIG: the slice's compute slices over the GPU's). A neighbour as
demanding as the job itself is the cautious assumption for the two shared modes (a lighter one
slows it less). :func:`why` names the mode that runs the job fastest per dollar for each GPU and
says what decided it. Not modelled: MPS's and time-slicing's memory limits' enforcement (HAMi
and MPS both cap memory; the option's capacity is its share of the GPU's memory), MIG
re-partitioning, a neighbour of another kind than the job (several jobs of their own kinds on one
GPU: :mod:`gpucast.advisor.pack`).
"""

from __future__ import annotations

from gpucast.advisor.options import NO, Option, from_prediction

MAX_SHARE = 0.5     # a share above half a GPU leaves no room for a neighbour: offer whole GPUs only
MODES = ("timeslice", "mps", "mig")


def timeline(pred):
    from gpucast.cluster import timeshare

    return timeshare.JobTimeline.from_util(pred.gpu_util_pct, pred.step_time_s, max(1.0, float(pred.gpu_idle_gaps)),
                                           timeshare.mem_bound_share(pred), pred.gpu_held_pct or None,
                                           float(pred.gpu_syncs) if pred.gpu_syncs else None)


def timesliced(pred, share: float | None) -> float:
    """The job's slowdown time-sliced next to a copy of itself, under a HAMi core limit of ``share``."""
    from gpucast.cluster import timeshare

    tl = timeline(pred)
    s = timeshare.slowdowns([tl, tl], timeshare.CURRENT.on(pred.gpu), "timeslice")[0]
    return max(1.0, timeshare.throttled([tl], [s], [share])[0])


def under_mps(pred, share: float | None) -> float:
    """The job's slowdown under MPS next to a copy of itself, both limited to ``share`` of the SMs."""
    from gpucast.cluster import timeshare
    from gpucast.cluster.timeshare import mps

    tl = timeline(pred)
    return max(1.0, mps.slowdowns([tl, tl], [share, share], timeshare.CURRENT.on(pred.gpu))[0])


def smallest_slice(gpu_name: str, memory_bytes: int):
    """The smallest MIG profile of ``gpu_name`` (fewest compute slices, then memory) whose memory
    holds ``memory_bytes``, below the whole-GPU profile; None where there is none (or no MIG)."""
    from gpucast import mig
    from gpucast.hardware import get_gpu

    if mig.is_slice_name(gpu_name):
        return None
    profs = mig.profiles(gpu_name)
    ok = [p for p in profs if p.compute_slices < p.of_compute and get_gpu(p.full_name).memory_bytes >= memory_bytes]
    return min(ok, key=lambda p: (p.compute_slices, p.memory_slices)) if ok else None


def options(job, pred, spec, prices, provider, samples: float, epochs: float, acc: int, config=None,
            env=None) -> list[Option]:
    """The shared options of a one-GPU prediction ``pred`` on the whole GPU ``spec`` (module
    docstring); empty when the job needs more than ``MAX_SHARE`` of it."""
    from gpucast.api import explain
    from gpucast.hardware import get_gpu
    from gpucast.integrations.resources import gpu_share

    s = gpu_share(pred)
    if s.exclusive or s.share > MAX_SHARE:
        return []
    price = prices.price(spec.name, provider)
    cap = int(spec.memory_bytes * s.share)
    out = []
    slow = timesliced(pred, s.share)
    out.append(from_prediction(pred, price, samples, epochs, acc, share=s.share, slowdown=slow, capacity=cap,
                               mode="timeslice",
                               notes=(f"time-sliced, HAMi gpucores {round(s.share * 100)}: x{slow:.2f} next to a "
                                      f"copy of itself",)))
    slow = under_mps(pred, s.share)
    out.append(from_prediction(pred, price, samples, epochs, acc, share=s.share, slowdown=slow, capacity=cap,
                               mode="mps",
                               notes=(f"MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={round(s.share * 100)}: x{slow:.2f} "
                                      f"next to a copy of itself",)))
    p = smallest_slice(spec.name, s.memory_bytes)
    if p is not None:
        sl = get_gpu(p.full_name)
        sp = explain(job.with_(batch_size=int(pred.job["batch_size"]), precision=pred.job["precision"], gpus=1),
                     sl, config, env).prediction
        slice_price = prices.price(sl.name, provider)
        opt = from_prediction(sp, slice_price, samples, epochs, acc, capacity=sl.memory_bytes, mode="mig",
                              slowdown=1.0,
                              notes=(f"MIG {p.name}: x{sp.step_time_s / pred.step_time_s:.2f} of the whole GPU's "
                                     f"step, isolated from its neighbours",))
        if opt.memory_fit != NO:
            out.append(opt)
    return out


def why(opts: list[Option]) -> list[str]:
    """Per whole GPU with shared options: which mode runs the job cheapest per run (then fastest)
    and what decided it, one line each."""
    from gpucast import mig

    by_gpu: dict[str, list[Option]] = {}
    for o in opts:
        if o.mode in MODES:
            by_gpu.setdefault(mig.parent_name(o.gpu), []).append(o)
    lines = []
    for gpu, os_ in by_gpu.items():
        best = {}
        for o in os_:
            if o.mode not in best or (o.cost_per_run, o.run_s) < (best[o.mode].cost_per_run, best[o.mode].run_s):
                best[o.mode] = o
        if len(best) < 2:
            continue
        pick = min(best.values(), key=lambda o: (o.cost_per_run, o.run_s))
        ts, mp, mg = best.get("timeslice"), best.get("mps"), best.get("mig")
        parts = []
        if ts is not None and mp is not None:
            if mp.slowdown < ts.slowdown - 1e-3:
                parts.append(f"under MPS it runs x{mp.slowdown:.2f} beside a copy of itself, time-sliced "
                             f"x{ts.slowdown:.2f} (no context switches, no waiting for the other's time slice)")
            elif ts.slowdown < mp.slowdown - 1e-3:
                parts.append(f"time-sliced it runs x{ts.slowdown:.2f}, under MPS x{mp.slowdown:.2f} (an SM limit "
                             f"of {mp.share:g} stretches its kernels more than waiting for time slices does)")
            else:
                parts.append(f"time-sliced and under MPS alike (x{ts.slowdown:.2f}): its kernels rarely overlap "
                             f"a neighbour's")
        if mg is not None:
            ref = min((o for o in (ts, mp) if o is not None), key=lambda o: o.step_time_s, default=mg)
            parts.append(f"on the {mig.split(mg.gpu)[1]} slice it runs alone at {mg.step_time_s * 1e3:.1f} ms a step "
                         f"(shared: {ref.step_time_s * 1e3:.1f} ms) for {mig.weight(mg.gpu):.2g} of the GPU")
        lines.append(f"sharing one {gpu}: {pick.mode} is cheapest per run; " + "; ".join(parts))
    return lines
