#!/usr/bin/env bash
# KV-Compress at a fixed KV budget (docs/kv-compress.md): the same workload through `weft bench`
# with --kv-compress-rate 0 and then each rate given, with a small --kv-budget-mb so that the
# pool, not the step budget, limits how many requests run at once. Prints one line per rate
# (output tok/s, TTFT p50/p99, steps, peak KV pages, compressions and pages they freed) and
# keeps each run's JSON under $OUT (default build/kv-compress-budget).
#
#   bench/kv_compress_budget.sh --bin build/release/bin [--model models/weft-tiny] [--device cpu]
#       [--budget-mb 16] [--rates "0.25 0.5"] [--requests 24] [--input-len 512] [--output-len 64]
#       [--dataset FILE] [-- extra weft bench arguments]
#
# --device cuda:0 runs it on a GPU (bench/device/kvcuda.sh: the 8B shape on an H100).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/release/bin MODEL=models/weft-tiny DEVICE=cpu BUDGET=16 RATES="0.25 0.5 0.75"
REQUESTS=24 INPUT=512 OUTPUT=64 DATASET="" EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --bin) BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --budget-mb) BUDGET=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --input-len) INPUT=$2; shift 2 ;;
    --output-len) OUTPUT=$2; shift 2 ;;
    --dataset) DATASET=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "kv_compress_budget.sh: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-build/kv-compress-budget}
mkdir -p "$OUT"
if [ -n "$DATASET" ]; then
  WORK=(--dataset "$DATASET" --num-requests "$REQUESTS")
else
  WORK=(--num-requests "$REQUESTS" --input-len "$INPUT" --output-len "$OUTPUT" --range-ratio 0.25 --seed 3)
fi
echo "model $MODEL, device $DEVICE, KV budget $BUDGET MiB, ${WORK[*]} ${EXTRA[*]:-}"
printf "%-6s %12s %18s %7s %14s %13s %13s\n" rate "output tok/s" "TTFT p50/p99 ms" steps "peak KV pages" compressions "pages freed"
for rate in 0 $RATES; do
  "$BIN/weft" bench --model "$MODEL" --device "$DEVICE" --kv-budget-mb "$BUDGET" \
    --kv-compress-rate "$rate" "${WORK[@]}" "${EXTRA[@]}" 2> "$OUT/rate$rate.err" | tail -1 > "$OUT/rate$rate.json"
  python3 - "$OUT/rate$rate.json" "$rate" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%-6s %12.1f %18s %7d %14s %13d %13d" % (
    sys.argv[2], d["output_tokens_per_s"], "%.0f / %.0f" % (d["ttft_ms_p50"], d["ttft_ms_p99"]),
    d["steps"], "%d / %d" % (d["peak_kv_pages"], d["kv_pages_total"]), d["kv_compressions"],
    d["kv_compressed_pages"]))
PY
done
