#!/bin/bash
# Perplexity of a model for every block quantization format (docs/quantization.md), as the
# markdown table of docs/PERFORMANCE.md: format, bits, size of model.safetensors, perplexity.
#
#   bench/quant_perplexity.sh [WEFT_BINARY] [MODEL_DIR] [TEXT_FILE] [extra perplexity args...]
#   bench/quant_perplexity.sh build/release/bin/weft models/weft-tiny models/weft-tiny/heldout-head.txt
set -euo pipefail
weft=${1:-build/release/bin/weft}
model=${2:-models/weft-tiny}
text=${3:-models/weft-tiny/heldout-head.txt}
shift $(( $# < 3 ? $# : 3 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ppl() { "$weft" perplexity --model "$1" --file "$text" --format json "${@:2}" 2>/dev/null |
          sed -E 's/.*"perplexity":([^,]+),.*/\1/'; }
base=$(ppl "$model" "$@")
size=$(stat -c %s "$model/model.safetensors")
echo "| format | quantization bits | bits/weight (matrices) | model.safetensors (MB) | perplexity | vs unquantized |"
echo "| --- | --- | --- | --- | --- | --- |"
awk -v s="$size" -v p="$base" 'BEGIN { printf "| unquantized | 16 | 16 | %.2f | %.3f | |\n", s / 1e6, p }'
for f in q8_b32 q8_b64 q6_b32 q6_b64 q5_b32 q5_b64 q4_b32 q4_b64 q3h_b32 q3h_b64 q3_b32 q3_b64 q2_b32 q2_b64; do
  "$weft" quantize --model "$model" --format "$f" --out "$work/$f" >/dev/null 2>&1
  p=$(ppl "$work/$f" "$@")
  s=$(stat -c %s "$work/$f/model.safetensors")
  bits=$(grep -o '"bits_per_weight": [0-9.]*' "$work/$f/config.json" | grep -o '[0-9.]*$')
  case $f in q8*) q=8 ;; q6*) q=6 ;; q5*) q=5 ;; q4*) q=4 ;; q3h*) q=3.5 ;; q3*) q=3 ;; q2*) q=2 ;; esac
  awk -v f="$f" -v q="$q" -v b="$bits" -v s="$s" -v p="$p" -v base="$base" \
    'BEGIN { printf "| `%s` | %s | %s | %.2f | %.3f | %+.2f%% |\n", f, q, b, s / 1e6, p, 100 * (p / base - 1) }'
  rm -rf "${work:?}/$f"
done
