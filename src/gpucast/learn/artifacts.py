"""Environment files: a calibrated Environment as small, human-readable YAML with its provenance.

Layout (``format: 1``)::

    gpucast_environment: 1          # the format; a newer one is refused
    gpucast_version: 0.1.0          # the gpucast that wrote it
    label: my-cluster
    created: 2026-12-01T14:00:00+00:00
    base: default                   # the constants the fit started from: default | priors
    provenance: {rows: 5, files: [{path, sha256}], groups: [...], gpus: [...], measured: {...}}
    fit: {params: [...], prior_weight: 4.0, before: {...}, after: {...}, cross_validated: {...}, cv_unit: group}
    constants: {item_s: 3.1e-05, gpu_kernel_factors: {a100-40gb: 1.12}, ...}   # the fitted ones
    intervals: {util_pct: {level: 0.8, log_halfwidth: 0.05, rows: 5}, ...}

:func:`load_environment` lays ``constants`` over the base and returns the Environment with
``label = <label>@<digest>`` (the digest covers constants and intervals, so two files that
predict differently never share a model version), and ``.<N>-rows`` after it when the fit saw
fewer than :data:`FEW_ROWS` rows. Format 0 is a flat ``name: value`` constants
file (``--constants`` style): it is migrated with a message. A file from another gpucast version
of the same format is read with a message; one naming a constant this version does not know is
refused, naming it. Writes are atomic.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

from gpucast.version import __version__
from gpucast.estimate.environment import PER_GPU, Environment

FORMAT = 1
# Below this many rows a calibration or a learned model says so in every model_version it makes.
FEW_ROWS = 300


class EnvironmentFileError(ValueError):
    """An environment file cannot be read; one line naming the file and the cause."""


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def document(cal, label: str, files: list[str | Path]) -> dict:
    """The YAML document of a :class:`~gpucast.learn.calibrate.Calibration`."""
    values = {}
    for name in cal.params:
        if name.startswith(PER_GPU + ":"):
            values.setdefault(PER_GPU, {})[name.split(":", 1)[1]] = _num(cal.env.param(name))
        else:
            values[name] = _num(cal.env.param(name))
    return {
        "gpucast_environment": FORMAT,
        "gpucast_version": __version__,
        "label": label,
        "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "base": _base_name(cal.base),
        "provenance": {"rows": cal.rows, "files": [{"path": str(p), "sha256": file_digest(p)} for p in files
                                                   if Path(p).is_file()],
                       "groups": list(cal.groups), "gpus": list(cal.gpus), "measured": dict(cal.measured)},
        "fit": _rounded({"params": list(cal.params), "prior_weight": cal.info.get("prior_weight"),
                         "before": cal.before, "after": cal.after,
                         "cross_validated": cal.cross_validated, "cv_unit": cal.cv_unit}),
        "constants": values,
        "intervals": {c[0]: {"level": c[1], "log_halfwidth": _num(c[2]), "rows": c[3]} for c in cal.env.conformal},
    }


def _base_name(base: Environment) -> str:
    """What a loader can rebuild the base from: the priors or the default constants."""
    for name, env in (("default", Environment.default()), ("priors", Environment.priors())):
        if base == env:
            return name
    raise ValueError("an environment file can only start from the default constants or the priors")


def _rounded(obj):
    """Floats to 4 significant digits (error summaries are for reading)."""
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    if isinstance(obj, float):
        return obj if obj != obj else float(f"{obj:.4g}")
    return obj


def _num(v):
    """Full precision: the file must predict exactly as the calibrated environment did."""
    return int(v) if isinstance(v, int) else float(v)


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


# ------------------------------------------------------------------------------ learned models

MODEL_FORMAT = 1


class ModelFileError(ValueError):
    """A learned-model file cannot be read; one line naming the file and the cause."""


def save_model(path: str | Path, model, meta: dict) -> None:
    """A trained :class:`~gpucast.learn.models.HybridResidual` as JSON: its trees (LightGBM's text
    format), the quantity, the features, the rows and groups it saw and its held-out scores."""
    doc = {"gpucast_model": MODEL_FORMAT, "kind": "hybrid", "gpucast_version": __version__,
           "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
           "quantity": model.quantity, "rows": model.rows, **_plain(meta),
           "booster": model.booster.model_to_string()}
    from gpucast.fileio import atomic_write_text

    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")


def load_model(path: str | Path):
    """``(HybridResidual, meta)`` from :func:`save_model`'s file (lightgbm is imported here)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"model file {str(path)!r} is not gpucast model JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("gpucast_model") != MODEL_FORMAT or doc.get("kind") != "hybrid":
        raise ModelFileError(f"model file {str(path)!r} is not a format-{MODEL_FORMAT} gpucast hybrid model "
                             f"(written by gpucast {doc.get('gpucast_version', '?') if isinstance(doc, dict) else '?'})")
    from gpucast.learn.features import PHYSICS_NAMES, REFERENCE_NAMES

    if doc.get("features") != list(PHYSICS_NAMES + REFERENCE_NAMES):
        raise ModelFileError(f"model file {str(path)!r} was trained on other features (gpucast "
                             f"{doc.get('gpucast_version', '?')}): train it again with gpucast learn fit")
    import lightgbm as lgb

    from gpucast.learn.models import HybridResidual

    m = HybridResidual(doc["quantity"])
    m.booster = lgb.Booster(model_str=doc["booster"])
    m.rows = int(doc["rows"])
    meta = {k: v for k, v in doc.items() if k != "booster"}
    digest = hashlib.sha256(doc["booster"].encode()).hexdigest()[:8]
    few = f", {m.rows} rows: fewer than {FEW_ROWS}" if m.rows < FEW_ROWS else f", {m.rows} rows"
    meta["version"] = f"hybrid-{doc['quantity']}@{digest}{few}"
    return m, meta
