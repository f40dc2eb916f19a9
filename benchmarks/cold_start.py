"""How long a cold `gpucast predict` takes, with and without the on-disk prediction cache.

Every run is a fresh process, timed from outside (wall seconds, start-up and imports included),
median of ``--repeat`` runs (default 5), min and max beside it:

* ``python -c pass``: the interpreter alone, the floor every ratio is taken against;
* ``gpucast --help``: the CLI's own imports (typer, rich, the command modules);
* ``gpucast predict resnet50 -b 64`` (table) and the same with ``--json``: a **miss** (each run
  with an empty cache directory of its own: imports torch, captures the graph, estimates, stores)
  and a **hit** (the same cache directory every run, warmed once before: no torch);

and whether each hit printed exactly what the miss printed. The cache is a private temporary
directory (``GPUCAST_CACHE_DIR``): the user's own is neither read nor filled. Target from the
issue: a hit under 1.5 s cold on a 2-core machine. Nothing is asserted (benchmarks are not tests);
the machine line records ``nproc``, the CPU and the load average, since other work on a small box
moves the numbers.

    .venv/bin/python benchmarks/cold_start.py [--repeat 5] [--markdown benchmarks/results/cold_start.md]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sim_scale import machine  # benchmarks/ is this script's directory

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MD = REPO_ROOT / "benchmarks" / "results" / "cold_start.md"
TARGET_HIT_S = 1.5
JOB = ["predict", "resnet50", "-b", "64"]


def _gpucast() -> list[str]:
    exe = Path(sys.executable).parent / "gpucast"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gpucast.cli"]


def _env(cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUCAST_NO_CACHE", "COLUMNS", "FORCE_COLOR")}
    env.update(GPUCAST_CACHE_DIR=cache_dir, NO_COLOR="1", TERM="dumb")
    return env


def _once(cmd: list[str], cache_dir: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(cache_dir), cwd=REPO_ROOT,
                       stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return wall, p.stdout


def timed(cmd: list[str], repeat: int, cache: str) -> dict:
    """``cache``: "empty" (a new directory per run), a directory (shared by every run) or ""."""
    walls, outputs = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="gpucast-cold-") as fresh:
            wall, out = _once(cmd, fresh if cache in ("", "empty") else cache)
        walls.append(wall)
        outputs.append(out)
    return dict(median=statistics.median(walls), lo=min(walls), hi=max(walls), output=outputs[0],
                same=len(set(outputs)) == 1)


def run(repeat: int) -> list[dict]:
    g = _gpucast()
    rows = [dict(label="`python -c pass`", what="interpreter start-up", **timed([sys.executable, "-c", "pass"],
                                                                               repeat, "")),
            dict(label="`gpucast --help`", what="the CLI's imports", **timed(g + ["--help"], repeat, ""))]
    for extra in ([], ["--json"]):
        cmd = g + JOB + extra
        shown = "`gpucast " + " ".join(JOB + extra) + "`"
        miss = timed(cmd, repeat, "empty")
        with tempfile.TemporaryDirectory(prefix="gpucast-cold-warm-") as warm:
            _once(cmd, warm)
            hit = timed(cmd, repeat, warm)
        hit["same_as_miss"] = hit["same"] and hit["output"] == miss["output"]
        rows += [dict(label=shown, what="miss: empty cache (torch, capture, estimate, store)", **miss),
                 dict(label=shown, what="hit: answered from the cache", **hit)]
    return rows


def markdown(rows: list[dict], argv: list[str]) -> str:
    floor = rows[0]["median"]
    lines = ["| command | run | median s | min-max s | x `python -c pass` | hit prints what the miss printed |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        same = "-" if "same_as_miss" not in r else ("yes" if r["same_as_miss"] else "**no**")
        lines.append(f"| {r['label']} | {r['what']} | **{r['median']:.3f}** | {r['lo']:.2f}-{r['hi']:.2f} | "
                     f"{r['median'] / floor:.1f} | {same} |")
    hits = [r["median"] for r in rows if "same_as_miss" in r]
    m = machine()
    lines += ["", f"Target: a hit under {TARGET_HIT_S} s cold: {'met' if max(hits) < TARGET_HIT_S else 'not met'} "
                  f"(slowest hit median {max(hits):.2f} s). Machine: `nproc` = {m['nproc']}, CPU: {m['cpu']}, Python "
                  f"{m['python']}, load average at the end {m['load_avg'] or '?'}.", "",
              f"Command: `{shlex.join(['.venv/bin/python', 'benchmarks/cold_start.py', *argv])}`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="Fresh processes per row (the median is shown).")
    ap.add_argument("--markdown", type=Path, default=DEFAULT_MD, help="Write the table here too.")
    args = ap.parse_args(argv)
    text = markdown(run(args.repeat), list(sys.argv[1:] if argv is None else argv))
    print(text, end="")
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text("## Cold start\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
