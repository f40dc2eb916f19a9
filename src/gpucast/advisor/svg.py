"""The advice's time-against-cost plot as a small static SVG (no plotly, no browser): for READMEs and wikis.

Log-log axes of time per epoch and cost per epoch; every option that fits as a dot coloured by GPU
type (hollow: ``risky`` memory), the step-time interval as a line through it (time and cost move
together along it), the Pareto front as a dotted line, the recommended option as a star.
``gpucast advise --report FILE.svg`` writes it; ``.html`` writes the interactive page.
"""

from __future__ import annotations

import html
import math

from gpucast.advisor.options import NO, RISKY
from gpucast.advisor.units import duration, usd

W, H, L, R, T, B = 760, 460, 80, 170, 30, 50
COLOURS = ("#2a6fdb", "#e8833a", "#3aa655", "#c23b3b", "#8e5cc2", "#8c6d31", "#d36fb3", "#555555", "#17becf",
           "#bcbd22", "#1f3b73", "#ff9896", "#98df8a")


def _ticks(lo: float, hi: float) -> list[float]:
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo <= v <= hi:
                out.append(v)
    return out


_NICE_S = [m * u for u in (1, 60, 3600) for m in (1, 2, 5, 10, 20, 30)] + [86400 * m for m in (1, 2, 5, 10, 20, 50, 100)]


def _time_ticks(lo: float, hi: float) -> list[float]:
    """Round durations (1 s, 2 s, 5 s, ... 30 min, 1 h, ... 1 d, ...) within the range; below a second, decades."""
    nice = [v for v in _NICE_S if lo <= v <= hi]
    return nice if len(nice) >= 2 else _ticks(lo, hi)


def render_svg(advice, title: str | None = None) -> str:
    fit = [o for o in advice.options if o.memory_fit != NO]
    if not fit:
        raise ValueError("no option fits in memory: nothing to plot")
    xs = [v for o in fit for v in o.epoch_interval_s]
    ys = [v for o in fit for v in o.cost_per_epoch_interval if v > 0] or [1e-6]
    x0, x1 = min(xs) / 1.3, max(xs) * 1.3
    y0, y1 = min(ys) / 1.3, max(ys) * 1.3

    def px(x: float) -> float:
        return L + (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)) * (W - L - R)

    def py(y: float) -> float:
        y = max(y, y0)
        return H - B - (math.log(y) - math.log(y0)) / (math.log(y1) - math.log(y0)) * (H - T - B)

    gpus = list(dict.fromkeys(o.gpu for o in fit))
    colour = {g: COLOURS[i % len(COLOURS)] for i, g in enumerate(gpus)}
    title = title or f"gpucast advise: {advice.job.get('model')}, {advice.samples_per_epoch:,.0f} samples per epoch"
    p = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{L}" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>',
         f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#999"/>']
    for v in _time_ticks(x0, x1):
        p.append(f'<line x1="{px(v):.1f}" y1="{T}" x2="{px(v):.1f}" y2="{H - B}" stroke="#eee"/>')
        p.append(f'<text x="{px(v):.1f}" y="{H - B + 14}" text-anchor="middle">{duration(v)}</text>')
    for v in _ticks(y0, y1):
        p.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - R}" y2="{py(v):.1f}" stroke="#eee"/>')
        p.append(f'<text x="{L - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{usd(v)}</text>')
    p.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">time per epoch</text>')
    p.append(f'<text x="14" y="{(T + H - B) / 2}" transform="rotate(-90 14 {(T + H - B) / 2})" '
             f'text-anchor="middle">cost per epoch ({advice.prices.currency})</text>')
    for o in fit:
        c = colour[o.gpu]
        (a, b), (ca, cb) = o.epoch_interval_s, o.cost_per_epoch_interval
        p.append(f'<line x1="{px(a):.1f}" y1="{py(ca):.1f}" x2="{px(b):.1f}" y2="{py(cb):.1f}" stroke="{c}" '
                 'stroke-opacity="0.35"/>')
        fill = "white" if o.memory_fit == RISKY else c
        p.append(f'<circle cx="{px(o.epoch_s):.1f}" cy="{py(o.cost_per_epoch):.1f}" r="3.2" fill="{fill}" '
                 f'stroke="{c}"><title>{html.escape(o.id)}</title></circle>')
    front = advice.front_options
    pts = " ".join(f"{px(o.epoch_s):.1f},{py(o.cost_per_epoch):.1f}" for o in front)
    p.append(f'<polyline points="{pts}" fill="none" stroke="black" stroke-dasharray="3,3"/>')
    best = advice.best
    if best is not None:
        cx, cy = px(best.epoch_s), py(best.cost_per_epoch)
        star = " ".join(f"{cx + (9 if k % 2 == 0 else 4) * math.sin(k * math.pi / 5):.1f},"
                        f"{cy - (9 if k % 2 == 0 else 4) * math.cos(k * math.pi / 5):.1f}" for k in range(10))
        p.append(f'<polygon points="{star}" fill="gold" stroke="black"><title>{html.escape(best.id)}</title></polygon>')
    ly = T + 6
    for g in gpus:
        p.append(f'<circle cx="{W - R + 16}" cy="{ly}" r="4" fill="{colour[g]}"/>'
                 f'<text x="{W - R + 26}" y="{ly + 4}">{html.escape(g)}</text>')
        ly += 16
    p.append(f'<line x1="{W - R + 10}" y1="{ly}" x2="{W - R + 22}" y2="{ly}" stroke="black" stroke-dasharray="3,3"/>'
             f'<text x="{W - R + 26}" y="{ly + 4}">Pareto front</text>')
    ly += 16
    p.append(f'<circle cx="{W - R + 16}" cy="{ly}" r="4" fill="white" stroke="#555"/>'
             f'<text x="{W - R + 26}" y="{ly + 4}">fits only below the</text>'
             f'<text x="{W - R + 26}" y="{ly + 16}">memory interval top</text>')
    ly += 30
    if best is not None:
        p.append(f'<text x="{W - R + 10}" y="{ly + 4}">&#9733; recommended</text>')
    p.append("</svg>")
    return "\n".join(p) + "\n"
