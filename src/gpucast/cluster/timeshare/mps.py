"""Jobs sharing one GPU through NVIDIA MPS with per-client SM limits (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``).

Under MPS the clients' kernels run concurrently in one context (no time slices, no context
switch: :mod:`gpucast.cluster.timeshare`'s ``mode="mps"``). A client may be limited to a share
``p`` of the SMs: NVIDIA's MPS documentation ("Volta MPS execution resource provisioning") lets
each client set ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``; Kubernetes' MPS sharing gives each of a
GPU's ``N`` clients ``100 / N`` percent (GKE's "max shared clients per GPU"; the NVIDIA device
plugin's ``sharing.mps.replicas``), and Amazon ECS sets it from a container's
``maxComputePercent`` ("a limit, not a reservation"). This module is ``timeshare``'s MPS model
with those limits, for job ``i`` with limit ``p_i`` (1: none) and the same constants::

    busy_i^p = busy_i * ((1 - m_i) / p_i + m_i)          (alone: its compute-bound kernels get p_i of
                                                           the SMs; memory-bound ones the same DRAM)
    c_ij     = clamp((p_i + p_j - 1) / p_i, 0, 1)        (the share of i's SMs j's kernels can also use)
    burst_i' = busy_i^p * (1 + sum_{j != i} c_ij * s_j) * (1 + bandwidth * sum_{j != i} a_j * m_i * m_j
                                                            + sum_{j != i} (1 - c_ij) * a_j * m_i^p * m_j^p)
    step_i'  = host_i' + burst_i'                         (host_i' as in timeshare: shared CPU cores)

solved by fixed-point iteration; ``s_j`` and ``a_j`` as in :mod:`gpucast.cluster.timeshare`
(the neighbour's share of time its kernels run, or want to). The last term is DRAM shared by
kernels on SMs the limits keep apart (``1 - c_ij``): a memory-bound kernel of ``i`` running while
one of ``j`` does gets half the bandwidth (both saturate it and share it fairly: a closed form, not
fitted), so its time stretches by the share of time ``j`` runs memory-bound kernels
(``m_j^p = m_j busy_j / busy_j^p``, the memory-bound share of ``j``'s kernel time under its
limit: ``a_j m_j^p`` is then ``j``'s memory-bound seconds over its step); where the SMs
overlap the first factor already counts the neighbour's kernels, and the fitted ``bandwidth``
(fitted on time-sliced pairs, whose kernels never overlap) and ``relief`` (on the loss beyond a
job's own limit) are kept as ``timeshare`` has them. With every limit at 1 this is exactly
``timeshare``'s MPS mode (a test checks they agree). On a data-center GPU (``Constants.exclusive``)
the jobs together do at most one GPU of work there too: their kernels are taken to fill the SMs.
Limits that add up to at most 100 % give disjoint SM shares (``c_ij = 0``): the jobs then slow
each other only through DRAM bandwidth and the host, and each pays its own limit even alone. The
slowdown is over the job's solo step *without* a limit, so a limit's own cost is in it.

What is modelled: the SM share a limit leaves a job's compute-bound kernels, the SMs two
clients' limits overlap on, DRAM shared by kernels on SMs kept apart, host sharing as in
``timeshare``. What is not: kernels
too small to fill the SMs a limit leaves them (they lose nothing to the limit: the estimate is
then pessimistic), the limit's effect on memory-bound kernels (they are taken to reach the same
bandwidth with fewer SMs), ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (memory capacity is checked by
the callers, as for any co-location), MPS's client count limit (48 on Volta and later), and an
error in one client taking the others down. The constants are ``timeshare``'s, not fitted on
MPS measurements (there are none here: the RTX 3090 pairs ran time-sliced).
"""

from __future__ import annotations

from typing import Sequence

from gpucast.cluster import timeshare
from gpucast.cluster.timeshare import JobTimeline
from gpucast.cluster.timeshare.model import capped, relieved


# A memory-bound kernel running beside another on SMs of its own gets this share of its time
# again per unit of the other's memory-bound activity: 1 = the two saturate DRAM and share it
# fairly (each at half its bandwidth while they overlap). A closed form, not fitted.
DRAM_FAIR_SHARE = 1.0


def _limit(p) -> float:
    if p is None:
        return 1.0
    p = float(p)
    if not 0.0 < p <= 1.0:
        raise ValueError(f"an MPS thread limit must be a share in (0, 1] (percent / 100), got {p!r}")
    return p


def overlap(p_i: float, p_j: float) -> float:
    """The share of job ``i``'s SMs (limit ``p_i``) that job ``j``'s kernels (limit ``p_j``) can also
    run on: 0 when the two limits fit side by side, 1 without limits."""
    return min(1.0, max(0.0, (p_i + p_j - 1.0) / p_i))


def limited_busy(job: JobTimeline, p: float | None) -> float:
    """``job``'s kernel seconds per step alone under an SM limit ``p`` (its compute-bound share
    stretched by ``1 / p``)."""
    p = _limit(p)
    m = min(1.0, max(0.0, job.mem_bound))
    return job.busy_s * ((1.0 - m) / p + m)


def slowdowns(jobs: Sequence[JobTimeline], limits: Sequence[float | None] | None = None,
              c: timeshare.Constants | None = None) -> list[float]:
    """Each job's step time under MPS, with its SM limit (``limits[i]``: a share in (0, 1], None: no
    limit), over its solo step time without a limit. ``c``: the co-location constants (default:
    the world in force, :func:`gpucast.cluster.timeshare.world`)."""
    step, new, _want, _lim = _solve(jobs, limits, c)
    return [max(1.0, t / s) for t, s in zip(new, step)]


