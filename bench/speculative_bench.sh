#!/usr/bin/env bash
# Speculative decoding vs plain decoding with `weft bench` (docs/speculative.md): for each batch
# size, one plain run and one speculative run of the same seeded requests, back to back; prints
# output tok/s, TPOT p50, steps, the mean acceptance length and whether the greedy outputs are
# identical (output_digest). Any extra arguments go to both runs.
#
#   bench/speculative_bench.sh [--weft BIN] [--batches "1 64"] [--speculate ARGS] -- WEFT_BENCH_ARGS
#
# On the GPU machine (8B random shape, repetitive prompt, prompt lookup):
#   python3 bench/make_random_model.py --shape 8b \
#       --tokenizer build/release/test-data/tokenizers/llama3 --out /tmp/llama8b
#   bench/speculative_bench.sh -- --model /tmp/llama8b --device cuda --input-len 1024 \
#       --output-len 256 --repeat-prompt 8 --gpu-memory-fraction 0.85
set -euo pipefail
weft=build/release/bin/weft
batches="1 64"
speculate="--speculate prompt-lookup --spec-tokens 4"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --weft) weft="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --speculate) speculate="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (extra weft bench arguments go after --)" >&2; exit 2 ;;
  esac
done
printf '%-6s %-12s %12s %12s %8s %10s %s\n' batch run "out tok/s" "TPOT p50 ms" steps "accept len" digest
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
for b in $batches; do
  declare -A digest=() tps=()
  failed=no
  for run in plain speculative; do
    extra=()
    [[ $run == speculative ]] && read -r -a extra <<< "$speculate"
    json=$("$weft" bench --num-requests "$b" --seed 1 "${extra[@]}" "$@" 2>"$errors" | tail -n 1) || true
    # A failed run (a bad option, a model that does not load) says why and the table goes on.
    if ! fields=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print(d["output_tokens_per_s"], d["tpot_ms_p50"], d["steps"], d["mean_acceptance_length"], d["output_digest"])
' "$json" 2>/dev/null); then
      echo "batch $b $run: weft bench failed: $(tail -n 3 "$errors" | tr '\n' ' ')"
      failed=yes
      break
    fi
    read -r t tpot steps accept d <<< "$fields"
    digest[$run]=$d
    tps[$run]=$t
    printf '%-6s %-12s %12.1f %12.2f %8s %10.2f %s\n' "$b" "$run" "$t" "$tpot" "$steps" "$accept" "$d"
  done
  [[ $failed == yes ]] && continue
  same=no
  [[ ${digest[plain]} == "${digest[speculative]}" ]] && same=yes
  python3 -c 'import sys; print(f"batch {sys.argv[1]}: speedup {float(sys.argv[3]) / float(sys.argv[2]):.2f}x, identical greedy output: {sys.argv[4]}")' \
    "$b" "${tps[plain]}" "${tps[speculative]}" "$same"
done
