"""A self-contained HTML report of one or more simulation runs (one per policy).

:func:`render` returns the page; :func:`write_report` writes it atomically (a temporary file in
the target's directory, then ``os.replace``). The page holds:

* the summary table (:func:`gpucast.cluster.metrics.summarize` of each run; utilization over
  the busy period first, then over the whole run) and each policy's change from the baseline
  (``slot`` when it was run);
* cluster GPU utilization over time per policy, averaged over at most ``max_points`` equal time
  bins (:func:`gpucast.cluster.metrics.binned_util`: exact bin means, so a 100,000-job run stays
  a few hundred kB of data);
* the JCT distribution (CDF, log time axis) and the queueing-delay distribution (CDF) per
  policy, each drawn from at most ``max_points`` quantiles;
* an "assumptions" paragraph: the trace, the cluster, seed, error sigma, checkpoint interval
  and every other parameter the runs recorded in ``SimResult.params``.

plotly.js is inlined once (``include_plotlyjs=True`` on the first figure), so the file opens
with no network: it references no external script.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence

import numpy as np

from gpucast.cluster import metrics
from gpucast.fileio import atomic_write_text  # noqa: F401 - re-exported: the report's writer, imported from here too

MAX_POINTS = 5000

# Parameters named in the assumptions paragraph first, with a label; the rest follow as key=value.
_KNOWN_PARAMS = (
    ("trace", "trace"),
    ("n_jobs", "jobs"),
    ("seed", "seed"),
    ("error_sigma", "prediction error sigma"),
    ("colocation", "co-location world"),
    ("checkpoint_s", "checkpoint interval (s)"),
    ("oom_after_s", "OOM detected after (s)"),
    ("max_oom_failures", "abandoned after OOM failures"),
)
# Parameters that differ by policy by design, or are lists: shown apart, not merged.
_POLICY_PARAMS = "policy_params"
_NOTES = "trace_notes"

# Summary table: (key, header, format)
_COLUMNS = (
    ("policy", "policy", "{}"),
    ("gpu_util_busy_pct", "GPU util % (busy)", "{:.1f}"),
    ("gpu_util_pct", "GPU util % (all time)", "{:.1f}"),
    ("makespan_s", "makespan h", "h"),
    ("jct_mean_s", "JCT mean h", "h"),
    ("jct_p50_s", "JCT p50 h", "h"),
    ("jct_p95_s", "JCT p95 h", "h"),
    ("jct_p99_s", "JCT p99 h", "h"),
    ("queue_delay_mean_s", "queue mean h", "h"),
    ("queue_delay_p95_s", "queue p95 h", "h"),
    ("slowdown_mean", "slowdown mean", "{:.2f}"),
    ("oom_failures", "OOM failures", "{}"),
    ("gpu_hours", "GPU-hours", "{:.0f}"),
    ("jobs_finished", "finished", "{}"),
    ("jobs_unfinished", "unfinished", "{}"),
)


def fmt(value, spec: str) -> str:
    """One table cell: ``-`` for a missing value; ``h``: seconds shown as hours (2 decimals)."""
    if value is None:
        return "-"
    if spec == "h":
        return f"{value / 3600.0:.2f}"
    return spec.format(value)


def cdf_points(values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """(sorted values, cumulative fraction) of ``values``; with more than ``max_points`` values,
    the quantiles at ``max_points`` evenly spaced probabilities instead (exact points of the
    same curve)."""
    v = np.sort(np.asarray(values, dtype=float))
    n = v.size
    if n == 0:
        return [], []
    if n <= max_points:
        return v.tolist(), (np.arange(1, n + 1) / n).tolist()
    p = np.linspace(1.0 / n, 1.0, max_points)
    return np.quantile(v, p, method="inverted_cdf").tolist(), p.tolist()


def util_points(timeline, end_s: float, max_points: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """The utilization step function to plot: its own points (clipped to ``[0, end_s]``, with the
    last value repeated at ``end_s``) when it has at most ``max_points``; otherwise the means of
    ``max_points`` equal time bins."""
    pts = [(t, u) for t, u in sorted(timeline, key=lambda p: p[0]) if t <= end_s]
    if len(pts) + 1 > max_points:
        return metrics.binned_util(timeline, end_s, max_points)
    if not pts:
        return [], []
    ts, us = [max(t, 0.0) for t, _ in pts], [u for _, u in pts]
    if ts[-1] < end_s:
        ts.append(end_s)
        us.append(us[-1])
    return ts, us


# What each co-location world was fitted on (gpucast.cluster.timeshare.WORLDS).
WORLD_SOURCES = {
    "measured-pairs": "jobs sharing a GPU slow each other as the co-location model fitted on 335 measured pairs of "
                      "real training scripts on an RTX 3090 says (Lucid's artifact; benchmarks/colocation_current.py: "
                      "held-out-family speed error 0.06, a constant's 0.11)",
    "data-center": "the measured-pairs model with exclusive time slices, as gpucast predicts a data-center GPU: "
                   "jobs sharing a GPU together do at most one GPU of work (Constants.exclusive; our H200's "
                   "pairs: speed error 0.13, a constant's 0.14; gpucast's policies predict with it too)",
    "gavel": "jobs sharing a GPU slow each other as the co-location model fitted on Gavel's measured pairs on "
             "K80/P100/V100 says (benchmarks/colocation.py; a sensitivity run: on job families it never saw it "
             "errs more than a constant)",
}


def world_line(results) -> str:
    """The co-location world of the runs and what it was fitted on."""
    names = sorted({(r.params or {}).get("colocation", "measured-pairs") for r in results})
    return "Co-location world: " + "; ".join(f"{n}: {WORLD_SOURCES.get(n, 'custom constants')}" for n in names) +         ". Gavel's own measured pair slowdowns are used where two Gavel job types share a K80/P100/V100."


def assumptions(results: Sequence) -> str:
    """The assumptions paragraph, as plain text: the cluster, the runs' shared parameters (a
    parameter that differs between runs lists each value) and the trace's notes."""
    first = results[0]
    gpu_types = ", ".join(f"{n} x {t}" for t, n in first.gpu_types.items())
    merged: dict = {}
    notes: list[str] = []
    for r in results:
        for k, v in (r.params or {}).items():
            if k == _POLICY_PARAMS:
                continue
            if k == _NOTES:
                notes += [str(n) for n in (v or []) if str(n) not in notes]
                continue
            merged.setdefault(k, set()).add(repr(v) if isinstance(v, (dict, list, set)) else v)
    parts = [f"cluster: {first.n_gpus} GPUs ({gpu_types})"]
    shown = set()
    for key, label in _KNOWN_PARAMS:
        if key in merged:
            parts.append(f"{label}: {_values(merged[key])}")
            shown.add(key)
    rest = [f"{k}={_values(v)}" for k, v in sorted(merged.items()) if k not in shown]
    if rest:
        parts.append("other parameters: " + ", ".join(rest))
    if notes:
        parts.append("trace notes: " + "; ".join(notes))
    return "; ".join(parts) + "."