def shared_state(jobs: Sequence[JobTimeline], limits: Sequence[float | None] | None = None,
                 c: timeshare.Constants | None = None) -> tuple[list[float], float]:
    """:func:`slowdowns` and what NVML reads of the GPU (percent), one job alone included: each
    job as the job its limit makes of it (its kernels stretched, :func:`limited_busy`), read as
    :func:`gpucast.cluster.timeshare.gpu_util_pct` reads jobs that share a GPU."""
    step, new, want, lim = _solve(jobs, limits, c)
    if not jobs:
        return [], 0.0
    own = []
    for j, s, b in zip(jobs, step, lim):
        h = s - min(max(j.busy_s, 0.0), s)
        own.append(JobTimeline(h + b, b, j.gaps, j.mem_bound, j.hidden_s, j.syncs))
    sd = [max(1.0, t / s) for t, s in zip(new, step)]
    if len(jobs) == 1:
        return sd, 100.0 * own[0].reported
    return sd, timeshare._util_pct(own, [t / o.step_s for t, o in zip(new, own)], want)


def _solve(jobs, limits, c):
    """The model above: each job's solo step, its step under MPS, its share of that step its
    kernels run (or wait to), and its kernel time alone under its limit."""
    c = c if c is not None else timeshare.world()
    n = len(jobs)
    p = [_limit(x) for x in (limits if limits is not None else [None] * n)]
    if len(p) != n:
        raise ValueError(f"{n} jobs but {len(p)} thread limits")
    if n == 0:
        return [], [], [], []
    step = [max(j.step_s, 1e-12) for j in jobs]
    busy = [min(max(j.busy_s, 0.0), s) for j, s in zip(jobs, step)]
    lim = [limited_busy(JobTimeline(s, b, j.gaps, j.mem_bound), q) for j, s, b, q in zip(jobs, step, busy, p)]
    host = [s - b for s, b in zip(step, busy)]
    if n == 1:
        t = host[0] + lim[0]
        return step, [t], [min(1.0, lim[0] / t)], lim
    m = [min(1.0, max(0.0, j.mem_bound)) for j in jobs]
    # the memory-bound share of each job's kernel time under its limit (its compute-bound part stretched)
    mp = [q * b / x if x > 0 else 0.0 for q, b, x in zip(m, busy, lim)]
    hshare = [h / s for h, s in zip(host, step)]
    hsum = sum(hshare)
    host_new = [h * (1.0 + c.host * (hsum - x)) for h, x in zip(host, hshare)]
    ov = [[overlap(p[i], p[j]) if i != j else 0.0 for j in range(n)] for i in range(n)]
    by_held = timeshare._by_held(c)
    act = [min(1.0, b / (h + b)) for b, h in zip(lim, host)]
    hs = list(act)
    new = [h + b for h, b in zip(host, lim)]
    want = list(act)
    for _ in range(timeshare._ITERATIONS):
        share = hs if by_held else act
        amsum = sum(a * q for a, q in zip(act, m))
        nact = []
        for i in range(n):
            apart = sum((1.0 - ov[i][j]) * act[j] * mp[j] for j in range(n) if j != i)
            thrash = 1.0 + c.bandwidth * m[i] * (amsum - act[i] * m[i]) + DRAM_FAIR_SHARE * mp[i] * apart
            burst = lim[i] * (1.0 + sum(ov[i][j] * share[j] for j in range(n))) * thrash
            new[i] = host_new[i] + burst
            nact.append(min(1.0, burst / new[i]))
        want = list(nact)
        done = max(abs(x - y) for x, y in zip(nact, act)) < timeshare._TOLERANCE
        act = [0.5 * (x + y) for x, y in zip(nact, act)]
        if by_held:
            nhs = [b / t for b, t in zip(lim, new)]
            done = done and max(abs(x - y) for x, y in zip(nhs, hs)) < timeshare._TOLERANCE
            hs = [0.5 * (x + y) for x, y in zip(nhs, hs)]
        if done:
            break
    if c.relief > 0.0:
        # the relief on the loss beyond each job's own limit: its slowdown over its step alone under it
        alone = [h + b for h, b in zip(host, lim)]
        rel = relieved([t / a for t, a in zip(new, alone)], [b / s for b, s in zip(busy, step)], c.relief)
        new = [a * r for a, r in zip(alone, rel)]
    if c.exclusive == "yes":     # at most one GPU of work (Constants.exclusive): model.capped on the steps
        sd = capped([t / s for t, s in zip(new, step)], [b / s for b, s in zip(busy, step)], c.exclusive)
        new = [s * x for s, x in zip(step, sd)]
    return step, new, want, lim


def equal_limits(n: int) -> list[float]:
    """The limits Kubernetes' MPS sharing gives ``n`` clients of one GPU: ``1 / n`` each."""
    if n < 1:
        raise ValueError(f"need at least one client, got {n}")
    return [1.0 / n] * n


# A GPU whose clients MPS limits as Kubernetes' MPS sharing does: "mps:N" (the NVIDIA device
# plugin's ``sharing.mps.replicas: N``) takes at most N clients, each limited to 1/N of the SMs
# whether or not the others are there.
_PREFIX = "mps:"


def replicas(mode: str | None) -> int | None:
    """N of a sharing mode ``"mps:N"`` (MPS with N replicas, each client limited to ``1 / N``),
    None for any other mode. A malformed ``"mps:..."`` raises ``ValueError``."""
    if mode is None or not mode.startswith(_PREFIX):
        return None
    try:
        n = int(mode[len(_PREFIX):])
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"sharing mode {mode!r}: MPS replicas must be a whole number of at least 1 (mps:2)")
    return n
