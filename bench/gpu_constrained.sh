#!/usr/bin/env bash
# Constrained against unconstrained decoding end to end, as a user meets it (issue #21): the
# same requests run with a constraint and then without one, in the same call, on the 8b folder
# of bench/gpu_8b.sh (128K vocabulary). Each constrained run writes its requests' prompts and
# the number of tokens each produced (--write-dataset); the unconstrained run replays exactly
# that work (--dataset), so output tok/s, TTFT and ITL compare like for like even where a
# constrained output ends early. Formats: one schema for every request (schema), a different
# schema per request (schemas: the 75 of tests/tools/grammar/schemas, round robin), the same
# without jump-forward (schemas-nojf), and a regex. Batch 1 is 8 requests one at a time, batch
# 32 is 96 requests from 32 clients (--max-concurrency: each client sends its next request when
# its last one finished, so TTFT has no queueing in it). Order alternates per repetition (REPS,
# default 1; BATCHES="32" for one batch size).
# Afterwards, where carried beside weft: grammar_bench's mask times on this machine's CPU, and
# constrained_step_bench (the step loop's host cost on a simulated device, this machine's CPU).
#
# Here:  scripts/gpu-check --stage; Llama-3 tokenizer into .devcarry/l3 (see bench/gpu_8b.sh);
#        optionally cp build/cuda/bin/{grammar_bench,constrained_step_bench} .devcarry/gpu/bin/
# There: run(command="bash bench/gpu_constrained.sh", carry=[".devcarry/gpu", ".devcarry/l3"])
#        bash bench/gpu_constrained.sh --bin DIR   # weft (and the benches) from DIR, their
#                                                  # libraries from DIR/../lib
# Results: $OUT/constrained_runs.jsonl (every run's JSON) and $OUT/constrained_table.md.
set -u
cd "$(dirname "$0")/.."
C=${WEFT_CARRY:-.devcarry/gpu}
B=$C/bin
while [ $# -gt 0 ]; do
  case $1 in
    --bin) B=${2:?--bin needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu_constrained.sh: unknown argument $1 (--bin DIR, --help)" >&2; exit 2 ;;
  esac
done
[ -x "$B/weft" ] || { echo "gpu_constrained.sh: no weft binary at $B/weft (--bin DIR)" >&2; exit 1; }
B=$(cd "$B" && pwd)
OUT=${OUT:-build/gpu-constrained}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/../lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models
M=${MODEL_DIR:-/tmp/llama8b}
REPS=${REPS:-1}
OUTPUT_LEN=${OUTPUT_LEN:-128}
if [ ! -f "$M/config.json" ]; then
  [ -f .devcarry/l3/tokenizer.json ] || gunzip -k .devcarry/l3/tokenizer.json.gz
  python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out "$M" 2>&1 | tail -1
fi
RUNS=$OUT/constrained_runs.jsonl
: > "$RUNS"
R="[a-zA-Z ,.;:'!?-]*"
bench() {  # TAG ARGS...: one weft bench run, its JSON line tagged into $RUNS
  local tag=$1; shift
  local line
  line=$(timeout 120 "$B/weft" bench --model "$M" --kv-budget-mb 4096 "$@" 2>>"$OUT/constrained.err" | tail -1)
  echo "$tag $line" | cut -c1-200
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["tag"]=sys.argv[1]; print(json.dumps(d))' \
    "$tag" "$line" >> "$RUNS" || echo "run $tag gave no JSON"
}
for rep in $(seq 1 "$REPS"); do
  for b in ${BATCHES:-1 32}; do
    if [ $b = 1 ]; then A=(--num-requests 8 --max-concurrency 1); else A=(--num-requests 96 --max-concurrency 32); fi
    for f in schema schemas schemas-nojf regex; do
      case $f in
        schema) F=(--json-schema tests/tools/grammar/schemas/44_order_document.json) ;;
        schemas) F=(--json-schema-dir tests/tools/grammar/schemas) ;;
        schemas-nojf) F=(--json-schema-dir tests/tools/grammar/schemas --no-jump-forward) ;;
        regex) F=(--regex "$R") ;;
      esac
      data=$OUT/work_b${b}_$f.jsonl
      constrained() { bench "b$b $f constrained" "${A[@]}" --input-len 32 --output-len "$OUTPUT_LEN" --seed 1 "${F[@]}" --write-dataset "$data"; }
      replay() { bench "b$b $f unconstrained" "${A[@]}" --dataset "$data"; }
      if [ $((rep % 2)) = 1 ]; then constrained; replay; else replay; constrained; fi
    done
  done
done
python3 - "$RUNS" > "$OUT/constrained_table.md" <<'PY'
import json, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    runs[d["tag"]].append(d)
mean = lambda xs: sum(xs) / len(xs)
print("| batch | format | out tok/s constrained | unconstrained | ratio | TTFT p50 ms c / u | diff | ITL p50 ms c / u | stop | forced |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for tag in runs:
    if not tag.endswith(" constrained"): continue
    c, u = runs[tag], runs.get(tag.replace(" constrained", " unconstrained"), [])
    if not u: continue
    b, f = tag.split()[:2]
    tc, tu = mean([r["output_tokens_per_s"] for r in c]), mean([r["output_tokens_per_s"] for r in u])
    fc, fu = mean([r["ttft_ms_p50"] for r in c]), mean([r["ttft_ms_p50"] for r in u])
    ic, iu = mean([r["itl_ms_p50"] for r in c]), mean([r["itl_ms_p50"] for r in u])
    print(f"| {b[1:]} | {f} | {tc:.1f} | {tu:.1f} | {tc / tu:.3f} | {fc:.1f} / {fu:.1f} | {fc - fu:+.1f} | {ic:.2f} / {iu:.2f} | {c[-1]['finished_stop']} | {c[-1]['jump_forward_tokens']} |")
PY
cat "$OUT/constrained_table.md"
TOK=$M/tokenizer.json
[ -f "$TOK" ] || TOK=.devcarry/l3/tokenizer.json
if [ -x "$B/grammar_bench" ]; then
  PIN=(); [ "$(nproc)" -gt 2 ] && PIN=(taskset -c 2)  # one core of its own where there is one
  "${PIN[@]}" "$B/grammar_bench" "$TOK" 20 > "$OUT/grammar_bench.txt" 2>&1
  tail -25 "$OUT/grammar_bench.txt"
fi
if [ -x "$B/constrained_step_bench" ]; then
  # The device's idle time per step the host causes (gap before each launch), constrained
  # against the same work unconstrained, with a 7 ms simulated forward pass.
  for f in schema regex; do
    case $f in
      schema) F=(--schema tests/tools/grammar/schemas/44_order_document.json) ;;
      regex) F=(--regex "$R") ;;
    esac
    "$B/constrained_step_bench" --tokenizer "$(dirname "$TOK")" "${F[@]}" --batch 32 --requests 96 \
      --reps 2 --work "$OUT/step-bench-model" 2>/dev/null | grep -v "^\[" | sed "s/^/$f: /"
  done | tee "$OUT/constrained_step.txt"
fi
