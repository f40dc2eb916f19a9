"""How the advice writes durations and money: one unit per magnitude, enough digits to compare."""

from __future__ import annotations

import math

_UNITS = ((86400 * 2, 86400, "d"), (3600, 3600, "h"), (60, 60, "min"), (0, 1, "s"))


def _unit(seconds: float) -> tuple[float, str]:
    return next((div, name) for lo, div, name in _UNITS if seconds >= lo)


def duration(seconds: float) -> str:
    """``4.0 s``, ``12.5 min``, ``14.9 h``, ``3.2 d``."""
    div, name = _unit(seconds)
    return f"{seconds / div:.3g} {name}" if seconds / div < 100 else f"{seconds / div:,.0f} {name}"


def duration_range(lo: float, hi: float) -> str:
    """Both ends in the unit of the upper end: ``2.4-6.9 s``."""
    div, name = _unit(hi)
    return f"{lo / div:.3g}-{hi / div:.3g} {name}"


def usd(v: float) -> str:
    """``$1,234.50``; below a dollar two significant digits in fixed point (``$0.0042``)."""
    if v >= 1 or v == 0:
        return f"${v:,.2f}"
    decimals = max(2, 1 - math.floor(math.log10(v)))
    return f"${v:.{decimals}f}"