def policy_parameters(results: Sequence) -> list[tuple[str, str]]:
    """(policy, "k=v, ...") for each run that recorded its policy's parameters."""
    out = []
    for r in results:
        pp = (r.params or {}).get(_POLICY_PARAMS)
        if isinstance(pp, dict) and pp:
            out.append((r.policy, ", ".join(f"{k}={v}" for k, v in sorted(pp.items()))))
    return out


def _values(vs: set) -> str:
    vals = sorted(vs, key=str)
    return str(vals[0]) if len(vals) == 1 else " / ".join(str(v) for v in vals)


def _table(summaries: Sequence[dict]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in _COLUMNS)
    rows = []
    for s in summaries:
        cells = "".join(f"<td>{html.escape(fmt(s.get(k), spec))}</td>" for k, _, spec in _COLUMNS)
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _round(values, digits: int = 6) -> list[float]:
    """Six significant digits: plenty for a plot, and a third of the bytes of a full float."""
    return [float(f"{v:.{digits}g}") for v in values]


def _figures(results: Sequence, max_points: int):
    import plotly.graph_objects as go

    util = go.Figure()
    jct = go.Figure()
    wait = go.Figure()
    for r in results:
        t, u = util_points(r.util_timeline, r.end_s, max_points)
        util.add_trace(go.Scatter(x=_round(np.asarray(t) / 3600.0), y=_round(u), mode="lines", line_shape="hv",
                                  name=r.policy))
        arrays = metrics.job_arrays(r.records)
        for fig, key in ((jct, "jct"), (wait, "queue_delay")):
            x, y = cdf_points(arrays[key] / 3600.0, max_points)
            fig.add_trace(go.Scatter(x=_round(x), y=_round(y), mode="lines", name=r.policy))
    util.update_layout(title="Cluster GPU utilization over time", xaxis_title="time (h)",
                       yaxis_title="GPU utilization %", yaxis_range=[0, 100])
    jct.update_layout(title="Job completion time (finished jobs), CDF", xaxis_title="JCT (h, log scale)",
                      xaxis_type="log", yaxis_title="fraction of jobs")
    wait.update_layout(title="Queueing delay (started jobs), CDF", xaxis_title="queueing delay (h)",
                       yaxis_title="fraction of jobs")
    return util, jct, wait


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
p.note { color: #444; }
"""


def render(results: Sequence, *, title: str = "gpucast simulate", baseline: str = "slot",
           max_points: int = MAX_POINTS) -> str:
    """The whole HTML page for ``results`` (``SimResult``s, one per policy)."""
    if not results:
        raise ValueError("no simulation results to report")
    summaries = [metrics.summarize(r) for r in results]
    changes = metrics.compare(summaries, baseline=baseline)
    change_items = "".join(f"<li>{html.escape(c['policy'])}: {html.escape(metrics.change_line(c))}</li>"
                           for c in changes if c["policy"] != baseline)
    figs = _figures(results, max_points)
    plots = []
    for i, fig in enumerate(figs):
        plots.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), include_mathjax=False,
                                 config={"displaylogo": False}))
    jobs = summaries[0]["jobs"]
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>{jobs} jobs, {len(results)} policies. Times in hours of simulated time. GPU util % (busy): "
        "time-weighted mean cluster utilization while at least one job is queued or running (from the "
        "first arrival to the last finish, idle stretches with no job left out); GPU util % (all time): "
        "the same from time 0 to the last finish; JCT: finish - arrival "
        "(finished jobs); queueing delay: first start - arrival (started jobs); slowdown: JCT / the job's "
        "run time alone on its GPU type; GPU-hours: GPU time held by jobs (a GPU shared by k jobs counts "
        "k times).</p>"
        f"{_table(summaries)}"
        + (f"<h2>Change from {html.escape(baseline)}</h2><ul>{change_items}</ul>" if change_items else "")
        + "<h2>Assumptions</h2>"
        f"<p class=\"note\">{html.escape(assumptions(results))} Policies see predictions (with the error "
        "model above), never the true behaviour, except the oracle and the profiling policy (which pays for "
        "its measurement). The numbers come from a simulation, not from a real cluster.</p>"
        f"<p class=\"note\">{html.escape(world_line(results))}</p>"
        + (("<p class=\"note\">Policy parameters:</p><ul>"
            + "".join(f"<li>{html.escape(p)}: {html.escape(v)}</li>" for p, v in policy_parameters(results))
            + "</ul>") if policy_parameters(results) else "")
        + "".join(f"<div>{p}</div>" for p in plots)
        + "</body></html>\n"
    )


def write_report(path, results: Sequence, **kwargs) -> Path:
    """Render and write the report atomically; returns the path."""
    page = render(results, **kwargs)
    return atomic_write_text(path, page)
