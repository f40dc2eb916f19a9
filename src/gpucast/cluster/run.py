"""One simulation: a policy over a trace on a cluster, with the truth's errors, the co-location world and the
sharing mode set for the run and restored after it (:func:`simulate`; the package's docstring,
:mod:`gpucast.cluster`, names the parts)."""

from __future__ import annotations

from gpucast.cluster.policies import make_policy
from gpucast.cluster.result import SimResult
from gpucast.cluster.spec import ClusterSpec
from gpucast.cluster.traces import load_trace
from gpucast.cluster.truth import Truth

_ENGINE_PARAMS = ("checkpoint_s", "oom_after_s", "max_oom_failures", "mig_reconfig_s", "mig_hold_s")
_TRUTH_PARAMS = ("predictor", "use_gavel", "measurements_dir")


def simulate(trace, cluster_spec, policy_name: str, *, seed: int = 0, error_sigma="measured",
             progress=None, colocation: str | None = None, sharing: str | None = None, **params) -> SimResult:
    """Run one policy over one trace on one cluster.

    ``trace``: a :class:`Trace` or a name/path for :func:`load_trace` (jobs larger than the
    cluster's whole GPUs are capped to them). ``cluster_spec``: a :class:`ClusterSpec` (an int means that many
    ``v100-16gb`` GPUs, 8 per node). ``seed`` and ``error_sigma`` drive the truth's error model
    (see ``truth``; ``error_sigma``: ``"measured"`` (gpucast's measured error, or the calibrated
    environment's own when one is set), a number, ``"util=..,memory=..,step=.."`` or an
    :class:`~gpucast.cluster.errors.ErrorModel`). ``colocation``: the co-location world the truth
    runs in (:data:`gpucast.cluster.timeshare.WORLDS`: ``measured-pairs``, fitted on current-GPU
    pairs of real scripts, the default; ``gavel``, fitted on Gavel's K80/P100/V100 pairs; None: the
    one in force); gpucast's policies always predict with gpucast's model. ``sharing``: how the
    jobs on one GPU share it, for the truth and the policies alike
    (:data:`gpucast.cluster.timeshare.MODES`: ``timeslice``, CUDA's default time-slicing, or
    ``mps``, NVIDIA MPS; None: the one in force, ``timeslice`` unless changed).
    ``progress(done_jobs, total_jobs)`` is called as jobs end. Other keyword
    parameters go to the engine (``checkpoint_s``, ``oom_after_s``, ``max_oom_failures``,
    ``mig_reconfig_s``, ``mig_hold_s``), the
    truth (``predictor``, ``use_gavel``, ``measurements_dir``) or the policy (e.g.
    ``max_jobs_per_gpu``, ``lookahead``, ``min_gain``, ``profiling_gpus``, ``profile_s``).
    """
    from gpucast.cluster.engine import Simulator

    spec = cluster_spec if isinstance(cluster_spec, ClusterSpec) else ClusterSpec.homogeneous("v100-16gb", int(cluster_spec))
    tr = load_trace(trace, gpus=spec.max_job_gpus)
    eng = {k: params.pop(k) for k in _ENGINE_PARAMS if k in params}
    tru = {k: params.pop(k) for k in _TRUTH_PARAMS if k in params}
    policy = make_policy(policy_name, **params)
    from gpucast.cluster import errors, truth as truth_mod

    if isinstance(error_sigma, str) and error_sigma.strip().lower() == "measured" and truth_mod._ENVIRONMENT is not None:
        error_sigma = errors.from_environment(truth_mod._ENVIRONMENT)
    truth = Truth(error_sigma=error_sigma, seed=seed, **tru)
    from gpucast.cluster import timeshare

    before = (timeshare.world(), timeshare.world_name(), timeshare.mode(), timeshare.predicting())
    if colocation is not None:
        timeshare.set_world(colocation)
    try:
        if sharing is not None:
            timeshare.set_mode(sharing)
        res = Simulator(tr, spec, policy, truth, progress=progress, **eng).run()
        extra = dict(res.params)      # what the engine reports of the run (MIG re-partitions)
        world, mode = timeshare.world_name(), timeshare.mode()
    finally:
        timeshare._ACTIVE[1], timeshare._WORLD_NAME[0], timeshare._MODE[0], timeshare._ACTIVE[0] = before
    sim_defaults = {"checkpoint_s": 1800.0, "oom_after_s": 60.0, "max_oom_failures": 3}
    res.params = {"seed": seed, "error_sigma": truth.errors.as_dict(), "trace": tr.name, "n_jobs": len(tr.jobs),
                  "colocation": world, "sharing": mode,
                  "trace_notes": list(tr.notes), **sim_defaults, **eng, **extra,
                  "policy_params": policy.params(),
                  **({"predictor": getattr(tru["predictor"], "__name__", "custom")} if "predictor" in tru else {})}
    return res
