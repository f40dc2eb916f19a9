"""How long a cold `gpucast predict` takes, with and without the on-disk prediction cache.

Every run is a fresh process, timed from outside (wall seconds, start-up and imports included),
median of ``--repeat`` runs (default 5), min and max beside it:

* ``python -c pass``: the interpreter alone, the floor every ratio is taken against;
* ``gpucast --help``: the CLI's own imports (typer, rich, the command modules);
* ``gpucast predict resnet50 -b 64`` (table) and the same with ``--json``: a **miss** (each run
  with an empty cache directory of its own: imports torch, captures the graph, estimates, stores)
  and a **hit** (the same cache directory every run, warmed once before: no torch);
* ``gpucast predict --hf-config config.json -b 8 --seq-len 128``, a Hugging Face job from a
  ``config.json`` with BERT-base's shapes (:data:`HF_CONFIG`, written to a temporary folder):
  a miss also imports transformers to check the model type; a hit neither (the model types are
  remembered in the cache under a digest of the installed transformers) nor torch;

and whether each hit printed exactly what the miss printed. The cache is a private temporary
directory (``GPUCAST_CACHE_DIR``): the user's own is neither read nor filled. Targets from the
issues: a hit under 1.5 s cold on a 2-core machine, an ``--hf-config`` hit under 1 s. Nothing is
asserted (benchmarks are not tests); the machine line records ``nproc``, the CPU and the load
average, since other work on a small box moves the numbers. An edit to gpucast's source while it
runs changes every key (a "hit" would then be a miss): run it on a tree nobody is editing.

    .venv/bin/python benchmarks/cold_start.py [--repeat 5] [--markdown benchmarks/results/cold_start.md]
"""

from __future__ import annotations

import argparse
import json
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
TARGET_HF_HIT_S = 1.0
JOB = ["predict", "resnet50", "-b", "64"]
HF_JOB = ["predict", "--hf-config", "config.json", "-b", "8", "--seq-len", "128"]
# The shapes of BERT-base (bert-base-uncased's config.json), as a user would pass a downloaded file.
HF_CONFIG = {"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
             "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
             "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
             "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "type_vocab_size": 2,
             "vocab_size": 30522, "transformers_version": "4.6.0.dev0"}


def _gpucast() -> list[str]:
    exe = Path(sys.executable).parent / "gpucast"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gpucast.cli"]


def _env(cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUCAST_NO_CACHE", "COLUMNS", "FORCE_COLOR")}
    env.update(GPUCAST_CACHE_DIR=cache_dir, NO_COLOR="1", TERM="dumb")
    return env


def _once(cmd: list[str], cache_dir: str, cwd: Path = REPO_ROOT) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(cache_dir), cwd=cwd,
                       stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return wall, p.stdout


def timed(cmd: list[str], repeat: int, cache: str, cwd: Path = REPO_ROOT) -> dict:
    """``cache``: "empty" (a new directory per run), a directory (shared by every run) or ""."""
    walls, outputs = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="gpucast-cold-") as fresh:
            wall, out = _once(cmd, fresh if cache in ("", "empty") else cache, cwd)
        walls.append(wall)
        outputs.append(out)
    return dict(median=statistics.median(walls), lo=min(walls), hi=max(walls), output=outputs[0],
                same=len(set(outputs)) == 1)


def run(repeat: int) -> list[dict]:
    g = _gpucast()
    rows = [dict(label="`python -c pass`", what="interpreter start-up", **timed([sys.executable, "-c", "pass"],
                                                                               repeat, "")),
            dict(label="`gpucast --help`", what="the CLI's imports", **timed(g + ["--help"], repeat, ""))]
    with tempfile.TemporaryDirectory(prefix="gpucast-cold-hf-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps(HF_CONFIG, indent=2))
        for job, cwd, target, missed in ((JOB, REPO_ROOT, TARGET_HIT_S, "torch"),
                                         (JOB + ["--json"], REPO_ROOT, TARGET_HIT_S, "torch"),
                                         (HF_JOB, Path(folder), TARGET_HF_HIT_S, "transformers, torch")):
            cmd = g + job
            shown = "`gpucast " + " ".join(job) + "`"
            miss = timed(cmd, repeat, "empty", cwd)
            with tempfile.TemporaryDirectory(prefix="gpucast-cold-warm-") as warm:
                _once(cmd, warm, cwd)
                hit = timed(cmd, repeat, warm, cwd)
            hit["same_as_miss"] = hit["same"] and hit["output"] == miss["output"]
            hit["target"] = target
            rows += [dict(label=shown, what=f"miss: empty cache ({missed}, capture, estimate, store)", **miss),
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
    m = machine()
    targets = []
    for target in sorted({r["target"] for r in rows if "target" in r}, reverse=True):
        hits = [r for r in rows if r.get("target") == target]
        slowest = max(hits, key=lambda r: r["median"])
        targets.append(f"a hit of {', '.join(sorted({r['label'] for r in hits}))} under {target:g} s cold: "
                       f"{'met' if slowest['median'] < target else 'not met'} (slowest hit median "
                       f"{slowest['median']:.2f} s)")
    lines += ["", f"Targets: {'; '.join(targets)}. Machine: `nproc` = {m['nproc']}, CPU: {m['cpu']}, Python "
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
