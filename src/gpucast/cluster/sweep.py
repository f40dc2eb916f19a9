"""Sweeps: many simulator runs over a grid of parameters, in parallel, collected into one table.

A sweep is the cartesian product of **axes** over one base configuration of
:func:`gpucast.cluster.simulate` (``gpucast simulate --sweep AXIS=V1,V2,...``):

* ``load``: the offered load the arrivals are rescaled to (:func:`gpucast.cluster.traces.at_load`);
* ``seed``: the seed of the truth's error draws;
* ``trace`` (alias ``mix``): the trace or workload mix (any ``--trace`` value);
* ``error-scale``: a factor on the base error model's sigmas (:meth:`ErrorModel.scaled`;
  ``0``: exact predictions);
* ``gpus``: the cluster's GPU count;
* ``policy``: the policies (the base's ``--policies`` list when not swept).

Every combination is a :class:`Point`; each point is simulated under each policy, and that
(point, policy) run is a pure function of its parameters: the trace it replays is loaded once in
the parent (:func:`prepare`) and handed to the run read-only, its seed is explicit, nothing is
shared between runs but read-only inputs. So the rows do not depend on which process ran them
nor in which order they finished, and a sweep gives the same table sequentially
(``workers=1``), on a local process pool (:class:`concurrent.futures.ProcessPoolExecutor`,
started with ``spawn`` so a worker starts from nothing the parent changed) or on a Ray cluster
(``ray_address``: ``auto``, ``host:port``, ``ray://host:port``, or ``local`` to start one here).

**Predictions are made once, in the parent.** :func:`prepare` predicts every distinct job profile
of every trace on every GPU type of the cluster (:func:`gpucast.cluster.truth.predict_cached`,
which also fills the disk cache) and ships that table with the traces; a run's truth reads its
predictions from the table (:class:`PredictionTable`), so no worker predicts a job of the trace
(a Ray worker on another machine needs neither the parent's disk cache nor its own). Predictions
outside the trace's profiles (none today; a policy's own) fall back to ``predict_cached``.

Rows: one per (point, policy), in the order of the axes as given (the last axis varies fastest,
policies innermost), whatever the order runs finished in. Each row holds the point's parameters
and the metrics of :func:`gpucast.cluster.metrics.summarize` (the ``simulate`` comparison table's
columns), plus each metric's change from the ``slot`` baseline run of the same point when
``slot`` is among the policies. Wall times are kept apart (:attr:`SweepResult.wall_s`), so two
sweeps' rows can be compared for equality.

Not modelled: retries of a failed run (a run that raises fails the sweep), Ray's fault tolerance,
runs larger than one worker's memory, balancing by each run's cost beyond starting the heaviest
loads first (:func:`_largest_first`).

One module of this size because the grid, its runners (local processes, Ray) and the collection of one sweep
share its configuration (the tables are :mod:`gpucast.cluster.sweep_tables`).
"""

from __future__ import annotations

import difflib
import itertools
import os
import time
from dataclasses import dataclass, field

# The sweep's table (its rows' changes from the baseline, the columns, Markdown and JSON) is
# gpucast.cluster.sweep_tables; its names stay importable from here.
from gpucast.cluster.sweep_tables import (BASELINE, GROUP, HEADERS, _param, markdown, rich_table,  # noqa: F401
                                          table_rows, to_json, varying, with_changes)

AXES = ("load", "seed", "trace", "error-scale", "gpus", "policy")
ALIASES = {"mix": "trace", "loads": "load", "seeds": "seed", "traces": "trace", "mixes": "trace",
           "error_scale": "error-scale", "policies": "policy"}
EXECUTORS = ("sequential", "processes", "ray")


class SweepError(ValueError):
    """Bad sweep input: one line."""


@dataclass(frozen=True)
class Base:
    """What every point shares (``gpucast simulate``'s options). ``error_sigma``: anything
    :func:`gpucast.cluster.errors.parse` accepts, or an ErrorModel; ``env``: an Environment or
    None; ``params``: more keyword parameters for :func:`gpucast.cluster.simulate`."""

    trace: str = "gavel"
    gpus: int = 128
    gpu_type: str = "v100-16gb"
    gpus_per_node: int = 8
    policies: tuple = ("slot", "gpucast")
    seed: int = 0
    error_sigma: object = "measured"
    limit: int | None = None
    load: float | None = None
    colocation: str = "measured-pairs"
    env: object = None
    params: tuple = ()
    mig_layout: str | None = None     # MIG layout of the carved nodes' GPUs (ClusterSpec.partitioned)
    mig_nodes: int | None = None
    mps_nodes: int | None = None      # nodes of whole GPUs that share them through MPS (ClusterSpec.with_mode)
    mps_replicas: int | None = None   # their MPS replicas (each client limited to 1/N; None: no limit)
    mig_dynamic: bool = False         # the carved nodes may be re-partitioned (gpucast.cluster.repartition)
    mig_start: str = "carved"         # the face they start with (ClusterSpec.partitioned)


