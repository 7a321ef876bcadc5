#!/usr/bin/env bash
# Speculative decoding on the GPU (docs/speculative.md, issue #17), in one go: plain against
# speculative `weft bench` runs, batch 1 and 64, greedy, with each run's output digest, for
#   1. weft-tiny with prompt lookup (chain, then a tree of width 2) on summary-like prompts: a
#      passage of the held-out text followed by its first 200 characters again;
#   2. weft-tiny with weft-tiny-draft as its draft model (when models/weft-tiny-draft holds
#      weights) on the GPU (the default with --device cuda: batched, greedy chains in one go;
#      docs/speculative.md#the-draft-on-the-gpu), as a chain and as a tree, and on the CPU
#      (--draft-device cpu, as before) for comparison; weft-tiny drafting for itself on the
#      GPU (the upper bound: every draft accepted);
#   3. with --llama8b DIR (bench/make_random_model.py --shape 8b): prompt lookup on repeated
#      random prompts, and plain decoding with the row kernel off (WEFT_ROW_KERNEL_TOKENS=0:
#      cuBLAS, as before it) against on, which is what plain decoding costs for exact
#      verification.
# Each table comes from bench/speculative_bench.sh: out tok/s, TPOT p50, steps, mean acceptance
# length and whether the greedy outputs are identical (they must be, at batch 1 and 64).
#
#   bench/gpu_speculative.sh --bin build/release/bin [--llama8b /tmp/llama8b] \
#       [--batches "1 64"] [--output-len 128]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/release/bin
llama=""
batches="1 64"
output_len=128
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --llama8b) llama="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
weft=$bin/weft
[[ -x $weft ]] || { echo "no weft binary at $weft (give --bin DIR)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Summary-like prompts from the held-out text, tokenized with weft-tiny's tokenizer.
python3 - "$work/texts.jsonl" <<'PY'
import json, sys
text = open("models/weft-tiny/heldout-head.txt", encoding="utf-8").read()
with open(sys.argv[1], "w") as out:
    for i in range(64):
        passage = text[i * 220 : i * 220 + 1100]
        out.write(json.dumps(passage + "\n\n" + passage[:200]) + "\n")
PY
"$weft" tokenize --tokenizer models/weft-tiny --jsonl <"$work/texts.jsonl" >"$work/ids.txt"
python3 - "$work/ids.txt" "$work/summary.jsonl" "$output_len" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        out.write(json.dumps({"prompt_ids": json.loads(line), "output_len": int(sys.argv[3])}) + "\n")
PY

table() {  # TITLE SPECULATE-ARGS WEFT-BENCH-ARGS...
  echo
  echo "## $1"
  bench/speculative_bench.sh --weft "$weft" --batches "$batches" --speculate "$2" -- "${@:3}"
}
tiny=(--model models/weft-tiny --device cuda --dataset "$work/summary.jsonl" --temperature 0)
"$weft" version 2>/dev/null | head -1 || true
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
table "weft-tiny, prompt lookup (chain of 4), summary-like prompts" \
  "--speculate prompt-lookup --spec-tokens 4" "${tiny[@]}"
table "weft-tiny, prompt lookup (tree: 3 deep, width 2), summary-like prompts" \
  "--speculate prompt-lookup --spec-tokens 3 --spec-width 2" "${tiny[@]}"
if [[ -f models/weft-tiny-draft/model.safetensors ]]; then
  table "weft-tiny, draft model weft-tiny-draft on the GPU (chain of 4)" \
    "--speculate draft --draft-model models/weft-tiny-draft --spec-tokens 4" "${tiny[@]}"
  table "weft-tiny, draft model weft-tiny-draft on the GPU (chain of 6)" \
    "--speculate draft --draft-model models/weft-tiny-draft --spec-tokens 6" "${tiny[@]}"
  table "weft-tiny, draft model weft-tiny-draft on the GPU (tree: 4 deep, width 2)" \
    "--speculate draft --draft-model models/weft-tiny-draft --spec-tokens 4 --spec-width 2" \
    "${tiny[@]}"
  table "weft-tiny, draft model weft-tiny-draft on the CPU (chain of 4; before issue #17)" \
    "--speculate draft --draft-model models/weft-tiny-draft --draft-device cpu --spec-tokens 4" \
    "${tiny[@]}"
else
  echo; echo "## weft-tiny-draft: models/weft-tiny-draft has no weights yet (see its README)"
fi
table "weft-tiny drafting for itself on the GPU (upper bound, chain of 4)" \
  "--speculate draft --draft-model models/weft-tiny --spec-tokens 4" "${tiny[@]}"

if [[ -n $llama ]]; then
  big=(--model "$llama" --device cuda --input-len 1024 --output-len 256 --repeat-prompt 8
       --gpu-memory-fraction 0.85)
  table "8B shape (random weights), prompt lookup (chain of 4), repeated prompts" \
    "--speculate prompt-lookup --spec-tokens 4" "${big[@]}"
  echo
  echo "## 8B shape, plain decoding: cuBLAS (WEFT_ROW_KERNEL_TOKENS=0) against the row kernel"
  for b in $batches; do
    for rows in 0 16; do
      json=$(WEFT_ROW_KERNEL_TOKENS=$rows "$weft" bench --num-requests "$b" --seed 1 "${big[@]}" \
               2>/dev/null | tail -n 1)
      python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(f"batch {sys.argv[2]:>3} row kernel tokens {sys.argv[3]:>2}: {d[\"output_tokens_per_s\"]:8.1f} out tok/s, TPOT p50 {d[\"tpot_ms_p50\"]:.2f} ms, digest {d[\"output_digest\"]}")' \
        "$json" "$b" "$rows"
    done
  done
fi
