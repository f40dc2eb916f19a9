"""Draw docs/two_numbers.svg: the share of time kernels hold the GPU against what NVML reports.

Two hand-made 2 ms steps with the same kernel time (0.8 ms): one long kernel, and 16 short ones
with 70 us gaps. Under each, a counter with 50 us ticks (for illustration: the packaged fit finds a tick
under a microsecond, scripts/fit_environment.py) as NVML's sampler rule
reads them (:mod:`gpucast.estimate.nvml`: a tick is busy when any kernel ran in it). The numbers
printed are computed by gpucast's own functions, not typed in. Plain SVG, no plotting library.

    .venv/bin/python scripts/two_numbers_figure.py [--out docs/two_numbers.svg]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpucast.estimate.nvml import held_share, reported_share

STEP = 2e-3
TICK = 50e-6
W, X0, ROW = 760, 230, 90


def _case_long():
    return [(0.2e-3, 1.0e-3)]


def _case_short():
    out, t = [], 0.1e-3
    for _ in range(16):
        out.append((t, t + 50e-6))
        t += 50e-6 + 70e-6
    return out


def _gaps(kernels):
    edges = [0.0] + [x for k in kernels for x in k] + [STEP]
    # idle periods: before the first kernel, between kernels, after the last (joined across steps)
    inner = [edges[i + 1] - edges[i] for i in range(2, len(edges) - 2, 2)]
    outer = kernels[0][0] + (STEP - kernels[-1][1])
    return inner + [outer]


def _ticks_busy(kernels):
    n = int(round(STEP / TICK))
    return [any(a < (i + 1) * TICK and b > i * TICK for a, b in kernels) for i in range(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "two_numbers.svg")
    args = ap.parse_args(argv)
    scale = (W - X0 - 20) / STEP
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{2 * ROW + 60}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{W}" height="{2 * ROW + 60}" fill="white"/>']
    for r, (label, kernels) in enumerate((("one long kernel", _case_long()), ("16 short kernels", _case_short()))):
        y = 20 + r * ROW
        busy = sum(b - a for a, b in kernels)
        h = held_share(STEP, busy)
        u = reported_share(STEP, busy, _gaps(kernels), TICK)
        parts.append(f'<text x="8" y="{y + 14}" font-weight="bold">{label}</text>')
        parts.append(f'<text x="8" y="{y + 32}">held {100 * h:.0f} %</text>')
        parts.append(f'<text x="8" y="{y + 50}">NVML {100 * u:.0f} %</text>')
        parts.append(f'<text x="{X0 - 6}" y="{y + 18}" text-anchor="end" fill="#555">kernels</text>')
        parts.append(f'<rect x="{X0}" y="{y + 6}" width="{STEP * scale:.1f}" height="16" fill="#eee"/>')
        for a, b in kernels:
            parts.append(f'<rect x="{X0 + a * scale:.1f}" y="{y + 6}" width="{(b - a) * scale:.1f}" height="16" '
                         'fill="#2a6fdb"/>')
        parts.append(f'<text x="{X0 - 6}" y="{y + 44}" text-anchor="end" fill="#555">NVML ticks</text>')
        for i, on in enumerate(_ticks_busy(kernels)):
            parts.append(f'<rect x="{X0 + i * TICK * scale:.1f}" y="{y + 32}" width="{TICK * scale - 1:.1f}" '
                         f'height="14" fill="{"#e8833a" if on else "#eee"}"/>')
    y = 2 * ROW + 30
    parts.append(f'<text x="{X0}" y="{y}" fill="#555">a 2 ms step, the same 0.8 ms of kernels; blue: a kernel '
                 'running;</text>')
    parts.append(f'<text x="{X0}" y="{y + 16}" fill="#555">orange: a {TICK * 1e6:.0f} us tick in which some kernel '
                 'ran, which NVML counts busy</text>')
    parts.append("</svg>")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(parts) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
