"""Speed claims of the profiling harness that the test suite does not assert (they depend on this
machine's load, so they are measured here, on a quiet machine, instead of in tests/):

* ``sampler``: the NVML sampler thread (:class:`gpucast.profile.sampler.Sampler`, against the
  tests' ``FakeNvml``, a synthetic backend that answers at once) sustains >= 20 Hz at its default
  50 Hz and paces itself (no more samples than the rate allows). Its pacing logic is tested
  deterministically in ``tests/profile/test_sampler.py`` on a fake clock.
* ``workers``: a real ``DataLoader`` with two worker processes shortens the step of a dataset that
  sleeps 2 ms per sample (``tests/probe/user_data.py:slow``, batch 16) to < 0.8 of the step with
  none (:func:`gpucast.profile.runner.run_job` on the CPU). The test suite checks only the floor
  the sleep sets.

Not measured: anything on a GPU. Usage: ``python benchmarks/harness_timing.py [sampler|workers]``;
it prints one line per claim, writes the table to ``benchmarks/results/harness_timing.md`` when
both claims ran, and exits 1 if one does not hold.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sampler(seconds: float = 2.0, rate_hz: float = 50.0) -> bool:
    sys.path.insert(0, str(ROOT / "tests" / "profile"))
    from fakes import FakeNvml

    from gpucast.profile.sampler import Sampler

    s = Sampler(FakeNvml(util=[30, 60], cycle=True), rate_hz=rate_hz)
    t0 = time.monotonic()
    with s:
        time.sleep(seconds)
    span = time.monotonic() - t0
    n, hz = len(s.samples), s.achieved_hz
    ok = hz >= 20.0 and n <= span * rate_hz + 2
    return ok, f"{n} samples in {span:.2f} s, {hz:.1f} Hz achieved at {rate_hz:g} Hz", \
        f">= 20 Hz, <= {span * rate_hz + 2:.0f} samples"


def workers() -> bool:
    from gpucast import Job
    from gpucast.profile.runner import RunSpec, run_job
    from gpucast.surroundings import Data

    user = ROOT / "tests" / "probe" / "user_data.py"

    def job(w: int) -> Job:
        return Job("mlp-small", batch_size=16, data=Data(dataset=f"{user}:slow", num_workers=w))

    fast = dict(device="cpu", warmup_steps=1, window_s=0.5, min_window_steps=3, max_window_steps=50)
    rows = {w: run_job(RunSpec(job(w), **fast)) for w in (0, 2)}
    t0, t2 = rows[0]["step_time_mean_s"], rows[2]["step_time_mean_s"]
    ok = t2 < 0.8 * t0
    return ok, f"step {t0 * 1e3:.1f} ms with 0 workers, {t2 * 1e3:.1f} ms with 2 ({t2 / t0:.2f}x)", "< 0.8x"


def main(argv: list[str]) -> int:
    which = argv or ["sampler", "workers"]
    claims = {"sampler": sampler, "workers": workers}
    bad = [w for w in which if w not in claims]
    if bad:
        print(f"error: unknown claim {bad[0]!r} (choose from {', '.join(claims)})", file=sys.stderr)
        return 2
    rows = []
    for w in which:
        ok, measured, claim = claims[w]()
        print(f"{w}: {measured} (claim: {claim}): {'holds' if ok else 'FAILS'}")
        rows.append((w, measured, claim, "holds" if ok else "FAILS"))
    if len(rows) == len(claims):
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        lines = ["## Profiling harness speed", "", "Command: `python benchmarks/harness_timing.py`", "",
                 "| claim | measured | target | verdict |", "|---|---|---|---|",
                 *(f"| {w} | {m} | {c} | {v} |" for w, m, c, v in rows), "",
                 f"Machine: `nproc` = {os.cpu_count()}, Python {platform.python_version()}, "
                 f"load average at the end {load}. The sampler runs against the tests' synthetic NVML "
                 "backend; the loader rows on the CPU.", ""]
        out = ROOT / "benchmarks" / "results" / "harness_timing.md"
        out.write_text("\n".join(lines))
        print(f"wrote {out}")
    return 0 if all(r[3] == "holds" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
