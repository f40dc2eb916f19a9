"""Time a job's own data on this CPU: a user's Dataset and collate function, or an RL environment.

A job names its code as ``FILE.py:FUNCTION`` strings (:class:`gpucast.surroundings.Data`):

* ``data.dataset``: a factory with no arguments returning a **map-style** dataset (``__getitem__``
  and ``__len__``, ``len >= 1``: a ``torch.utils.data.Dataset``, or any such sequence). An
  ``IterableDataset`` is refused (its cost per sample cannot be sampled at random indices);
* ``data.collate``: the loader's ``collate_fn`` (default: ``torch.utils.data.default_collate``);
* ``data.environment``: a factory returning an object with ``reset()`` and ``step(action)``. The
  action of each step is ``env.action_space.sample()`` when the environment has an
  ``action_space`` with a ``sample()`` method (gym/gymnasium), else ``None``: an environment
  without an action space must accept ``step(None)``. A step whose result is a 5-tuple
  (gymnasium: ``terminated or truncated``) or a 4-tuple (gym: ``done``) that ends an episode is
  followed by ``reset()``, whose time counts towards the steps.

Files are imported with :func:`gpucast.graph.usercode.load_callable` (the ``--module`` loader),
relative paths against the current directory.

What is measured, on *this* CPU in *this* process, one thread (and one intra-op thread of PyTorch,
as in a DataLoader worker):

* ``__getitem__`` at random indices without replacement (seed 0): ``warmup`` samples untimed,
  then up to ``max_samples`` samples or ``max_s`` seconds of them, whichever comes first; the
  mean seconds per sample;
* the collation of batches of the job's batch size built from those samples (samples reused when
  fewer were fetched): one untimed, then up to ``collate_batches`` timed (within ``max_s``); the
  mean seconds per batch, and the bytes per sample of the collated batch's tensors (the sum of
  every tensor's or array's ``nbytes`` in it, over the batch size);
* an environment's ``step`` (with the resets it needs): ``warmup`` steps, then up to
  ``max_samples`` steps or ``max_s`` seconds; the mean seconds per step; the bytes of one
  observation.

The job's ``data.per_sample_s`` is then ``(getitem + collate / batch) * speed_here`` (per step for
an environment), ``speed_here`` being this CPU's single-thread speed relative to the reference
core (:func:`gpucast.probe.host.cpu_speed_here`): reference-core seconds, which
:mod:`gpucast.estimate.loader` scales to the target host (the stack's ``cpu_speed``, the cluster's
``host_time_factor``) and spreads over the job's workers.

Not measured: the CUDA copy path (pinning, the host-device link), disk or network reads beyond
what the factory and ``__getitem__`` themselves do on this machine (a second read of a file comes
from the page cache), the DataLoader's worker processes and their queues (the loader model adds
them), the GIL shared with the training loop's main process, other processes on the target host.

Limits: building (the factory) ``build_limit_s`` (60 s), one ``__getitem__``/collate/step/reset
call ``call_limit_s`` (10 s); on the main thread with ``SIGALRM`` (``signal.setitimer``), on other
threads by running the call in a helper thread and waiting ``join(timeout)`` (a call past its
limit keeps running in the background: Python cannot stop a thread). Every failure is one
:class:`ProbeError` line naming the factory, e.g. ``data.dataset train.py:make_dataset:
__getitem__(17) raised KeyError: 'x'``. Nothing is written anywhere; successful measurements are
cached in this process by (resolved path, mtime, size, function names, batch size, limits).

This runs the user's code with the user's rights: only the CLI and the Python API call it, never
the service (which refuses such jobs).

One module of this size because loading the user's code, timing it and caching the result are one
measurement.
"""

from __future__ import annotations

import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gpucast.job import Job, JobError
from gpucast.probe.host import cpu_speed_here, one_thread
from gpucast.surroundings import SpecError

__all__ = ["ProbeError", "Measured", "measure_dataset", "measure_environment", "measure_job", "resolve_job",
           "clear_cache"]

BUILD_LIMIT_S = 60.0
CALL_LIMIT_S = 10.0
MAX_SAMPLES = 300
MAX_S = 3.0
WARMUP = 3
COLLATE_BATCHES = 3


class ProbeError(ValueError):
    """Measuring a job's dataset, collate function or environment failed; one line naming it."""


class _Timeout(BaseException):
    """Raised by SIGALRM inside a user's call (a BaseException: ``except Exception`` in user code
    does not swallow it)."""