@dataclass(frozen=True)
class Point:
    """One combination of the swept values (``None``: the base's)."""

    index: int
    load: float | None
    seed: int
    trace: str
    error_scale: float | None
    gpus: int
    policy: str

    def trace_key(self, base: Base) -> tuple:
        return (self.trace, self.gpus, base.limit, self.load)

    def label(self) -> dict:
        return {"trace": self.trace, "load": self.load, "seed": self.seed, "error_scale": self.error_scale,
                "gpus": self.gpus, "policy": self.policy}


@dataclass
class SweepResult:
    rows: list[dict]
    axes: dict
    executor: str
    workers: int
    wall_s: float
    point_wall_s: list[float] = field(default_factory=list)
    point_cpu_s: list[float] = field(default_factory=list)   # CPU time of each run's process


# ----------------------------------------------------------------------------- parsing


def axis_name(name: str) -> str:
    """The canonical axis for ``name`` (aliases allowed); SweepError with a suggestion otherwise."""
    n = name.strip().lower()
    n = ALIASES.get(n, n)
    if n in AXES:
        return n
    near = difflib.get_close_matches(n, list(AXES) + list(ALIASES), n=1, cutoff=0.5)
    hint = f"; did you mean {ALIASES.get(near[0], near[0])!r}?" if near else ""
    raise SweepError(f"--sweep: unknown axis {name.strip()!r}{hint} (axes: {', '.join(AXES)})")


def _number(axis: str, text: str, kind):
    try:
        v = kind(text)
    except ValueError:
        raise SweepError(f"--sweep {axis}: {text!r} is not {'an integer' if kind is int else 'a number'}") from None
    return v


