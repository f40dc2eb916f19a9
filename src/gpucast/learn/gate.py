"""The accuracy gate's arithmetic: error cells of measured sets, their comparison with a baseline.

A *record* is one measured row predicted by gpucast, a plain dict::

    {"gpu": "h200", "group": "cnn", "time": (pred_s, meas_s), "util": (pred_pct, meas_pct),
     "memory": (pred_bytes, meas_bytes), "fits": True, "speed": (pred, meas)}

with any of the measured quantities absent. ``time`` is any duration (a step, a kernel, a request's
latency; a throughput is given as its reciprocal), ``speed`` a co-located job's throughput over its
solo throughput, ``fits`` whether gpucast predicts that a run which did run fits in its GPU's memory.
:func:`cells` turns a set's records into *cells*, one per (set, GPU, group) and figure:

========================  =================================================================  ==========
figure                    what                                                                worse when
========================  =================================================================  ==========
``time_mdape``            median absolute percentage error of the time, %                     higher
``time_ratio``            median predicted / measured time                                    farther from 1
``util_mae``              mean absolute error of ``utilization.gpu``, points                  higher
``memory_mdape``          median absolute percentage error of peak memory, %                  higher
``memory_under``          share of runs whose memory is predicted below the measured, %       higher
``memory_ratio``          median predicted / measured peak memory                             farther from 1
``memory_cover``          share of runs at or under the memory interval's upper end, %        lower
``no_fit``                share of runs that ran but are predicted not to fit, %              higher
``speed_mae``             mean absolute error of co-located speed                             higher
``*_floor``               the same figure (time MdAPE, util MAE, memory MdAPE, speed MAE)     (a reference)
                          with every row predicted at its cell's median measurement
========================  =================================================================  ==========

The floors do not depend on gpucast: they move only when a set's rows do, and they are the naive
baseline the README's headline table sets beside each figure.

A cell *regresses* when it is worse than the baseline's by more than its figure's noise band
(:data:`BANDS`). Predictions are deterministic, so a band covers what differs between machines
and library releases (float summation order, torch's meta kernels), not run-to-run noise;
``memory_under`` and ``no_fit`` also allow one row flipping. Ratios are compared on
``|log(ratio)|``. A cell that is new (a set or GPU added) or gone is reported, not failed: adding
a set is not a regression, and removing one shows as a change the commit must explain.

Nothing here predicts: ``benchmarks/accuracy_gate.py`` makes the records (``benchmarks/gate_sets.py``),
stores the baseline (``benchmarks/results/accuracy_gate.json``) and renders its table.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# figure -> (noise band, better when 'lower' | 'higher' | nearer 1 on a log scale ('log1'), label with unit)
FIGURES: dict[str, tuple[float, str, str]] = {
    "time_mdape": (0.5, "lower", "time MdAPE %"),
    "time_ratio": (0.01, "log1", "time pred/meas"),
    "util_mae": (0.3, "lower", "util MAE pts"),
    "memory_mdape": (0.5, "lower", "memory MdAPE %"),
    "memory_under": (0.0, "lower", "memory under %"),
    "memory_ratio": (0.01, "log1", "memory pred/meas"),
    "memory_cover": (0.0, "higher", "memory under interval top %"),
    "no_fit": (0.0, "lower", "ran, predicted not to fit %"),
    "answered": (0.0, "higher", "answered %"),
    "speed_mae": (0.003, "lower", "co-located speed MAE"),
    "time_floor": (0.5, "lower", "floor time MdAPE %"),
    "util_floor": (0.3, "lower", "floor util MAE pts"),
    "memory_floor": (0.5, "lower", "floor memory MdAPE %"),
    "speed_floor": (0.003, "lower", "floor speed MAE"),
}
BANDS = {k: v[0] for k, v in FIGURES.items()}
# Share figures (per cent of rows) also allow one row to flip: their band is max(band, 100 / rows).
SHARE_FIGURES = frozenset({"memory_under", "memory_cover", "no_fit", "answered"})


def _pairs(records: list[dict], key: str) -> list[tuple[float, float]]:
    out = []
    for r in records:
        v = r.get(key)
        if v is None:
            continue
        p, m = float(v[0]), float(v[1])
        if math.isfinite(p) and math.isfinite(m) and (key in ("util", "speed") or (p > 0 and m > 0)):
            out.append((p, m))
    return out


def figures(records: list[dict]) -> dict[str, dict]:
    """Every figure the records support: {figure: {"value": v, "n": rows}}."""
    out: dict[str, dict] = {}
    t = _pairs(records, "time")
    if t:
        out["time_mdape"] = {"value": 100 * statistics.median(abs(p / m - 1) for p, m in t), "n": len(t)}
        out["time_ratio"] = {"value": statistics.median(p / m for p, m in t), "n": len(t)}
        out["time_floor"] = {"value": 100 * statistics.median(abs(p / m - 1) for p, m in _floor(t)), "n": len(t)}
    u = _pairs(records, "util")
    if u:
        out["util_mae"] = {"value": statistics.mean(abs(p - m) for p, m in u), "n": len(u)}
        out["util_floor"] = {"value": statistics.mean(abs(p - m) for p, m in _floor(u)), "n": len(u)}
    mem = _pairs(records, "memory")
    if mem:
        out["memory_mdape"] = {"value": 100 * statistics.median(abs(p / m - 1) for p, m in mem), "n": len(mem)}
        out["memory_floor"] = {"value": 100 * statistics.median(abs(p / m - 1) for p, m in _floor(mem)),
                               "n": len(mem)}
        out["memory_under"] = {"value": 100 * sum(p < m for p, m in mem) / len(mem), "n": len(mem)}
        out["memory_ratio"] = {"value": statistics.median(p / m for p, m in mem), "n": len(mem)}
    cover = [(r["memory_hi"], r["memory"][1]) for r in records if r.get("memory_hi") and r.get("memory")]
    if cover:
        out["memory_cover"] = {"value": 100 * sum(m <= hi for hi, m in cover) / len(cover), "n": len(cover)}
    fits = [bool(r["fits"]) for r in records if r.get("fits") is not None]
    if fits:
        out["no_fit"] = {"value": 100 * sum(not f for f in fits) / len(fits), "n": len(fits)}
    asked = [bool(r["answered"]) for r in records if r.get("answered") is not None]
    if asked:  # a set with rows gpucast cannot express yet (they carry no other figure)
        out["answered"] = {"value": 100 * sum(asked) / len(asked), "n": len(asked)}
    s = _pairs(records, "speed")
    if s:
        out["speed_mae"] = {"value": statistics.mean(abs(p - m) for p, m in s), "n": len(s)}
        out["speed_floor"] = {"value": statistics.mean(abs(p - m) for p, m in _floor(s)), "n": len(s)}
    return out


def _floor(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The pairs with every prediction replaced by the median measurement (the naive baseline)."""
    mid = statistics.median(m for _, m in pairs)
    return [(mid, m) for _, m in pairs]