@dataclass(frozen=True)
class Measured:
    """One measurement on this CPU (seconds of this CPU; ``per_sample_ref`` is the reference core's)."""

    kind: str                 # "dataset" or "environment"
    ref: str                  # the factory, FILE.py:FUNCTION
    collate: str | None       # the collate function's reference (None: default_collate)
    batch_size: int
    samples: int              # samples (or steps) timed
    getitem_s: float          # mean seconds per __getitem__ (or step, resets included) here
    collate_s: float          # mean seconds to collate one batch of batch_size here (0 for environments)
    sample_bytes: int | None  # bytes per sample of the collated batch's tensors (an observation's)
    length: int | None        # len(dataset) (None for environments)
    speed_here: float         # this CPU's single-thread speed relative to the reference core

    @property
    def per_sample_here(self) -> float:
        return self.getitem_s + self.collate_s / self.batch_size

    @property
    def per_sample_ref(self) -> float:
        """Reference-core seconds per sample (``data.per_sample_s``)."""
        return self.per_sample_here * self.speed_here

    def note(self) -> str:
        field = "data.environment" if self.kind == "environment" else "data.dataset"
        what = (f"{self.getitem_s * 1e3:.3g} ms per step over {self.samples} steps" if self.kind == "environment" else
                f"{self.getitem_s * 1e3:.3g} ms per __getitem__ over {self.samples} samples + "
                f"{self.collate_s * 1e3:.3g} ms per collated batch of {self.batch_size}")
        size = f"; {self.sample_bytes:,} bytes per sample" if self.sample_bytes is not None else ""
        return (f"{field} {self.ref} measured on this CPU: {what}; x speed {self.speed_here:.2f} = "
                f"{self.per_sample_ref * 1e3:.3g} ms per sample on the reference core{size}")


# ------------------------------------------------------------------------------ guarded calls
def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


