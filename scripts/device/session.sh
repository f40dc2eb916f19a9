#!/usr/bin/env bash
# One device call that measures everything gpucast collects on a lent GPU, in order of value per second:
#   1. kernel_times.py  kernel-level timings, the sections in KERNEL_SECTIONS (default: those the H200 has no
#                       rows of yet: conv, batchnorm, norms, decode_attention, launch; all of them:
#                       gemm,attention,memory,launch,conv,batchnorm,norms,decode_attention) -> kernels.csv
#   2. serving.py       LLM iterations with a KV cache (HF): transformers' continuous-batching engine on
#                       Llama-3.2-1B (-> requests.csv), prefill/decode/generate of the MoE shape, long-context
#                       decode of Llama-3-8B                                                  -> serving.csv
#   3. collect.sh       the solo and co-located job suite h200-v1 (NVML utilization)  -> measurements.parquet,
#                       provenance.json, suite.log
# plus session.log (this script's console) and gpu.txt (nvidia-smi -q at the start).
#
#     run   command: bash scripts/device/session.sh     timeout_s: 590
#
# GPUCAST_COLOCATED_SHARE=1 (passed on to collect.sh) measures the suite's co-located groups before
# its solo runs: what the co-location model's open questions need (issue 40's note).
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
KERNEL_SECTIONS=${KERNEL_SECTIONS:-conv,batchnorm,norms,decode_attention,launch}
echo "== kernels ($KERNEL_SECTIONS)"
timeout --kill-after=10 130 "$PY" scripts/device/kernel_times.py --out "$OUT/kernels.csv" --budget 95 \
    --sections "$KERNEL_SECTIONS" || echo "kernels exited $?"
S="$PY scripts/device/serving.py"
SV=$(mktemp -d)
echo "== serving: continuous batching ($(( $(date +%s) - T0 )) s in)"
timeout --kill-after=10 75 $S --out "$SV/1.csv" --budget 40 --models llama-3.2-1b --phases continuous \
    --requests "$OUT/requests.csv" || echo "serving exited $?"
echo "== serving: MoE ($(( $(date +%s) - T0 )) s in)"
timeout --kill-after=10 60 $S --out "$SV/2.csv" --budget 40 --models qwen1.5-moe-a2.7b || echo "serving exited $?"
echo "== serving: long-context decode ($(( $(date +%s) - T0 )) s in)"
timeout --kill-after=10 55 $S --out "$SV/3.csv" --budget 35 --models llama-3-8b --phases decode \
    --decode 1:16384,8:8192,32:8192,64:4096,128:4096,16:32768 || echo "serving exited $?"
{ head -1 "$SV/1.csv" 2>/dev/null || head -1 "$SV/2.csv"; for f in "$SV"/*.csv; do tail -n +2 "$f"; done; } \
    > "$OUT/serving.csv" 2>/dev/null
LEFT=$(( SESSION_S - ($(date +%s) - T0) - 45 ))
echo "== suite ($(( $(date +%s) - T0 )) s in, budget ${LEFT} s)"
if [ "$LEFT" -gt 60 ]; then
    GPUCAST_BUDGET_S=$LEFT bash scripts/device/collect.sh > /dev/null 2>&1 || echo "collect exited $?"
    tail -25 "$OUT/suite.log" 2>/dev/null
fi
echo "== done after $(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$OUT/session.log"
