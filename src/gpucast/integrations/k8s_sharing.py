"""How a GPU share is spelled for each way a Kubernetes cluster shares its GPUs.

A pod names its cluster's sharing with the annotation ``gpucast.ai/sharing`` (default ``hami``);
:func:`spell` turns gpucast's share (:func:`gpucast.integrations.resources.gpu_share`) into that
mode's requests:

* ``hami`` — HAMi's per-vGPU limits (:func:`gpucast.integrations.kubernetes.hami_limits`):
  ``nvidia.com/gpucores`` (a duty-cycle limit: :func:`gpucast.cluster.timeshare.throttled`) and
  ``nvidia.com/gpumem``. Volcano's vGPU scheduler reads the same keys as ``volcano.sh/vgpu-*``:
  not spelled here.
* ``mps`` — the NVIDIA device plugin's MPS sharing (``sharing.mps.replicas``): one replica,
  ``nvidia.com/gpu: 1`` per GPU, and the client's limits in its environment
  (:func:`gpucast.integrations.resources.mps_env`): ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = the
  share in percent (the SMs its kernels may use: :mod:`gpucast.cluster.timeshare.mps`) and
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` = ``0=<MiB>M`` per visible device (its memory). A client may lower the thread percentage its replica was given,
  not raise it.
* ``timeslice`` — the device plugin's time-slicing replicas: one replica per GPU,
  ``nvidia.com/gpu: 1``; time-slicing has no per-client limit to set (nothing caps a job's memory:
  the prediction annotation says what it needs).
* ``runai`` — Run:ai's GPU fractions: the pod annotation ``gpu-fraction`` = the share (Run:ai's
  scheduler, ``schedulerName: runai-scheduler``, reads it), and no ``nvidia.com/gpu`` limit.

An exclusive job gets whole GPUs in every mode (``nvidia.com/gpu`` = its GPUs; HAMi: 100 % of the
cores and memory); on a node pool whose GPUs are shared as replicas that is as many replicas, not
whole GPUs, and the webhook warns. MIG slices are requested by their own resource names
(:func:`gpucast.integrations.kubernetes.mig_resource`), whatever the mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpucast.integrations.resources import GpuShare, mps_env

SHARING_ANNOTATION = "gpucast.ai/sharing"
MODES = ("hami", "mps", "timeslice", "runai")
DEFAULT = "hami"

GPU = "nvidia.com/gpu"
HAMI_KEYS = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")
RUNAI_FRACTION = "gpu-fraction"
RUNAI_SCHEDULER = "runai-scheduler"


@dataclass
class Spelling:
    """One mode's requests for a share: container limits to set and to remove, container
    environment, pod annotations, warnings."""

    limits: dict[str, str] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def parse(value: str | None) -> str:
    """The mode a ``gpucast.ai/sharing`` value names; ValueError (one line) for another."""
    mode = (value or DEFAULT).strip().lower()
    if mode not in MODES:
        raise ValueError(f"annotation {SHARING_ANNOTATION} must be one of {', '.join(MODES)}, got {value!r}")
    return mode


def spell(share: GpuShare, mode: str, gpus: int) -> Spelling:
    """``share`` in ``mode``'s requests for a container of ``gpus`` GPUs (module docstring). HAMi's
    keys are the caller's (:func:`gpucast.integrations.kubernetes.hami_limits`): this spells the others."""
    out = Spelling()
    if mode == "hami":
        return out
    out.drop = list(HAMI_KEYS)
    if share.exclusive:
        out.limits[GPU] = str(gpus)
        if mode in ("mps", "timeslice"):
            out.warnings.append(f"gpucast: the job needs whole GPUs; on a node pool shared by {mode} replicas "
                                f"{GPU}: {gpus} is {gpus} replica(s), not whole GPUs: run it on an unshared pool")
        return out
    if mode == "mps":
        out.limits[GPU] = str(gpus)
        out.env = mps_env(share, gpus)
    elif mode == "timeslice":
        out.limits[GPU] = str(gpus)
    else:   # runai
        if gpus > 1:
            out.warnings.append(f"gpucast: Run:ai gives a fraction of one GPU; the job asks for {gpus} GPUs at "
                                f"{share.share:g} each: run it with whole GPUs")
            out.limits[GPU] = str(gpus)
            return out
        out.drop.append(GPU)
        out.annotations[RUNAI_FRACTION] = f"{share.share:g}"
    return out


def env_ops(index: int, container: dict, env: dict[str, str]) -> list[dict]:
    """JSON-patch operations that set ``env`` in container ``index`` (replacing a variable of the
    same name, appending the others)."""
    if not env:
        return []
    base = f"/spec/containers/{index}/env"
    have = container.get("env")
    if not have:
        return [{"op": "add", "path": base, "value": [{"name": k, "value": v} for k, v in env.items()]}]
    ops = []
    names = [e.get("name") for e in have]
    for k, v in env.items():
        if k in names:
            ops.append({"op": "replace", "path": f"{base}/{names.index(k)}", "value": {"name": k, "value": v}})
        else:
            ops.append({"op": "add", "path": f"{base}/-", "value": {"name": k, "value": v}})
    return ops