class _Guard:
    """Runs a user's calls under a time limit; failures become ProbeError lines with ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.main = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
        self._old_handler = None
        self._old_timer = (0.0, 0.0)
        self._t_enter = 0.0

    def __enter__(self):
        if self.main:
            self._t_enter = time.monotonic()
            self._old_timer = signal.setitimer(signal.ITIMER_REAL, 0)
            self._old_handler = signal.signal(signal.SIGALRM, self._on_alarm)
        return self

    def __exit__(self, *exc):
        if self.main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_handler if self._old_handler is not None else signal.SIG_DFL)
            left, interval = self._old_timer
            if left > 0:  # give back an alarm someone else had set, less the time spent here
                signal.setitimer(signal.ITIMER_REAL, max(1e-3, left - (time.monotonic() - self._t_enter)), interval)
        return False

    @staticmethod
    def _on_alarm(signum, frame):
        raise _Timeout()

    def fail(self, message: str) -> ProbeError:
        return ProbeError(f"{self.prefix}: {message}"[:500])

    def call(self, fn, what: str, limit_s: float):
        """(fn(), seconds it took); ProbeError past ``limit_s`` or when fn raises."""
        if self.main:
            try:
                signal.setitimer(signal.ITIMER_REAL, limit_s)
                try:
                    t0 = time.perf_counter()
                    out = fn()
                    t1 = time.perf_counter()
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except _Timeout:
                raise self.fail(f"{what} took longer than {limit_s:g} s") from None
            except Exception as exc:
                raise self.fail(f"{what} raised {type(exc).__name__}: {_first_line(exc)}".rstrip(": ")) from None
            return out, t1 - t0
        box: dict = {}

        def run():
            try:
                t0 = time.perf_counter()
                box["out"] = fn()
                box["s"] = time.perf_counter() - t0
            except BaseException as exc:  # reported by the waiting thread
                box["exc"] = exc

        t = threading.Thread(target=run, name="gpucast-probe-call", daemon=True)
        t.start()
        t.join(limit_s)
        if t.is_alive():
            raise self.fail(f"{what} took longer than {limit_s:g} s (it keeps running in a background thread)")
        if "exc" in box:
            exc = box["exc"]
            raise self.fail(f"{what} raised {type(exc).__name__}: {_first_line(exc)}".rstrip(": "))
        return box["out"], box["s"]


def _load(ref: str, field: str, what: str):
    from gpucast.graph.usercode import load_callable

    try:
        return load_callable(ref, f"{field} {ref}")
    except JobError as exc:
        raise ProbeError(str(exc).splitlines()[0] if str(exc) else f"{field} {ref}: cannot load {what}") from None


def _nbytes(obj, depth: int = 0) -> int:
    """Bytes of the tensors and arrays in a (nested) batch."""
    if depth > 8:
        return 0
    n = getattr(obj, "nbytes", None)
    if isinstance(n, int) and hasattr(obj, "shape"):  # numpy arrays, torch tensors
        return n
    if hasattr(obj, "element_size") and hasattr(obj, "numel"):  # torch < 2.1 has no Tensor.nbytes
        try:
            return int(obj.element_size() * obj.numel())
        except Exception:
            return 0
    if isinstance(obj, dict):
        return sum(_nbytes(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v, depth + 1) for v in obj)
    return 0


def _describe(obj) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


# ------------------------------------------------------------------------------ measurements
def measure_dataset(ref: str, batch_size: int, collate: str | None = None, *, max_samples: int = MAX_SAMPLES,
                    max_s: float = MAX_S, warmup: int = WARMUP, collate_batches: int = COLLATE_BATCHES,
                    build_limit_s: float = BUILD_LIMIT_S, call_limit_s: float = CALL_LIMIT_S,
                    speed_here: float | None = None) -> Measured:
    """Time ``ref``'s dataset and its collation on this CPU (see the module docstring)."""
    prefix = f"data.dataset {ref}"
    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ProbeError(f"{prefix}: batch size must be a positive integer, got {batch_size!r}")
    factory = _load(ref, "data.dataset", "the dataset factory")
    collate_fn = _load(collate, "data.collate", "the collate function") if collate else None
    with _Guard(prefix) as g, one_thread():
        ds, _ = g.call(factory, f"{ref.rpartition(':')[2]}()", build_limit_s)
        try:
            from torch.utils.data import IterableDataset
        except ImportError:  # pragma: no cover - torch is a dependency
            IterableDataset = ()
        if isinstance(ds, IterableDataset):
            raise g.fail("returned an IterableDataset; only map-style datasets (with __getitem__ and __len__) "
                         "are measured")
        if not (callable(getattr(ds, "__getitem__", None)) and callable(getattr(ds, "__len__", None))):
            raise g.fail(f"returned {_describe(ds)}, not a map-style Dataset (one with __getitem__ and __len__)")
        n, _ = g.call(lambda: len(ds), "len(dataset)", call_limit_s)
        if not isinstance(n, int) or n < 1:
            raise g.fail(f"the dataset is empty (len {n})" if n == 0 else f"len(dataset) is {n!r}, not a positive "
                                                                          f"integer")
        rng = random.Random(0)
        order = rng.sample(range(n), min(n, warmup + max_samples))
        kept: list = []
        timed, total, pos = 0, 0.0, 0
        started = time.perf_counter()
        while True:
            if pos >= warmup and (timed >= max_samples or time.perf_counter() - started >= max_s):
                break
            i = order[pos % len(order)]
            sample, s = g.call(lambda: ds[i], f"__getitem__({i})", call_limit_s)
            if len(kept) < batch_size:
                kept.append(sample)
            if pos >= warmup:
                timed += 1
                total += s
            else:
                started = time.perf_counter()  # the window starts after the warm-up
            pos += 1
        if collate_fn is None:
            from torch.utils.data import default_collate

            collate_fn = default_collate
            collate_prefix, name = prefix, "default_collate"
        else:
            collate_prefix, name = f"data.collate {collate}", collate.rpartition(":")[2]
        batch_list = (kept * math.ceil(batch_size / len(kept)))[:batch_size]
        g.prefix = collate_prefix
        batch, _ = g.call(lambda: collate_fn(batch_list), f"{name} of {batch_size} samples", call_limit_s)
        sample_bytes = _nbytes(batch) // batch_size
        del batch
        c_total, c_n, c_start = 0.0, 0, time.perf_counter()
        while c_n < collate_batches and (c_n == 0 or time.perf_counter() - c_start < max_s):
            out, s = g.call(lambda: collate_fn(batch_list), f"{name} of {batch_size} samples", call_limit_s)
            del out
            c_total += s
            c_n += 1
    speed = _speed() if speed_here is None else speed_here
    return Measured(kind="dataset", ref=ref, collate=collate, batch_size=batch_size, samples=timed,
                    getitem_s=total / timed, collate_s=c_total / c_n, sample_bytes=int(sample_bytes), length=n,
                    speed_here=speed)


def _done(result) -> bool:
    if isinstance(result, tuple):
        if len(result) >= 5:
            return bool(result[2]) or bool(result[3])
        if len(result) == 4:
            return bool(result[2])
    return False