def cells(set_name: str, records: list[dict], groups: bool = True) -> dict[str, dict]:
    """A set's cells keyed ``set/gpu/group`` (``all`` for the whole GPU) -> figures."""
    out: dict[str, dict] = {}
    by_gpu: dict[str, list[dict]] = {}
    for r in records:
        by_gpu.setdefault(r["gpu"], []).append(r)
    for gpu, rs in sorted(by_gpu.items()):
        out[f"{set_name}/{gpu}/all"] = figures(rs)
        if not groups:
            continue
        by_group: dict[str, list[dict]] = {}
        for r in rs:
            if r.get("group"):
                by_group.setdefault(str(r["group"]), []).append(r)
        if len(by_group) > 1:
            for g, grs in sorted(by_group.items()):
                out[f"{set_name}/{gpu}/{g}"] = figures(grs)
    return out


def _badness(figure: str, value: float) -> float:
    kind = FIGURES[figure][1]
    if kind == "log1" and value > 0:
        return abs(math.log(value))
    return -value if kind == "higher" else value


def band(figure: str, n: int) -> float:
    b = BANDS[figure]
    return max(b, 100.0 / n) if figure in SHARE_FIGURES and n else b


@dataclass(frozen=True)
class Change:
    cell: str
    figure: str
    before: float | None
    after: float | None
    n: int
    kind: str            # 'worse' (beyond the band), 'better' (beyond the band), 'new', 'gone'

    def line(self) -> str:
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        return f"{self.cell} {self.figure}: {fmt(self.before)} -> {fmt(self.after)} ({self.kind}, {self.n} rows)"


def compare(baseline: dict[str, dict], current: dict[str, dict]) -> list[Change]:
    """Every cell figure that moved beyond its band, or appeared, or went, between two cell tables."""
    out = []
    for cell in sorted(set(baseline) | set(current)):
        b, c = baseline.get(cell, {}), current.get(cell, {})
        for fig in FIGURES:
            if fig not in b and fig not in c:
                continue
            if fig not in c:
                out.append(Change(cell, fig, b[fig]["value"], None, b[fig]["n"], "gone"))
                continue
            if fig not in b:
                out.append(Change(cell, fig, None, c[fig]["value"], c[fig]["n"], "new"))
                continue
            before, after = _badness(fig, b[fig]["value"]), _badness(fig, c[fig]["value"])
            tol = band(fig, c[fig]["n"])
            if after > before + tol + 1e-12:
                out.append(Change(cell, fig, b[fig]["value"], c[fig]["value"], c[fig]["n"], "worse"))
            elif after < before - tol - 1e-12:
                out.append(Change(cell, fig, b[fig]["value"], c[fig]["value"], c[fig]["n"], "better"))
    return out


def regressions(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.kind == "worse"]


def _fmt(fig: str, v: dict | None) -> str:
    if v is None:
        return ""
    x = v["value"]
    if fig.endswith("_ratio"):
        return f"{x:.2f}"
    if fig == "speed_mae":
        return f"{x:.3f}"
    return f"{x:.1f}"


def _row_order(key: str) -> tuple:
    s, gpu, group = key.split("/", 2)
    return (s, gpu, group != "all", group.lower())


def table(cells_: dict[str, dict], only_all: bool = False) -> str:
    """The cells as one Markdown table: a row per (set, GPU, group), a column per figure."""
    rows = sorted((k for k in cells_ if not only_all or k.endswith("/all")), key=_row_order)
    figs = [f for f in FIGURES if any(f in cells_[k] for k in rows)]
    head = "| set | GPU | group | rows | " + " | ".join(FIGURES[f][2] for f in figs) + " |"
    lines = [head, "| --- | --- | --- | ---: | " + " | ".join("---:" for _ in figs) + " |"]
    for k in rows:
        s, gpu, group = k.split("/", 2)
        n = max((v["n"] for v in cells_[k].values()), default=0)
        lines.append(f"| {s} | {gpu} | {group} | {n} | " + " | ".join(_fmt(f, cells_[k].get(f)) for f in figs) + " |")
    return "\n".join(lines)
