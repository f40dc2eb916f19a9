#!/usr/bin/env bash
# One device call that measures everything gpucast collects on a lent GPU, in order of value per second:
#   1. kernel_times.py  kernel-level timings (GEMM/FP8/conv/attention/memory/launch)   -> kernels.csv
#   2. serving.py       LLM prefill/decode/generate iterations with a KV cache (HF)   -> serving.csv
#   3. collect.sh       the solo and co-located job suite h200-v1 (NVML utilization)  -> measurements.parquet,
#                       provenance.json, suite.log
# plus session.log (this script's console) and gpu.txt (nvidia-smi -q at the start).
#
#     run   command: bash scripts/device/session.sh     timeout_s: 590
#
# Every stage has its own time box and hard timeout, and a stage's failure does not stop the next. The
# suite gets what is left of SESSION_S (default 560 s) less a 45 s margin. Never changes clocks or modes.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export OUT=${OUT:-$ROOT/out/device}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SESSION_S=${SESSION_S:-560}
export PYTHONUNBUFFERED=1 NO_COLOR=1
T0=$(date +%s)
{
echo "== gpucast device session $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi -q > "$OUT/gpu.txt" 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,compute_mode,mig.mode.current --format=csv || true
echo "== kernels"
timeout --kill-after=10 130 "$PY" scripts/device/kernel_times.py --out "$OUT/kernels.csv" --budget 95 || echo "kernels exited $?"
echo "== serving ($(( $(date +%s) - T0 )) s in)"
timeout --kill-after=10 150 "$PY" scripts/device/serving.py --out "$OUT/serving.csv" --budget 120 || echo "serving exited $?"
LEFT=$(( SESSION_S - ($(date +%s) - T0) - 45 ))
echo "== suite ($(( $(date +%s) - T0 )) s in, budget ${LEFT} s)"
if [ "$LEFT" -gt 60 ]; then
    GPUCAST_BUDGET_S=$LEFT bash scripts/device/collect.sh > /dev/null 2>&1 || echo "collect exited $?"
    tail -25 "$OUT/suite.log" 2>/dev/null
fi
echo "== done after $(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$OUT/session.log"
