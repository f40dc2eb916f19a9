#!/usr/bin/env bash
# Collect real GPU measurements for gpucast: the device suite (src/gpucast/profile/suite.py),
# run in ONE call of the device tool, within its 10-minute limit.
#
# How to run it (from a session whose task is lent a GPU machine; `status` says so at no cost):
#
#     run   command: bash scripts/device/collect.sh     timeout_s: 600
#
# It uses the device image's own python3 (torch, torchvision, transformers, numpy, pyarrow,
# nvidia-ml-py, rich) with PYTHONPATH=$PWD/src: it installs nothing and needs no network. It never
# changes GPU clocks, power limits or modes (no nvidia-smi -ac/-lgc/-pl/-pm/-c): it measures the GPU
# as it is lent, and records the clocks it saw in every row.
#
# Order: solo runs until 1 - GPUCAST_COLOCATED_SHARE of the budget is spent (default 0.25 kept for
# the co-located groups), then the groups; GPUCAST_COLOCATED_SHARE=1 measures the groups first.
#
# Time: the suite stops starting new runs when its budget (GPUCAST_BUDGET_S, default 510 s) is
# nearly spent, and a hard `timeout` (budget + 30 s) stops it regardless; the whole script ends
# well inside 9.5 minutes. Configurations already in data/measurements/*.parquet (earlier
# collections, committed) are skipped, so each collection continues where the last one stopped.
#
# What comes back under $OUT (3 files; the device tool returns at most 8, two folders deep):
#   measurements.parquet  every row of this collection (rewritten atomically after each run, so a
#                         cut-short call still returns every finished row)
#   provenance.json       date, host, GPU, driver, torch/CUDA/python versions, git commit, budget,
#                         row counts
#   suite.log             the console log (one line per run)
#
# How to commit the result (on the development machine, after the call):
#   1. copy files_at/measurements.parquet to data/measurements/<YYYY-MM-DD>-h200.parquet
#      (a second collection on the same day: <YYYY-MM-DD>-h200-2.parquet);
#   2. add a row to the collections table of data/measurements/README.md from provenance.json
#      (date, file, GPU, driver, torch, commit, rows by status, budget);
#   3. check it: `gpucast data show data/measurements --status ok` and
#      `gpucast data compare data/measurements`; commit both files together.
# Only rows measured by this script (or `gpucast profile ... --save`) on a real GPU go there.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/device}
BUDGET_S=${GPUCAST_BUDGET_S:-510}
HARD_S=$((BUDGET_S + 30))
WORK=$(mktemp -d /tmp/gpucast-suite.XXXXXX)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 NO_COLOR=1

collect() {
echo "== gpucast device collection, $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET_S} s (hard stop ${HARD_S} s)"
if ! command -v nvidia-smi > /dev/null; then
    echo "error: no NVIDIA GPU: nvidia-smi not found"
    return 2
fi
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit,compute_mode \
    --format=csv || true
"$PY" - <<'PY'
import platform, sys
import torch, torchvision, transformers, pyarrow, pynvml
print(f"python {platform.python_version()} ({sys.executable}); torch {torch.__version__} (CUDA {torch.version.cuda}, "
      f"cuDNN {torch.backends.cudnn.version()}); torchvision {torchvision.__version__}; "
      f"transformers {transformers.__version__}; pyarrow {pyarrow.__version__}")
print(f"torch sees {torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'}")
PY

SHARE=()
if [ -n "${GPUCAST_COLOCATED_SHARE:-}" ]; then
    SHARE=(--colocated-share "$GPUCAST_COLOCATED_SHARE")
fi
PRIOR=()
if compgen -G "data/measurements/*.parquet" > /dev/null; then
    PRIOR=(--prior data/measurements)
    echo "earlier collections: $(ls data/measurements/*.parquet | wc -l) file(s) in data/measurements (done configurations skipped)"
fi

STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
rc=0
timeout --signal=TERM --kill-after=15 "$HARD_S" \
    "$PY" -m gpucast.profile.suite --out "$WORK" --parquet "$OUT/measurements.parquet" --budget "$BUDGET_S" \
    "${PRIOR[@]}" "${SHARE[@]}" || rc=$?
echo "== suite exited with $rc"

STARTED="$STARTED" BUDGET_S="$BUDGET_S" SUITE_RC="$rc" "$PY" - "$OUT" <<'PY'
import json, os, socket, subprocess, sys, datetime
out = sys.argv[1]

def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip() or None
    except Exception:
        return None

import torch, gpucast
prov = {
    "collected_by": "scripts/device/collect.sh",
    "started_at": os.environ["STARTED"],
    "finished_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "host": socket.gethostname(),
    "gpu": sh("nvidia-smi", "--query-gpu=name", "--format=csv,noheader"),
    "driver": sh("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
    "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
    "gpucast": gpucast.__version__,
    "git_commit": sh("git", "rev-parse", "HEAD"),
    "git_dirty": bool(sh("git", "status", "--porcelain", "--untracked-files=no")),
    "suite": "h200-v1", "budget_s": float(os.environ["BUDGET_S"]), "suite_exit_code": int(os.environ["SUITE_RC"]),
}
path = os.path.join(out, "measurements.parquet")
if os.path.exists(path):
    import pyarrow.parquet as pq
    rows = pq.read_table(path, columns=["status", "kind"]).to_pylist()
    counts = {}
    for r in rows:
        counts[f"{r['kind']}/{r['status']}"] = counts.get(f"{r['kind']}/{r['status']}", 0) + 1
    prov["rows"] = len(rows)
    prov["rows_by_kind_status"] = counts
else:
    prov["rows"] = 0
with open(os.path.join(out, "provenance.json"), "w") as f:
    json.dump(prov, f, indent=2)
print(json.dumps(prov, indent=2))
PY
return "$rc"
}

collect 2>&1 | tee "$OUT/suite.log"
