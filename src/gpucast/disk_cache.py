"""Predictions kept on disk, so that asking again about the same job is fast.

A cold ``gpucast predict`` spends most of its seconds importing torch and capturing the graph; the
answer for the same question is the same until something it depends on changes. This module stores
each :class:`~gpucast.prediction.Prediction` as one JSON file and looks it up by a key, without
importing torch (nor the estimator: a hit needs neither). It is gpucast's one prediction cache:
``gpucast predict`` and the simulator's truth (:func:`gpucast.cluster.truth.predict_cached`) read
and write the same entries (the same job, GPU and environment has one key, whoever asks).

What the key covers (:func:`key`), a sha256 over:

* the job's :attr:`~gpucast.job.Job.key` (its fields; an ONNX job's file digest; an HF config);
* the GPU: its name and a digest of its resolved :class:`~gpucast.hardware.GpuSpec` fields, so an
  edited spec file misses;
* the environment: its label and a digest of its fields (the default one: ``default`` and the
  packaged fit, which the data digest below covers);
* gpucast's version (``analytic-<version>``) and a digest of the bytes of gpucast's own source
  (every ``.py`` in the package), so editing the model misses even without a version bump; the
  packaged data a prediction depends on (:data:`DATA_FILES`); the installed versions of the
  libraries that define and capture graphs (:data:`LIBRARIES`) and Python's (:func:`fingerprint`:
  ~40 ms, once per process);
* the run window (``window_s``) and the bytes of any other file that changes the answer (the CLI's
  ``--constants`` and ``--learned`` files).

A Hugging Face job (``--hf-config config.json``) is keyed by the config's content (its canonical
JSON is a field of the job): an edited file misses. Making the job checks the config's model type
against transformers' list (and a named config, ``--hf-config bert``, takes its class's defaults),
which :func:`remembered` keeps here too (``memo/hf-model-types.json``, ``memo/hf-defaults-<type>.json``,
under a digest of the installed transformers' ``models/auto`` sources), so a hit imports neither
torch nor transformers.

What is never cached (:func:`cacheable`): module jobs (``--module``: the user's code builds the
model) and jobs whose data names a dataset, collate function or environment (user code, measured
on this CPU each time).

Where (:func:`root`, :func:`directory`): ``$GPUCAST_CACHE_DIR/predict``, else
``$XDG_CACHE_HOME/gpucast/predict``, else ``~/.cache/gpucast/predict`` (remembered values in
``memo/`` beside it). ``GPUCAST_NO_CACHE=1`` or ``GPUCAST_CACHE_DIR=off`` turns both off.
Entries are written atomically (a temporary file in the same directory, then ``os.replace``), so
concurrent writers of one key leave one whole entry; an entry that cannot be read, does not parse
or names another key is a miss and is overwritten. The directory is pruned after each write to
:data:`MAX_ENTRIES` files and :data:`MAX_BYTES`, least recently used first (a hit touches its
file). A cache that cannot be read or written never fails a prediction: it is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

from gpucast.version import __version__
from gpucast.prediction import Prediction

FORMAT = 1
CACHE_DIR_ENV = "GPUCAST_CACHE_DIR"
NO_CACHE_ENV = "GPUCAST_NO_CACHE"
SUBDIR = "predict"
MEMO_SUBDIR = "memo"
MAX_ENTRIES = 2000  # ~4-8 KB each
MAX_BYTES = 64 * 2**20
DATA_FILES = ("environment_fit.json", "measured_error.json", "gpus.yaml", "timeshare_current.json", "achieved.yaml",
              "serving_fit.json")
LIBRARIES = ("torch", "torchvision", "transformers", "onnx", "lightgbm")
_OFF = ("off", "0", "none", "false")
_PACKAGE = Path(__file__).resolve().parent


def root() -> Path | None:
    """The folder every gpucast disk cache lives under, or ``None`` when caching is turned off
    (see the module docstring)."""
    if os.environ.get(NO_CACHE_ENV, "").strip().lower() not in ("", *_OFF):
        return None
    base = os.environ.get(CACHE_DIR_ENV, "").strip()
    if base.lower() in _OFF:
        return None
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "gpucast"
    return Path(base).expanduser()


def directory() -> Path | None:
    """Where prediction entries live, or ``None`` when the cache is turned off (see the module docstring)."""
    where = root()
    return None if where is None else where / SUBDIR


def cacheable(job) -> bool:
    """Whether ``job``'s prediction may be kept: not when it runs the user's code (a module job, or
    data naming a dataset, collate function or environment that is measured each time)."""
    return not job.is_module and not (job.data is not None and job.data.has_code)


def _digest(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _jsonable(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=repr)


_fingerprint: str | None = None


def fingerprint() -> str:
    """A digest of what every prediction depends on besides its inputs: gpucast's version and
    source, the packaged data files, and the versions of the graph libraries and Python."""
    global _fingerprint
    if _fingerprint is None:
        from importlib import metadata

        h = hashlib.sha256(f"analytic-{__version__}\0".encode())
        for root, dirs, files in os.walk(_PACKAGE):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = Path(root, name)
                    h.update(f"{path.relative_to(_PACKAGE).as_posix()}\0".encode() + path.read_bytes())
        for name in DATA_FILES:
            path = _PACKAGE / "data" / name
            h.update(f"data/{name}\0".encode() + (path.read_bytes() if path.is_file() else b"(absent)"))
        for lib in LIBRARIES:
            try:
                version = metadata.version(lib)
            except metadata.PackageNotFoundError:
                version = "(absent)"
            h.update(f"{lib}=={version}\0".encode())
        h.update(f"python {sys.version_info[0]}.{sys.version_info[1]}".encode())
        _fingerprint = h.hexdigest()
    return _fingerprint


def environment_part(env) -> list:
    """The environment in a key: its label and a digest of its fields (``None``: the default one,
    built from the packaged fit that :func:`fingerprint` covers)."""
    if env is None:
        return ["default", None]
    from dataclasses import fields

    return [env.label, _digest(_jsonable([[f.name, getattr(env, f.name)] for f in fields(env)]))]


def key(job, gpu, env=None, window_s=None, files: Iterable = (), file_digests: Sequence[str] | None = None) -> str:
    """The key of ``job``'s prediction on ``gpu`` (a GpuSpec) in ``env``, over the first
    ``window_s`` seconds (None: steady state), with ``files`` (paths whose bytes change the answer;
    or their ``file_digests``, read once for several GPUs)."""
    digests = [_digest(Path(p).read_bytes()) for p in files] if file_digests is None else list(file_digests)
    parts = {"format": FORMAT, "job": job.key, "gpu": [gpu.name, _digest(_jsonable(gpu.to_dict()))],
             "env": environment_part(env), "window_s": window_s, "code": fingerprint(), "files": digests}
    return _digest(_jsonable(parts))


def _path(k: str, where: Path | None = None) -> Path | None:
    where = directory() if where is None else where
    return None if where is None else where / f"{k}.json"


def load(k: str) -> Prediction | None:
    """The prediction stored under key ``k``, or ``None`` (a miss: absent, unreadable, corrupt or
    another key's)."""
    path = _path(k)
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != k:
            return None
        pred = Prediction.from_dict(doc["prediction"])
    except Exception:  # noqa: BLE001 - unreadable, partial or foreign: a miss, recomputed and overwritten
        return None
    try:
        os.utime(path)  # recently used: pruned last
    except OSError:
        pass
    return pred


def store(k: str, pred: Prediction) -> None:
    """Keep ``pred`` under key ``k`` (atomically), then prune; a disk that refuses is skipped."""
    path = _path(k)
    if path is None:
        return
    from gpucast.fileio import atomic_write_text

    try:
        text = json.dumps({"format": FORMAT, "key": k, "prediction": pred.to_dict()}, allow_nan=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        prune(path.parent)
    except (OSError, TypeError, ValueError):
        pass  # a read-only or full disk, or a value JSON cannot hold: no cache, same answer


def remembered(name: str, parts, compute: Callable[[], object]):
    """``compute()`` (a JSON value) kept on disk as ``<root>/memo/<name>.json`` under a digest of
    ``parts`` (everything the value is a function of), so that another process gets it without
    computing it; a stored value of other ``parts`` is recomputed and replaced. One file per
    ``name`` (nothing to prune); a cache that is off, unreadable or unwritable just computes."""
    where = root()
    if where is None:
        return compute()
    k = _digest(_jsonable([FORMAT, name, parts]))
    path = where / MEMO_SUBDIR / f"{name}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("key") == k and "value" in doc:
            return doc["value"]
    except Exception:  # noqa: BLE001 - absent, unreadable, partial or foreign: recompute and overwrite
        pass
    value = compute()
    from gpucast.fileio import atomic_write_text

    try:
        text = json.dumps({"format": FORMAT, "key": k, "value": value})
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except (OSError, TypeError, ValueError):
        pass
    return value


def prune(where: Path, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> int:
    """Remove the least recently used entries of ``where`` beyond ``max_entries`` files or
    ``max_bytes`` bytes (and temporary files an interrupted writer left over an hour ago);
    returns how many were removed."""
    import time

    entries, stale = [], []
    with os.scandir(where) as it:
        for e in it:
            try:
                st = e.stat()
            except OSError:
                continue
            if e.name.endswith(".json") and not e.name.startswith("."):
                entries.append((st.st_mtime_ns, st.st_size, e.path))
            elif e.name.endswith(".tmp") and st.st_mtime < time.time() - 3600:
                stale.append(e.path)
    entries.sort(reverse=True)  # newest first
    total, drop = 0, list(stale)
    for i, (_, size, p) in enumerate(entries):
        total += size
        if i >= max_entries or total > max_bytes:
            drop.append(p)
    removed = 0
    for p in drop:
        try:
            os.unlink(p)
            removed += 1
        except OSError:
            pass
    return removed


def predictions(job, specs: Sequence, compute: Callable, env=None, window_s=None, files: Iterable = (),
                enabled: bool = True) -> list[Prediction]:
    """``job``'s prediction on each GpuSpec of ``specs``: from the cache where it holds one, else
    ``compute(spec)`` (stored). ``compute`` runs for every spec when the cache is off (``enabled``
    False, :func:`directory` None) or the job is not :func:`cacheable`."""
    if not enabled or directory() is None or not cacheable(job):
        return [compute(s) for s in specs]
    try:
        digests = [_digest(Path(p).read_bytes()) for p in files]
    except OSError:  # a file went unreadable: answer without the cache
        return [compute(s) for s in specs]
    out = []
    for s in specs:
        try:
            k = key(job, s, env, window_s, file_digests=digests)
        except OSError:  # gpucast's source went unreadable: answer without the cache
            out.append(compute(s))
            continue
        pred = load(k)
        if pred is None:
            pred = compute(s)
            store(k, pred)
        out.append(pred)
    return out
