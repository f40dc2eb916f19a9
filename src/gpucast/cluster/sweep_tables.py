"""A sweep's one table (:mod:`gpucast.cluster.sweep`): each row's metrics' change from the ``slot``
baseline run of the same point, the columns that vary, and the table as rich, Markdown and JSON.
``result`` is a :class:`gpucast.cluster.sweep.SweepResult` (named in strings only: that module imports
this one).
"""

from __future__ import annotations

BASELINE = "slot"
GROUP = ("trace", "load", "seed", "error_scale", "gpus")


def with_changes(rows: list[dict]) -> list[dict]:
    """Each row with ``change_vs_slot_pct``: its metrics' change from the ``slot`` run of the same
    point (None when the point has no ``slot`` run)."""
    from gpucast.cluster import metrics

    base = {tuple(r[k] for k in GROUP): r for r in rows if r["policy"] == BASELINE}
    out = []
    for r in rows:
        b = base.get(tuple(r[k] for k in GROUP))
        ch = None
        if b is not None:
            ch = {key: metrics.change_pct(r.get(key), b.get(key)) for key, _ in metrics.COMPARED}
        out.append({**r, f"change_vs_{BASELINE}_pct": ch})
    return out


def varying(result: "SweepResult") -> list[str]:
    """The point columns that take more than one value (the ones worth a column), swept axes in
    the order given."""
    order = list(dict.fromkeys([a.replace("-", "_") for a in result.axes] + list(GROUP) + ["policy"]))
    cols = [c for c in order if len({repr(r[c]) for r in result.rows}) > 1]
    return cols or ["policy"]


def _h(v) -> str:
    return "-" if v is None else f"{v / 3600.0:.2f}"


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _param(v) -> str:
    return "-" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


HEADERS = ("util % busy", f"vs {BASELINE}", "util % all", f"vs {BASELINE}", "makespan h", "JCT mean h",
           "JCT p50 h", "JCT p99 h", "queue mean h", "slowdown", "OOM", "GPU-h", "finished")


def table_rows(result: "SweepResult") -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of the table: the varying parameters, then ``simulate``'s columns."""
    params = varying(result)

    def vs(r, key):
        c = r.get(f"change_vs_{BASELINE}_pct")
        g = None if c is None else c.get(key)
        return "-" if g is None or r["policy"] == BASELINE else f"{g:+.1f}%"

    cells = []
    for r in result.rows:
        cells.append([_param(r[c]) for c in params] + [
            _f(r.get("gpu_util_busy_pct")), vs(r, "gpu_util_busy_pct"), _f(r["gpu_util_pct"]), vs(r, "gpu_util_pct"),
            _h(r["makespan_s"]), _h(r["jct_mean_s"]), _h(r["jct_p50_s"]), _h(r["jct_p99_s"]),
            _h(r["queue_delay_mean_s"]), _f(r["slowdown_mean"], "{:.2f}"), str(r["oom_failures"]),
            _f(r["gpu_hours"], "{:.0f}"), f"{r['jobs_finished']}/{r['jobs']}"])
    return [c.replace("_", " ") for c in params] + list(HEADERS), cells


def rich_table(result: "SweepResult", title: str):
    from rich.table import Table

    headers, cells = table_rows(result)
    n_params = len(headers) - len(HEADERS)
    t = Table(title=title)
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i < n_params else "right")
    for c in cells:
        t.add_row(*c)
    return t


def markdown(result: "SweepResult", title: str) -> str:
    headers, cells = table_rows(result)
    lines = [f"# {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(lines) + "\n"


def to_json(result: "SweepResult") -> dict:
    import json

    return json.loads(json.dumps({"axes": result.axes, "executor": result.executor, "workers": result.workers,
                                  "wall_s": result.wall_s, "rows": result.rows}, default=str))