def measure_environment(ref: str, *, max_steps: int = MAX_SAMPLES, max_s: float = MAX_S, warmup: int = WARMUP,
                        build_limit_s: float = BUILD_LIMIT_S, call_limit_s: float = CALL_LIMIT_S,
                        speed_here: float | None = None) -> Measured:
    """Time ``ref``'s environment steps on this CPU (see the module docstring)."""
    prefix = f"data.environment {ref}"
    factory = _load(ref, "data.environment", "the environment factory")
    with _Guard(prefix) as g, one_thread():
        env, _ = g.call(factory, f"{ref.rpartition(':')[2]}()", build_limit_s)
        if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
            raise g.fail(f"returned {_describe(env)}, not an environment (one with reset() and step(action))")
        space = getattr(env, "action_space", None)
        sample = getattr(space, "sample", None) if space is not None else None
        action = sample if callable(sample) else (lambda: None)
        g.call(env.reset, "reset()", call_limit_s)
        timed, total, pos, obs_bytes = 0, 0.0, 0, None
        started = time.perf_counter()
        while True:
            if pos >= warmup and (timed >= max_steps or time.perf_counter() - started >= max_s):
                break
            a, _ = g.call(action, "action_space.sample()", call_limit_s)
            result, s = g.call(lambda: env.step(a), "step(action)", call_limit_s)
            if obs_bytes is None:
                obs_bytes = _nbytes(result[0] if isinstance(result, tuple) and result else result)
            if _done(result):
                _, r = g.call(env.reset, "reset()", call_limit_s)
                s += r
            if pos >= warmup:
                timed += 1
                total += s
            else:
                started = time.perf_counter()
            pos += 1
        close = getattr(env, "close", None)
        if callable(close):
            g.call(close, "close()", call_limit_s)
    speed = _speed() if speed_here is None else speed_here
    return Measured(kind="environment", ref=ref, collate=None, batch_size=1, samples=timed,
                    getitem_s=total / timed, collate_s=0.0, sample_bytes=obs_bytes, length=None, speed_here=speed)


def _speed() -> float:
    return float(cpu_speed_here())


# ------------------------------------------------------------------------------ jobs
_cache: dict = {}
_cache_lock = threading.Lock()


def _file_key(ref: str | None):
    if ref is None:
        return None
    path, _, name = ref.rpartition(":")
    p = Path(path)
    try:
        st = p.stat()
        return (str(p.resolve()), st.st_mtime_ns, st.st_size, name)
    except OSError:
        return (os.path.abspath(path), None, None, name)  # load_callable reports the missing file


def clear_cache() -> None:
    """Forget this process's measurements."""
    with _cache_lock:
        _cache.clear()


def measure_job(job: Job, **limits) -> Measured | None:
    """The measurement of ``job``'s dataset or environment (cached), or None when it names neither
    or gives ``data.per_sample_s`` itself. ``limits``: keyword arguments of :func:`measure_dataset`."""
    d = job.data
    if d is None or d.per_sample_s is not None or (d.dataset is None and d.environment is None):
        return None
    if d.environment is not None:
        key = ("environment", _file_key(d.environment), tuple(sorted(limits.items())))
    else:
        key = ("dataset", _file_key(d.dataset), _file_key(d.collate), job.batch_size, tuple(sorted(limits.items())))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    if d.environment is not None:
        env_limits = dict(limits)
        if "max_samples" in env_limits:
            env_limits["max_steps"] = env_limits.pop("max_samples")
        env_limits.pop("collate_batches", None)
        m = measure_environment(d.environment, **env_limits)
    else:
        m = measure_dataset(d.dataset, job.batch_size, d.collate, **limits)
    with _cache_lock:
        _cache[key] = m
    return m


def resolve_job(job: Job, **limits) -> tuple[Job, Measured | None]:
    """``job`` with its data measured: ``per_sample_s`` (reference-core seconds), ``sample_bytes``
    and, for a dataset, ``dataset_samples`` (its length) filled where unset, and ``source`` set to
    ``custom`` (a dataset) or ``environment`` where unset. A new Job (``job`` is unchanged); ``job``
    itself and None when there is nothing to measure."""
    m = measure_job(job, **limits)
    if m is None:
        return job, None
    d = job.data
    changes = {"per_sample_s": m.per_sample_ref}
    if d.source is None:
        changes["source"] = "environment" if m.kind == "environment" else "custom"
    if d.sample_bytes is None and m.sample_bytes is not None:
        changes["sample_bytes"] = m.sample_bytes
    if d.dataset_samples is None and m.length is not None:
        changes["dataset_samples"] = m.length
    try:
        return job.with_(data=replace(d, **changes)), m
    except (JobError, SpecError) as exc:  # e.g. a sample slower than data.per_sample_s allows
        raise ProbeError(f"{'data.environment' if m.kind == 'environment' else 'data.dataset'} {m.ref}: "
                         f"{_first_line(exc)}") from None
