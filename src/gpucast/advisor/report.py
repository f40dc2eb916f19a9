"""The advice as one HTML page that opens offline: the options' time against cost, the front, the pick.

A plotly scatter (plotly.js inlined, as the simulator's report does): every option that fits as a
point (hours per epoch, USD per epoch), error bars from the step-time interval, the Pareto front
as a line, the recommended option marked, options that only fit below the memory interval's upper
end hollow; then the front as a table, the message, the notes and the price table's provenance.
"""

from __future__ import annotations

import html
from pathlib import Path

from gpucast.advisor.options import NO, RISKY
from gpucast.advisor.units import duration, duration_range, usd

_STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}"
          "td:first-child{text-align:left}.note{color:#555;font-size:90%}")


def _figure(advice):
    import plotly.graph_objects as go

    fig = go.Figure()
    groups: dict[str, list[int]] = {}
    for i, o in enumerate(advice.options):
        if o.memory_fit != NO:
            groups.setdefault(o.gpu, []).append(i)
    for gpu, idx in groups.items():
        opts = [advice.options[i] for i in idx]
        x = [o.epoch_s / 3600 for o in opts]
        y = [o.cost_per_epoch for o in opts]
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name=gpu, text=[o.id for o in opts], hovertemplate="%{text}<br>%{x:.3g} h, $%{y:.3g}",
            marker=dict(size=8, symbol=["circle-open" if o.memory_fit == RISKY else "circle" for o in opts]),
            error_x=dict(type="data", symmetric=False, array=[o.epoch_interval_s[1] / 3600 - v for o, v in zip(opts, x)],
                         arrayminus=[v - o.epoch_interval_s[0] / 3600 for o, v in zip(opts, x)], thickness=0.8),
            error_y=dict(type="data", symmetric=False, array=[o.cost_per_epoch_interval[1] - v for o, v in zip(opts, y)],
                         arrayminus=[v - o.cost_per_epoch_interval[0] for o, v in zip(opts, y)], thickness=0.8)))
    front = advice.front_options
    fig.add_trace(go.Scatter(x=[o.epoch_s / 3600 for o in front], y=[o.cost_per_epoch for o in front],
                             mode="lines", name="Pareto front", line=dict(color="black", dash="dot"), hoverinfo="skip"))
    best = advice.best
    if best is not None:
        fig.add_trace(go.Scatter(x=[best.epoch_s / 3600], y=[best.cost_per_epoch], mode="markers", name="recommended",
                                 text=[best.id], hovertemplate="%{text}",
                                 marker=dict(size=18, symbol="star", color="gold", line=dict(color="black", width=1))))
    if advice.deadline_s is not None:
        fig.add_vline(x=advice.deadline_s / advice.epochs / 3600, line_dash="dash", line_color="red",
                      annotation_text="deadline (per epoch)")
    if advice.budget_usd is not None:
        fig.add_hline(y=advice.budget_usd / advice.epochs, line_dash="dash", line_color="red",
                      annotation_text="budget (per epoch)")
    fig.update_layout(title="Time against cost per epoch (bars: the step-time interval)", xaxis_title="hours per epoch",
                      yaxis_title=f"{advice.prices.currency} per epoch", xaxis_type="log", yaxis_type="log",
                      height=560)
    return fig


def _row(o, best: bool) -> str:
    cells = [("&#9733; " if best else "") + html.escape(o.id), f"{o.step_time_s * 1e3:.1f}", f"{o.samples_per_s:,.0f}",
             f"{duration(o.epoch_s)} ({duration_range(*o.epoch_interval_s)})",
             f"{usd(o.cost_per_epoch)} ({usd(o.cost_per_epoch_interval[0])}-{usd(o.cost_per_epoch_interval[1])})",
             usd(o.cost_per_run), f"{o.util_pct:.0f}", f"{o.memory_bytes / 2**30:.1f}", o.memory_fit]
    if o.plan is not None:  # a parallel plan: its nodes, throughput per GPU and MFU
        cells[1:1] = [str(o.plan.nodes), f"{o.plan.tokens_per_s_per_gpu:,.0f}", f"{o.plan.mfu * 100:.0f}"]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def render(advice, title: str = "gpucast advise") -> str:
    fig = _figure(advice).to_html(full_html=False, include_plotlyjs=True, include_mathjax=False,
                                  config={"displaylogo": False})
    head = ("option", "step ms", "samples/s", "epoch (range)", "$/epoch (range)", "$/run", "util %", "GiB/GPU", "memory")
    if getattr(advice, "plans", False):  # step ms: one optimizer step
        head = head[:1] + ("nodes", "tokens/s/GPU", "MFU %") + head[1:]
    rows = "".join(_row(advice.options[i], i == advice.recommended) for i in advice.shown())
    model = html.escape(str(advice.job.get("model")))
    p = advice.prices
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}: {model}</h1>"
        f"<p>{advice.samples_per_epoch:,.0f} samples per epoch, {advice.epochs:g} epochs; {len(advice.options)} "
        f"options tried, {len(advice.front)} on the front.</p>"
        f"<p><b>{html.escape(advice.message)}</b></p><div>{fig}</div>"
        "<h2>The front</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{rows}</table>"
        + "<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in advice.notes) + "</ul>"
        f"<p class=\"note\">Prices: {html.escape(p.name)} ({html.escape(p.origin)}), {html.escape(p.currency)} per "
        "GPU-hour; the packaged tables are examples of list prices that go stale. Time and cost ranges carry the "
        "step-time interval; memory 'risky' fits at the point estimate but not at the memory interval's upper end. "
        f"Predictions by {html.escape(advice.model_version)}: analytic, not measured.</p>"
        "</body></html>\n")


def write_report(path, advice, **kwargs) -> Path:
    """The interactive page, or the static plot (:mod:`gpucast.advisor.svg`) when ``path`` ends in ``.svg``;
    written atomically."""
    from gpucast.fileio import atomic_write_text

    if str(path).lower().endswith(".svg"):
        from gpucast.advisor.svg import render_svg

        return atomic_write_text(path, render_svg(advice))
    return atomic_write_text(path, render(advice, **kwargs))