def parse_values(axis: str, text: str, known_policies=()) -> list:
    """The values of ``axis`` in ``V1,V2,...`` (duplicates dropped, order kept); SweepError on a bad one."""
    raw = [v.strip() for v in text.split(",")]
    if not any(raw):
        raise SweepError(f"--sweep {axis}: no values (expected {axis}=V1,V2,...)")
    out = []
    for v in raw:
        if not v:
            continue
        if axis == "load":
            x = _number(axis, v, float)
            if not x > 0 or x == float("inf"):
                raise SweepError(f"--sweep load: {v!r} must be a number > 0")
        elif axis == "error-scale":
            x = _number(axis, v, float)
            if not x >= 0 or x == float("inf"):
                raise SweepError(f"--sweep error-scale: {v!r} must be a number >= 0")
        elif axis == "seed":
            x = _number(axis, v, int)
        elif axis == "gpus":
            x = _number(axis, v, int)
            if x < 1:
                raise SweepError(f"--sweep gpus: {v!r} must be at least 1")
        elif axis == "policy":
            x = v.lower()
            if known_policies and x not in known_policies:
                near = difflib.get_close_matches(x, list(known_policies), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise SweepError(f"--sweep policy: unknown policy {v!r}{hint} (choose from {', '.join(known_policies)})")
        else:
            x = v
        if x not in out:
            out.append(x)
    return out


def parse_axes(specs, known_policies=()) -> dict:
    """``["load=1,2", "seed=0,1"]`` -> ``{"load": [1.0, 2.0], "seed": [0, 1]}`` in the order given.
    An axis given twice, an unknown axis or a bad value raises SweepError (one line)."""
    axes: dict = {}
    for spec in specs:
        name, sep, values = str(spec).partition("=")
        if not sep:
            raise SweepError(f"--sweep {str(spec)!r}: expected AXIS=V1,V2,... (axes: {', '.join(AXES)})")
        axis = axis_name(name)
        if axis in axes:
            raise SweepError(f"--sweep {axis} is given twice")
        axes[axis] = parse_values(axis, values, known_policies)
    return axes


def points(base: Base, axes: dict) -> list[Point]:
    """Every combination of ``axes`` over ``base``: the first axis varies slowest, policies fastest."""
    names = [a for a in axes if a != "policy"]
    policies = list(axes.get("policy") or base.policies)
    out = []
    for combo in itertools.product(*(axes[a] for a in names)):
        v = dict(zip(names, combo))
        for pol in policies:
            out.append(Point(len(out), v.get("load", base.load), int(v.get("seed", base.seed)),
                             v.get("trace", base.trace), v.get("error-scale"), int(v.get("gpus", base.gpus)), pol))
    return out


# ----------------------------------------------------------------------------- the pure run


class PredictionTable:
    """A predictor (``(profile, gpu) -> Estimate``) answering from predictions made before the
    fan-out, with :func:`~gpucast.cluster.truth.predict_cached` for any other. Picklable."""

    def __init__(self, table: dict):
        self.table = table
        self.__name__ = "predict_cached"  # the default predictor's answers: a run's params say so

    def __call__(self, profile, gpu):
        est = self.table.get((profile, gpu))
        if est is None:
            from gpucast.cluster.truth import predict_cached

            est = predict_cached(profile, gpu)
        return est


@dataclass(frozen=True)
class Shared:
    """The read-only inputs of every run: traces by :meth:`Point.trace_key`, the prediction table,
    the base error model, the base configuration."""

    base: Base
    traces: dict
    table: PredictionTable
    error_model: object


def error_model(base: Base):
    """The base's error model, as ``simulate`` would resolve it (an environment's own for 'measured')."""
    from gpucast.cluster import errors

    es = base.error_sigma
    if isinstance(es, str) and es.strip().lower() in ("", "measured") and base.env is not None:
        return errors.from_environment(base.env)
    return errors.parse(es)


def prepare(base: Base, pts: list[Point], progress=None) -> Shared:
    """Load each distinct trace once and predict each distinct (job profile, GPU type) once, here.
    ``progress(done, total, what)`` follows a mix's drawing and the predictions."""
    import gpucast.cluster as cl
    from gpucast.cluster.truth import Profile, predict_cached, set_environment

    set_environment(base.env)
    try:
        raw, traces = {}, {}
        for p in pts:
            key = p.trace_key(base)
            if key in traces:
                continue
            if p.trace not in raw:
                tick = None if progress is None else (lambda i, n, t=p.trace: progress(i, n, f"drawing {t}"))
                raw[p.trace] = cl.load_trace(p.trace, progress=tick)
            traces[key] = cl.load_trace(raw[p.trace], gpus=p.gpus, limit=base.limit, load=p.load)
        gpu_types = sorted({t for p in pts for t in _spec(base, p.gpus).gpu_types})
        profiles = list(dict.fromkeys(Profile.from_trace_job(tj) for tr in traces.values() for tj in tr.jobs))
        todo = [(prof, g) for prof in profiles for g in gpu_types]
        table = {}
        for i, (prof, g) in enumerate(todo, 1):
            table[(prof, g)] = predict_cached(prof, g)
            if progress:
                progress(i, len(todo), "predicting")
    finally:
        set_environment(None)
    return Shared(base, traces, PredictionTable(table), error_model(base))


def _spec(base: Base, gpus: int):
    from gpucast.cluster.spec import ClusterSpec

    return ClusterSpec.build(base.gpu_type, gpus, base.gpus_per_node, base.mig_layout, base.mig_nodes, base.mps_nodes,
                             base.mps_replicas, base.mig_dynamic, base.mig_start)


def run_point(point: Point, shared: Shared, trace=None) -> tuple[dict, float, float]:
    """Simulate one point: (its summary row without the baseline change, wall seconds, CPU seconds)."""
    import gpucast.cluster as cl
    from gpucast.cluster import metrics
    from gpucast.cluster.truth import set_environment

    base = shared.base
    tr = trace if trace is not None else shared.traces[point.trace_key(base)]
    em = shared.error_model if point.error_scale is None else shared.error_model.scaled(point.error_scale)
    t0, c0 = time.perf_counter(), time.process_time()
    set_environment(base.env)
    try:
        res = cl.simulate(tr, _spec(base, point.gpus), point.policy, seed=point.seed, error_sigma=em,
                          colocation=base.colocation, predictor=shared.table, **dict(base.params))
    finally:
        set_environment(None)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = metrics.summarize(res)
    row = {**point.label(), **{k: v for k, v in s.items() if k != "policy"}}
    return row, wall, cpu


# ----------------------------------------------------------------------------- executors

_WORKER: dict = {}


def _worker_init(shared: Shared) -> None:
    _WORKER["shared"] = shared


def _worker_run(point: Point):
    return point.index, *run_point(point, _WORKER["shared"])


def _ray_run(point: Point, shared: Shared, trace):
    return point.index, *run_point(point, shared, trace)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def run(base: Base, axes: dict, *, workers: int | None = None, ray_address: str | None = None,
        progress=None, shared: Shared | None = None) -> SweepResult:
    """Run the sweep of ``axes`` over ``base``: on Ray when ``ray_address`` is given, else on
    ``workers`` local processes (default: the cores here; 1: sequentially in this process).
    ``progress(done, total, what)`` follows the predictions and then the runs."""
    pts = points(base, axes)
    t0 = time.perf_counter()
    if shared is None:
        shared = prepare(base, pts, progress)
    n = len(pts)
    rows: list = [None] * n
    walls: list = [0.0] * n
    cpus: list = [0.0] * n

    def done(i, row, wall, cpu, k):
        rows[i], walls[i], cpus[i] = row, wall, cpu
        if progress:
            progress(k, n, "simulating")

    if progress:
        progress(0, n, "simulating")
    if ray_address is not None:
        executor, workers = "ray", _run_ray(pts, shared, ray_address, done)
    else:
        workers = default_workers() if workers is None else workers
        if workers < 1:
            raise SweepError(f"--workers must be at least 1, got {workers}")
        workers = min(workers, n) or 1
        if workers == 1:
            executor = "sequential"
            for k, p in enumerate(pts, 1):
                done(p.index, *run_point(p, shared), k)
        else:
            executor = "processes"
            _run_processes(pts, shared, workers, done)
    return SweepResult(with_changes(rows), axes, executor, workers, time.perf_counter() - t0, walls, cpus)


def _largest_first(pts: list) -> list:
    """The runs in the order a pool should start them: the heaviest offered load first (a run's
    time grows with the jobs it holds at once), so the last runs to finish are short ones and
    the workers finish together; equal loads in axis order."""
    return sorted(pts, key=lambda p: -(p.load if p.load is not None else 0.0))


def _run_processes(pts: list, shared: Shared, workers: int, done) -> None:
    """A pool of ``workers`` processes (``spawn``), every run submitted at once, heaviest first."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_init, initargs=(shared,)) as pool:
        futures = [pool.submit(_worker_run, p) for p in _largest_first(pts)]
        try:
            for k, fut in enumerate(as_completed(futures), 1):
                done(*fut.result(), k)
        except BaseException:   # a failed run or Ctrl-C: do not start the rest
            for fut in futures:
                fut.cancel()
            raise


def connect(address: str) -> bool:
    """Connect this process to the Ray cluster at ``address`` (``local``: start one here) unless it
    is connected already; True when this call connected (the caller then calls ``ray.shutdown()``).
    A cluster that cannot be reached raises SweepError (one line)."""
    try:
        import ray
    except ImportError:
        raise SweepError("--ray-address needs Ray: pip install 'gpucast[ray]'") from None
    if ray.is_initialized():
        return False
    _reachable(address)
    kw = dict(include_dashboard=False) if address == "local" else {}
    try:
        ray.init(address=address, log_to_driver=False, **kw)
    except Exception as e:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError...: one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SweepError(f"--ray-address {address!r}: cannot connect to a Ray cluster: {msg}") from None
    return True


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """For a ``host:port`` (or ``ray://host:port``) address, a TCP connection to it, so that a
    cluster that is not there fails in seconds with one line (Ray itself retries for minutes)."""
    import socket

    hostport = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        if address in ("auto", "local"):
            return
        raise SweepError(f"--ray-address {address!r}: expected 'auto', 'local', 'host:port' or 'ray://host:port'")
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise SweepError(f"--ray-address {address!r}: cannot connect to a Ray cluster: "
                         f"{e.strerror or type(e).__name__}") from None


def _run_ray(pts, shared: Shared, address: str, done) -> int:
    """Run the points as Ray tasks (one CPU each); the traces and the prediction table are put in
    the object store once. Returns the cluster's CPU count."""
    import ray

    started = connect(address)
    try:
        remote = ray.remote(num_cpus=1)(_ray_run)
        base_shared = Shared(shared.base, {}, shared.table, shared.error_model)
        shared_ref = ray.put(base_shared)
        trace_refs = {k: ray.put(t) for k, t in shared.traces.items()}
        pending = {remote.remote(p, shared_ref, trace_refs[p.trace_key(shared.base)]): p for p in pts}
        k = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                pending.pop(ref)
                k += 1
                done(*ray.get(ref), k)
        return int(ray.cluster_resources().get("CPU", 0))
    finally:
        if started:
            ray.shutdown()


# ----------------------------------------------------------------------------- the table
