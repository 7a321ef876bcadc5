#!/usr/bin/env bash
# weft bench --json-schema-dir --write-dataset, then --dataset on the written file without a
# constraint: the replay must run the same requests with the same prompt and output token
# counts (the comparison bench/gpu_8b.sh makes for constrained against unconstrained decoding).
# Usage: replay_check.sh WEFT SCHEMA_DIR WORK_DIR
set -eu
weft=$1 schemas=$2 work=$3
mkdir -p "$work"
data=$work/replay.jsonl
rm -f "$data"
constrained=$("$weft" bench --num-requests 5 --input-len 8 --output-len 24 --seed 3 --threads 1 \
  --json-schema-dir "$schemas" --write-dataset "$data" | tail -1)
replay=$("$weft" bench --dataset "$data" --threads 1 | tail -1)
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" <<<"$2"; }
echo "constrained: $constrained"
echo "replay: $replay"
[ "$(field schemas "$constrained")" = 3 ] || { echo "expected 3 schemas"; exit 1; }
[ "$(wc -l < "$data")" = 5 ] || { echo "expected 5 lines in $data"; exit 1; }
for f in requests failed input_tokens output_tokens; do
  a=$(field $f "$constrained") b=$(field $f "$replay")
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "$f: constrained $a, replay $b"; exit 1; }
done
# Schemas b and c end early (an enum value, at most 3 digits): fewer than 5 x 24 tokens.
[ "$(field output_tokens "$constrained")" -lt 120 ] || { echo "no output ended early"; exit 1; }
echo "replay matches"
