"""How wrong gpucast's predictions are in the simulator: one log-normal error per quantity.

The simulated truth of a job is gpucast's prediction times ``exp(sigma * z)``, ``z ~ N(0, 1)``
(:mod:`gpucast.cluster.truth`), with one ``sigma`` per quantity (utilization, peak memory, step
time). By default ``sigma`` is gpucast's **measured** error (:func:`measured`): the root mean
square of ``log(predicted / measured)`` on measured runs that the constants never saw, written by
``benchmarks/measured_error.py`` into ``gpucast/data/measured_error.json`` with its provenance.
A calibrated environment (``--env``) that carries split-conformal intervals brings its own
held-out error instead (:func:`from_environment`: an 80 % half-width in log space is 1.2816
sigma of a normal). A number (``--error-sigma 0.2``) sets all three; ``util=0.3,memory=0.1,step=0.5``
sets each; :meth:`ErrorModel.scaled` multiplies them (the benchmarks' error sweep).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

QUANTITIES = ("util", "memory", "step")
# z of a two-sided 80 % normal interval (the conformal level gpucast calibrate writes).
Z80 = 1.2816
_CONFORMAL = {"util_pct": "util", "memory_mib": "memory", "step_time_s": "step"}


@dataclass(frozen=True)
class ErrorModel:
    util: float
    memory: float
    step: float
    source: str = "given"

    def sigma(self, what: str) -> float:
        return getattr(self, what)

    def scaled(self, factor: float) -> "ErrorModel":
        return ErrorModel(self.util * factor, self.memory * factor, self.step * factor,
                          f"{self.source} x {factor:g}")

    @property
    def is_zero(self) -> bool:
        return self.util == 0 and self.memory == 0 and self.step == 0

    def label(self) -> str:
        return f"util {self.util:.3g}, memory {self.memory:.3g}, step {self.step:.3g} ({self.source})"

    def as_dict(self) -> dict:
        return {"util": self.util, "memory": self.memory, "step": self.step, "source": self.source}


def measured_path() -> Path:
    return Path(str(resources.files("gpucast") / "data" / "measured_error.json"))


def measured() -> ErrorModel:
    """gpucast's measured error per quantity (see the module docstring)."""
    d = json.loads(measured_path().read_text(encoding="utf-8"))
    s = d["sigma"]
    p = d.get("provenance", {})
    return ErrorModel(float(s["util"]), float(s["memory"]), float(s["step"]),
                      f"measured ({p.get('command', 'benchmarks/measured_error.py')}, {p.get('date', '?')})")


def from_environment(env) -> ErrorModel:
    """The held-out error a calibrated environment carries (its conformal half-widths), with the
    measured error for any quantity it has none for."""
    base = measured()
    vals = base.as_dict()
    got = []
    for q, _level, h, _n in (getattr(env, "conformal", ()) or ()):
        if q in _CONFORMAL:
            vals[_CONFORMAL[q]] = float(h) / Z80
            got.append(_CONFORMAL[q])
    if not got:
        return base
    return ErrorModel(vals["util"], vals["memory"], vals["step"],
                      f"environment {getattr(env, 'label', '?')} conformal ({', '.join(got)}), else measured")


def parse(text) -> ErrorModel:
    """``"measured"``, a number, or ``"util=0.3,memory=0.1,step=0.5"`` (missing ones: measured);
    an ErrorModel as is. Raises ValueError with one line."""
    if isinstance(text, ErrorModel):
        return text
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        v = float(text)
        if not v >= 0:
            raise ValueError(f"--error-sigma must be >= 0, got {text}")
        return ErrorModel(v, v, v, f"given: {v:g}")
    s = str(text).strip().lower()
    if s in ("", "measured"):
        return measured()
    try:
        return parse(float(s))
    except ValueError as e:
        if "must be" in str(e):
            raise
    vals = measured().as_dict()
    for part in s.split(","):
        k, sep, v = part.partition("=")
        k = k.strip()
        if not sep or k not in QUANTITIES:
            raise ValueError(f"--error-sigma {text!r}: expected 'measured', a number, or "
                             f"util=S,memory=S,step=S")
        try:
            x = float(v)
        except ValueError:
            raise ValueError(f"--error-sigma {text!r}: {k}={v.strip()!r} is not a number") from None
        if not x >= 0:
            raise ValueError(f"--error-sigma {text!r}: {k} must be >= 0")
        vals[k] = x
    return ErrorModel(vals["util"], vals["memory"], vals["step"], f"given: {s}")
