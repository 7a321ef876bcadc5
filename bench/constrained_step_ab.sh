#!/usr/bin/env bash
# constrained_step_bench for two builds, interleaved (docs/PERFORMANCE.md, "Constrained step
# loop on a simulated device"): the same runs with the binary BEFORE and AFTER, REPS times, for
# one schema, a schema per request and a regex; prints each run's summary lines.
#   bash bench/constrained_step_ab.sh BEFORE_BIN AFTER_BIN TOKENIZER_DIR [REPS]
set -u
before=$1 after=$2 tokenizer=$3 reps=${4:-3}
cd "$(dirname "$0")/.."
for rep in $(seq 1 "$reps"); do
  for f in schema schemas regex; do
    case $f in
      schema) F=(--schema tests/tools/grammar/schemas/44_order_document.json) ;;
      schemas) F=(--schema-dir tests/tools/grammar/schemas) ;;
      regex) F=(--regex "[a-zA-Z ,.;:'!?-]*") ;;
    esac
    for which in before after; do
      if [ $which = before ]; then b=$before; else b=$after; fi
      "$b" --tokenizer "$tokenizer" "${F[@]}" --batch 32 --requests 64 --reps 1 --work "build/csb-$which" 2>/dev/null |
        grep -A1 "^constrained\|^unconstrained" | tr -s ' ' | paste - - | sed "s/^/$rep $f $which /"
    done
  done
done
