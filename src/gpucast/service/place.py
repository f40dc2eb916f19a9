"""``POST /v1/place``: where would a policy put a new job, given what runs on each GPU?

Every job (those on the GPUs, on their GPU's type; the new one, on each type present) is
predicted through the service's cache; each prediction becomes the
:class:`~gpucast.cluster.truth.Observation` a policy told predictions sees
(:meth:`Observation.from_prediction`), and the simulator's own rule,
:func:`gpucast.cluster.choose_gpu`, picks the GPU, with gpucast's co-location model
(:data:`gpucast.cluster.timeshare.CURRENT`: exclusive time slices on data-center GPUs). Nothing
here decides anything: the answer is the policy's, with the numbers it was given.
"""

from __future__ import annotations

from gpucast.service.cache import Predictor, ServiceError
from gpucast.service.jobs import gpu_name, job_from_spec
from gpucast.service.limits import Settings


async def place(req: dict, predictor: Predictor, settings: Settings) -> dict:
    from gpucast.cluster import GpuOccupancy, choose_gpu, make_policy, timeshare
    from gpucast.cluster.truth import Observation
    from gpucast.hardware import get_gpu

    gpus = req["gpus"]
    if not gpus:
        raise ServiceError(422, "field 'gpus': give at least one GPU")
    if len(gpus) > settings.max_place_gpus:
        raise ServiceError(422, f"field 'gpus': {len(gpus)} GPUs, over the limit of {settings.max_place_gpus} "
                                f"(max_place_gpus)")
    n_jobs = sum(len(g["jobs"]) for g in gpus)
    if n_jobs > settings.max_place_jobs:
        raise ServiceError(422, f"field 'gpus': {n_jobs} running jobs, over the limit of {settings.max_place_jobs} "
                                f"(max_place_jobs)")
    try:
        policy = make_policy(req["policy"])
    except ValueError as exc:
        raise ServiceError(422, f"field 'policy': {exc}") from None
    types = [gpu_name(g["gpu_type"]) for g in gpus]
    modes = [_mode(g.get("sharing"), i) for i, g in enumerate(gpus)]
    new_job = job_from_spec(req["job"], settings)
    running = [[job_from_spec(j, settings) for j in g["jobs"]] for g in gpus]

    pairs = {(new_job.key, t): (new_job, t) for t in types}
    for t, jobs in zip(types, running):
        for j in jobs:
            pairs.setdefault((j.key, t), (j, t))
    entries = dict(zip(pairs, await predictor.get_many(list(pairs.values()))))

    def obs(job, t):
        return Observation.from_prediction(entries[(job.key, t)].prediction, job)

    state = [GpuOccupancy(index=i, gpu_type=t, memory_bytes=float(get_gpu(t).memory_bytes), node=g["node"],
                          jobs=tuple(obs(j, t) for j in jobs), mode=m)
             for i, (g, t, jobs, m) in enumerate(zip(gpus, types, running, modes))]
    new_obs = {t: obs(new_job, t) for t in set(types)}
    with timeshare.predicting_with(timeshare.CURRENT):   # gpucast's model: exclusive slices on data-center GPUs
        index, slowdowns = choose_gpu(policy, state, new_obs)
    out = {"gpu": index, "gpu_type": None, "policy": policy.name,
           "predicted_slowdowns": [round(s, 6) for s in slowdowns], "occupants": [], "reason": None}
    if index is None:
        full = sum(len(g.jobs) >= policy.cap(g) for g in state)
        out["reason"] = (f"policy {policy.name!r} allows no GPU for this job: {full} of {len(state)} GPUs hold its "
                         f"maximum of {policy.max_jobs_per_gpu} job(s) (fewer on MPS replicas), the others fail "
                         f"its rule (memory upper bounds that do not fit, or sharing that does not pay)")
        return out
    g = state[index]
    out["gpu_type"] = g.gpu_type
    for job, o in [*zip(running[index], g.jobs), (new_job, new_obs[g.gpu_type])]:
        out["occupants"].append({"workload": job.model, "job_key": job.key, "util_pct": o.util_pct,
                                 "memory_upper_bytes": o.memory_upper, "step_time_s": o.step_time_s})
    return out


def _mode(name, i: int):
    """A GPU's ``sharing`` field as the policies read it (None: time-slicing, the run's default)."""
    from gpucast.cluster.timeshare import mps
    from gpucast.cluster.timeshare import MODES

    if name is None:
        return None
    try:
        ok = name in MODES or mps.replicas(name) is not None
    except ValueError as exc:
        raise ServiceError(422, f"field 'gpus[{i}].sharing': {exc}") from None
    if not ok:
        raise ServiceError(422, f"field 'gpus[{i}].sharing': unknown sharing mode {name!r} "
                                f"({', '.join(MODES)}, mps:N)")
    return name
