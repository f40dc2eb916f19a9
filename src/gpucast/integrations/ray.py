"""Ray: a prediction as a fractional ``num_gpus``, and a launcher that lets Ray pack jobs.

Ray schedules GPUs as a numeric resource: a task or actor asking ``num_gpus=0.35`` may share a
GPU with others whose fractions add up to at most 1, and Ray sets ``CUDA_VISIBLE_DEVICES`` to the
GPU it picked (``ray.get_gpu_ids()``). This module only spells
:func:`gpucast.integrations.resources.gpu_share` in that unit:

* a job that shares a GPU gets ``num_gpus = share`` (the one rule's share, already on a 0.05
  grid, so Ray's 0.0001 precision never rounds it);
* an **exclusive** job, or a data-parallel one (``gpus > 1``: Ray cannot gang fractions of
  several GPUs for one task), gets ``num_gpus = gpus``, whole GPUs.

Where the job's GPUs sit is a placement group (:func:`placement`, :func:`placement_group`): one
bundle ``{"GPU": gpus}`` (or the share) with strategy ``STRICT_PACK`` for a job on one node, a
parallel plan inside one node included; for a plan across nodes (``GpuShare.whole_nodes``) one
bundle ``{"GPU": G}`` per node, G the plan's GPUs per node, with ``STRICT_SPREAD`` (no two
bundles on one node): its workers, one per bundle, then each ask ``num_gpus = G``. Ray reserves
the bundles' GPUs, not the rest of the nodes: give the nodes no other GPU work (a node label, or
a cluster of such nodes) to keep them the job's alone. The :class:`Launcher` runs one task per
job and refuses a plan across nodes (it needs one worker per node: :func:`placement_group`).

GPU memory is not a Ray resource (Ray's ``memory`` option is host RAM), so nothing here reserves
it: a share already covers the predicted memory (the rule sizes ``share >= memory fraction``),
so jobs whose shares fit on one GPU also fit in its memory. gpucast's numbers travel to the job
as environment variables in ``runtime_env`` (``GPUCAST_SHARE``, ``GPUCAST_GPU``,
``GPUCAST_GPU_MEMORY_BYTES``, ``GPUCAST_UTIL_PCT``, ``GPUCAST_MODEL_VERSION``), where the job
can read them, for example to cap its allocator with
``torch.cuda.set_per_process_memory_fraction``. No custom Ray resource is requested: one that
the cluster does not declare would leave the task pending forever.

**MPS** (``mps=True`` on :func:`options_for`, :func:`ray_options`, :class:`Launcher`,
:func:`launch`): Ray does not enforce the fractions (a job may use more than its share); where the
nodes run NVIDIA's MPS control daemon (the operator's choice: ``nvidia-cuda-mps-control -d``), a
shared job's task also gets the MPS client limits that enforce its share
(:func:`gpucast.integrations.resources.mps_env`: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, its share
of the SMs, and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` on device 0, the one GPU Ray makes visible to
it), the spelling of the Kubernetes MPS mode. A job given whole GPUs gets none. Without a daemon,
CUDA ignores them. How much slower a job runs at a thread limit is
:func:`gpucast.cluster.timeshare.mps.slowdowns`' question (``gpucast advise`` answers it).

Not done here: without MPS nothing enforces a fraction (pair it with a memory cap), and the GPU
type is the one predicted for. Pinning it to nodes with that GPU (``accelerator_type``) is the
caller's choice, passed through ``options``. MIG slices are not a Ray resource: a cluster that
carves them declares its own resources, which a caller passes through ``options``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from gpucast.integrations.resources import GpuShare, gpu_share, mps_env

ENV_VARS = ("GPUCAST_SHARE", "GPUCAST_GPU", "GPUCAST_GPU_MEMORY_BYTES", "GPUCAST_UTIL_PCT", "GPUCAST_MODEL_VERSION")


def _share(prediction_or_share) -> GpuShare:
    if isinstance(prediction_or_share, GpuShare):
        return prediction_or_share
    return gpu_share(prediction_or_share)


def num_gpus(prediction_or_share) -> float:
    """Ray's ``num_gpus`` for a :class:`~gpucast.prediction.Prediction` or a
    :class:`~gpucast.integrations.resources.GpuShare`: the share of one GPU, or whole GPUs
    (the job's ``gpus``) for an exclusive or data-parallel job; for a plan across nodes, one
    node's worker's (the plan's GPUs per node)."""
    s = _share(prediction_or_share)
    if s.whole_nodes:
        return float(s.gpus_per_node)
    if s.exclusive or s.gpus > 1:
        return float(s.gpus)
    return float(s.share)


def placement(prediction_or_share) -> dict:
    """The placement group that holds the job's GPUs: ``{"bundles": [{"GPU": ...}, ...],
    "strategy": "STRICT_PACK" | "STRICT_SPREAD"}`` (module docstring)."""
    s = _share(prediction_or_share)
    if s.whole_nodes:
        return {"bundles": [{"GPU": float(n)} for n in s.node_gpus()], "strategy": "STRICT_SPREAD"}
    return {"bundles": [{"GPU": num_gpus(s)}], "strategy": "STRICT_PACK"}


def placement_group(prediction_or_share, **options):
    """A Ray placement group (``ray.util.placement_group``) of :func:`placement`'s bundles and
    strategy; ``options`` (``name``, ``lifetime``, ...) are passed on. Needs a running Ray."""
    from ray.util import placement_group as make

    p = placement(prediction_or_share)
    return make(p["bundles"], strategy=p["strategy"], **options)


def env_vars(prediction_or_share, mps: bool = False) -> dict[str, str]:
    """gpucast's numbers for the job, as ``runtime_env`` environment variables (strings); with
    ``mps``, the MPS client limits of a job that shares a GPU (module docstring)."""
    s = _share(prediction_or_share)
    out = {"GPUCAST_SHARE": f"{num_gpus(s):g}", "GPUCAST_GPU": s.gpu, "GPUCAST_GPU_MEMORY_BYTES": str(s.memory_bytes),
           "GPUCAST_UTIL_PCT": f"{s.util_pct:g}", "GPUCAST_MODEL_VERSION": s.model_version}
    if mps and num_gpus(s) < 1.0:          # a fraction of one GPU (whole GPUs: nothing to limit)
        out.update(mps_env(s, 1))
    return out


def options_for(prediction_or_share, *, mps: bool = False, **options) -> dict:
    """Ray ``.options(...)`` for an already made prediction (or share): ``num_gpus`` and the
    ``runtime_env`` variables (with ``mps``, a shared job's MPS limits), merged into ``options``
    (your ``runtime_env`` keys and ``env_vars`` are kept; ``num_gpus`` is gpucast's and cannot be
    overridden)."""
    if "num_gpus" in options:
        raise ValueError("num_gpus is set by gpucast from the prediction; do not pass it")
    s = _share(prediction_or_share)
    runtime_env = dict(options.pop("runtime_env", None) or {})
    runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **env_vars(s, mps)}
    return {**options, "num_gpus": num_gpus(s), "runtime_env": runtime_env}


def _default_predict(job, gpu):
    from gpucast.api import predict

    return predict(job, gpu)


def ray_options(job, gpu: str = "a100-80gb", *, predict_fn: Callable | None = None, mps: bool = False,
                **options) -> dict:
    """Predict ``job`` (a :class:`~gpucast.job.Job`, a job-spec dict or a zoo name) on ``gpu``
    and return the Ray options that place it: ``{"num_gpus": ..., "runtime_env": {"env_vars":
    {...}}}`` plus ``options`` (``mps``: see :func:`options_for`). ``predict_fn(job, gpu)``
    defaults to :func:`gpucast.api.predict`."""
    prediction = (predict_fn or _default_predict)(job, gpu)
    return options_for(prediction, mps=mps, **options)


@dataclass
class Launched:
    """One submitted job: what Ray was asked for, and the handle to its result."""

    job: dict
    options: dict
    ref: Any                      # ray.ObjectRef of the task (or of the actor's ``run`` call)
    actor: Any = field(default=None, repr=False)  # the actor handle, when run as an actor

    @property
    def num_gpus(self) -> float:
        return self.options["num_gpus"]


def _key(job):
    """A launcher's cache key of a job (a module job by its factory too)."""
    return job if not job.is_module else (job, id(job.model_fn))


class _JobActor:
    """Holds its GPU share for its lifetime and runs the job's function in it."""

    def run(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)


class Launcher:
    """Submit a queue of jobs to Ray, each with the ``num_gpus`` its prediction sizes.

    ``submit`` does not wait: Ray keeps the tasks that do not fit yet in its queue and starts
    them as shares free up, packing fractional requests onto shared GPUs. A job spec is
    predicted once per launcher (cached by the job's key); ``options`` (for example
    ``num_cpus``, ``accelerator_type``, ``max_retries``) are passed to every task or actor.

    >>> launcher = Launcher("a100-80gb", num_cpus=1)
    >>> ref = launcher.submit({"model": "mlp-small", "batch_size": 32}, train, "run-1")
    >>> ray.get(ref)
    """

    def __init__(self, gpu: str = "a100-80gb", *, as_actors: bool = False, predict_fn: Callable | None = None,
                 mps: bool = False, **options):
        if "num_gpus" in options:
            raise ValueError("num_gpus is set by gpucast from each job's prediction; do not pass it")
        self.gpu = gpu
        self.as_actors = as_actors
        self.mps = mps
        self.options = options
        self._predict = predict_fn or _default_predict
        self._cache: dict = {}
        self._spans: set = set()      # keys of jobs whose plan spans nodes (refused by submit)
        self._remote: dict = {}
        self.launched: list[Launched] = []

    def options_for(self, job) -> dict:
        """The Ray options of ``job`` (predicted on first use, then cached)."""
        from gpucast.api import _as_job

        j = _as_job(job)
        key = _key(j)
        if key not in self._cache:
            share = _share(self._predict(j, self.gpu))
            self._cache[key] = options_for(share, mps=self.mps, **self.options)
            if share.whole_nodes:
                self._spans.add(key)
        return self._cache[key]

    def submit(self, job, fn: Callable, *args, **kwargs):
        """Run ``fn(*args, **kwargs)`` for ``job`` as a Ray task (or in an actor) and return the
        ObjectRef of its result. ``fn`` is a plain function (it is wrapped with ``ray.remote``)."""
        import ray

        from gpucast.api import _as_job

        j = _as_job(job)
        opts = self.options_for(j)
        if _key(j) in self._spans:
            raise ValueError(f"job {j.model!r}: its parallel plan spans nodes; run one worker per node in "
                             f"gpucast.integrations.ray.placement_group(prediction) instead of one task")
        spec = j.to_dict() if not j.is_module else {"model": j.model}
        target = _JobActor if self.as_actors else fn
        if target not in self._remote:
            self._remote[target] = ray.remote(target)
        if self.as_actors:
            actor = self._remote[target].options(**opts).remote()
            ref = actor.run.remote(fn, *args, **kwargs)
            self.launched.append(Launched(spec, opts, ref, actor))
        else:
            ref = self._remote[target].options(**opts).remote(*args, **kwargs)
            self.launched.append(Launched(spec, opts, ref))
        return ref

    def submit_all(self, jobs: Iterable[Sequence]) -> list:
        """Submit ``(job, fn, args)`` triples (``args`` a tuple; may be omitted) in order; the
        ObjectRefs, in the same order."""
        refs = []
        for item in jobs:
            job, fn, *rest = item
            args = tuple(rest[0]) if rest else ()
            refs.append(self.submit(job, fn, *args))
        return refs

    def release(self) -> None:
        """Drop the actor handles (Ray ends an actor once no handle is left)."""
        for launched in self.launched:
            launched.actor = None


def launch(jobs: Iterable[Sequence], gpu: str = "a100-80gb", *, as_actors: bool = False,
           predict_fn: Callable | None = None, mps: bool = False, **options) -> list:
    """Submit ``(job_spec, fn, args)`` triples to the running Ray cluster, each with the
    ``num_gpus`` gpucast sizes for it on ``gpu`` (``mps``: and a shared job's MPS limits); returns
    their ObjectRefs in order (``ray.get`` them). With ``as_actors`` each job runs in its own
    actor, which holds its share until it is released; :class:`Launcher` keeps the handles
    (``launch`` returns only the refs, and the actors end once their ``run`` call is done and the
    refs are collected)."""
    return Launcher(gpu, as_actors=as_actors, predict_fn=predict_fn, mps=mps, **options).submit_all(jobs)
