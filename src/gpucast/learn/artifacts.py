"""Environment files: a calibrated Environment as small, human-readable YAML with its provenance.

The file's layout (``format: 1``), constants, reader and writer (:data:`FORMAT`,
:func:`load_environment`, :func:`save_environment`) are in
:mod:`gpucast.estimate.environment_file`, below the predictor;
this module makes the document of a calibration (:func:`document`), reads and writes learned
models, and re-exports those names.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

from gpucast.version import __version__
from gpucast.estimate.environment import PER_ENGINE, PER_GPU, Environment
# The environment file's format, reader and writer live below the predictor (probe-host and --env
# use them too); re-exported here, where calibrate's documents are made.
from gpucast.estimate.environment_file import FEW_ROWS, FORMAT, _plain
from gpucast.estimate.environment_file import EnvironmentFileError, load_environment, save_environment  # noqa: F401


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def document(cal, label: str, files: list[str | Path], serving=None, serving_rows: list | None = None,
             base: Environment | None = None) -> dict:
    """The YAML document of a :class:`~gpucast.learn.calibrate.Calibration` (``None`` when the rows held
    no training runs) and of a serving fit (:class:`~gpucast.learn.serving_fit.ServingFit` on
    ``serving_rows``; ``None`` without serving rows)."""
    values: dict = {}
    for name in (cal.params if cal is not None else ()):
        if name.startswith(PER_GPU + ":"):
            values.setdefault(PER_GPU, {})[name.split(":", 1)[1]] = _num(cal.env.param(name))
        else:
            values[name] = _num(cal.env.param(name))
    serving_rows = serving_rows or []
    if serving is not None and serving.engines:
        values[PER_ENGINE] = {e: _num(v) for e, v in serving.values().items()}
    fit = {}
    if cal is not None:
        fit = {"params": list(cal.params), "prior_weight": cal.info.get("prior_weight"), "before": cal.before,
               "after": cal.after, "cross_validated": cal.cross_validated, "cv_unit": cal.cv_unit}
    if serving is not None:
        fit["serving"] = serving.summary()
    measured = dict(cal.measured) if cal is not None else {}
    if serving_rows:
        measured["serving"] = len(serving_rows)
    return {
        "gpucast_environment": FORMAT,
        "gpucast_version": __version__,
        "label": label,
        "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "base": _base_name(cal.base if cal is not None else base or Environment.default()),
        "provenance": {"rows": (cal.rows if cal is not None else 0) + len(serving_rows),
                       "files": [{"path": str(p), "sha256": file_digest(p)} for p in files if Path(p).is_file()],
                       "groups": sorted(set(cal.groups if cal is not None else []) | {r.group for r in serving_rows}),
                       "gpus": sorted(set(cal.gpus if cal is not None else []) | {r.gpu for r in serving_rows}),
                       "measured": measured},
        "fit": _rounded(fit),
        "constants": values,
        "intervals": ({c[0]: {"level": c[1], "log_halfwidth": _num(c[2]), "rows": c[3]} for c in cal.env.conformal}
                      if cal is not None else {}),
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
