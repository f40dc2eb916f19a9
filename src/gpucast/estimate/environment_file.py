"""Environment files: an Environment as small, human-readable YAML (its format, reader and writer).

Layout (``format: 1``)::

    gpucast_environment: 1          # the format; a newer one is refused
    gpucast_version: 0.1.0          # the gpucast that wrote it
    label: my-cluster
    created: 2026-12-01T14:00:00+00:00
    base: default                   # the constants the fit started from: default | priors
    provenance: {rows: 5, files: [{path, sha256}], groups: [...], gpus: [...], measured: {...}}
    fit: {params: [...], prior_weight: 4.0, before: {...}, after: {...}, cross_validated: {...}, cv_unit: group}
    constants: {item_s: 3.1e-05, gpu_kernel_factors: {a100-40gb: 1.12}, ...}   # the fitted ones
    #          serving_host_s: {vllm: 0.0042}: an engine's host seconds per iteration (serving rows)
    intervals: {util_pct: {level: 0.8, log_halfwidth: 0.05, rows: 5}, ...}

:func:`load_environment` lays ``constants`` over the base and returns the Environment with
``label = <label>@<digest>`` (the digest covers constants and intervals, so two files that
predict differently never share a model version), and ``.<N>-rows`` after it when the fit saw
fewer than :data:`FEW_ROWS` rows. Format 0 is a flat ``name: value`` constants
file (``--constants`` style): it is migrated with a message. A file from another gpucast version
of the same format is read with a message; one naming a constant this version does not know is
refused, naming it. Writes are atomic.

Why here, beside :mod:`gpucast.estimate.environment`: the file is the Environment's own format,
written by ``gpucast calibrate`` (:mod:`gpucast.learn.artifacts` makes the document of a fit) and
by ``gpucast probe-host`` (:mod:`gpucast.probe.host`), read by ``--env`` on every command. The
predictor path (``probe``, ``api``) uses it without importing ``learn``, which sits above the
predictor (docs/layering.md). ``gpucast.learn.artifacts`` re-exports every name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gpucast.estimate.environment import PER_ENGINE, PER_GPU, Environment
from gpucast.version import __version__

FORMAT = 1
# Below this many rows a calibration or a learned model says so in every model_version it makes.
FEW_ROWS = 300


class EnvironmentFileError(ValueError):
    """An environment file cannot be read; one line naming the file and the cause."""


def save_environment(doc: dict, path: str | Path) -> None:
    import yaml

    from gpucast.fileio import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(_plain(doc), sort_keys=False, default_flow_style=False))


def _plain(obj):
    """numpy scalars and tuples to plain YAML types."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, str):
        return str(obj)
    if hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def load_environment(path: str | Path) -> tuple[Environment, list[str]]:
    """The Environment of a file, and messages about how it was read (migration, version)."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EnvironmentFileError(f"cannot read environment file {str(path)!r}: {exc.strerror}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EnvironmentFileError(f"environment file {str(path)!r} is not valid YAML: {first}") from None
    if not isinstance(doc, dict) or not doc:
        raise EnvironmentFileError(f"environment file {str(path)!r} must hold a mapping")
    messages = []
    fmt = doc.get("gpucast_environment", 0)
    if fmt == 0:
        messages.append(f"{path}: a flat constants file (format 0): migrated to an environment over the defaults; "
                        f"run gpucast calibrate to give it provenance and intervals")
        doc = {"gpucast_environment": FORMAT, "gpucast_version": "unknown", "label": path.stem, "base": "default",
               "constants": doc, "intervals": {}}
    elif not isinstance(fmt, int) or fmt > FORMAT:
        raise EnvironmentFileError(f"environment file {str(path)!r} has format {fmt!r} (written by gpucast "
                                   f"{doc.get('gpucast_version', '?')}); this gpucast {__version__} reads format "
                                   f"{FORMAT}: upgrade gpucast or calibrate again")
    elif doc.get("gpucast_version") != __version__:
        messages.append(f"{path}: written by gpucast {doc.get('gpucast_version', '?')}, read by {__version__}: "
                        f"its constants keep their names and units in format {FORMAT}")
    base = Environment.priors() if doc.get("base") == "priors" else Environment.default()
    constants = doc.get("constants") or {}
    if not isinstance(constants, dict):
        raise EnvironmentFileError(f"environment file {str(path)!r}: 'constants' must be a mapping")
    known = set(base.constants())
    values = {}
    for name, v in constants.items():
        if name == PER_GPU:
            if not isinstance(v, dict):
                raise EnvironmentFileError(f"environment file {str(path)!r}: {PER_GPU} must map GPU names to factors")
            for gpu, f in v.items():
                values[f"{PER_GPU}:{gpu}"] = _positive(path, f"{PER_GPU}.{gpu}", f)
        elif name == PER_ENGINE:
            from gpucast.estimate.serving.engines import ENGINES

            if not isinstance(v, dict):
                raise EnvironmentFileError(f"environment file {str(path)!r}: {PER_ENGINE} must map engines to seconds")
            for engine, secs in v.items():
                if engine not in ENGINES:
                    raise EnvironmentFileError(f"environment file {str(path)!r}: {PER_ENGINE}.{engine}: not an engine "
                                               f"({', '.join(ENGINES)})")
                if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not 0 <= secs < 10:
                    raise EnvironmentFileError(f"environment file {str(path)!r}: constant '{PER_ENGINE}.{engine}' "
                                               f"must be seconds between 0 and 10, got {secs!r}")
                values[f"{PER_ENGINE}:{engine}"] = float(secs)
        elif name not in known:
            raise EnvironmentFileError(f"environment file {str(path)!r}: constant {name!r} is not known to gpucast "
                                       f"{__version__} (written by {doc.get('gpucast_version', '?')}): calibrate again")
        else:
            values[name] = _positive(path, name, v)
    env = base.with_params(values)
    conformal = []
    for q, spec in (doc.get("intervals") or {}).items():
        try:
            conformal.append((str(q), float(spec["level"]), float(spec["log_halfwidth"]), int(spec["rows"])))
        except (KeyError, TypeError, ValueError):
            raise EnvironmentFileError(f"environment file {str(path)!r}: interval {q!r} needs level, "
                                       f"log_halfwidth and rows") from None
    digest = hashlib.sha256(json.dumps([sorted(values.items()), sorted(conformal), doc.get("base")],
                                       default=str).encode()).hexdigest()[:8]
    label = f"{doc.get('label') or path.stem}@{digest}"
    rows = (doc.get("provenance") or {}).get("rows")
    if isinstance(rows, int) and rows < FEW_ROWS:  # a calibration on few rows says so in model_version
        label += f".{rows}-rows"
    return env.replace(label=label, conformal=tuple(sorted(conformal))), messages


def _positive(path, name, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise EnvironmentFileError(f"environment file {str(path)!r}: constant {name!r} must be a positive number, "
                                   f"got {v!r}")
    return v
