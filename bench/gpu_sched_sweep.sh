#!/usr/bin/env bash
# Scheduling for throughput (issue 19, item 3): `weft bench` on the ShareGPT-shaped workload
# (bench/make_sharegpt_workload.py) over a grid of --max-tokens-per-step and --max-running,
# offline (all requests at once: output tok/s) and optionally online (Poisson: TTFT p99), on
# a random Llama-3-8B-shaped bf16 folder (bench/make_random_model.py). One line per point;
# each run's JSON under $OUT (default build/gpu-sched-sweep).
#
#   bench/gpu_sched_sweep.sh --bin DIR [--model DIR] [--steps "512 2048 8192"]
#       [--running "256 512 1024"] [--requests 1000] [--rate 8] [--online-requests 400]
#       [--tokenizer DIR] [-- extra weft bench arguments]
#
# DIR holds weft (e.g. .devcarry/release/bin staged by scripts/gpu-check --stage, with its lib/
# beside it). --model defaults to /tmp/llama8b, made once from --tokenizer (default
# .devcarry/l3, the Llama-3 tokenizer; bench/gpu_8b.sh says how to stage it). --rate 0 skips
# the online runs. A point takes ~30-60 s on an H100 (1,000 requests): the device tool's
# 10-minute limit per call holds about 9 points, so split a larger grid over calls, e.g.
#   run(command="bash bench/gpu_sched_sweep.sh --bin .devcarry/release/bin --steps '512 2048' --rate 0",
#       carry=[".devcarry/release", ".devcarry/l3"])
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="" MODEL=/tmp/llama8b STEPS="512 2048 8192" RUNNING="256 512 1024" REQUESTS=1000
RATE=8 ONLINE=400 TOKENIZER=.devcarry/l3 EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --bin) BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --running) RUNNING=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --online-requests) ONLINE=$2; shift 2 ;;
    --tokenizer) TOKENIZER=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "gpu_sched_sweep.sh: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ] || [ ! -x "$BIN/weft" ]; then
  echo "gpu_sched_sweep.sh: --bin DIR must hold the weft binary (got '${BIN}')" >&2
  exit 2
fi
OUT=${OUT:-build/gpu-sched-sweep}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$BIN/../lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models
if [ ! -f "$MODEL/config.json" ]; then
  [ -f "$TOKENIZER/tokenizer.json" ] || gunzip -k "$TOKENIZER/tokenizer.json.gz"
  python3 bench/make_random_model.py --shape 8b --tokenizer "$TOKENIZER" --out "$MODEL" 2>&1 | tail -1
fi
W=$OUT/sharegpt_1000.jsonl
python3 bench/make_sharegpt_workload.py --out "$W" > "$OUT/workload.txt"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
summary() {  # json file, label
  python3 - "$1" "$2" <<'PY'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:  # a run that failed or timed out
    print("%-34s failed (%s)" % (sys.argv[2], e)); sys.exit(0)
print("%-34s %10.0f %11.1f %11.1f %9.2f %6d %6d %14s" % (
    sys.argv[2], d["output_tokens_per_s"], d["ttft_ms_p50"], d["ttft_ms_p99"], d["tpot_ms_p99"],
    d["steps"], d["preemptions"], "%d / %d" % (d["peak_kv_pages"], d["kv_pages_total"])))
PY
}
printf "%-34s %10s %11s %11s %9s %6s %6s %14s\n" run "out tok/s" "TTFT p50" "TTFT p99" "TPOT p99" steps preempt "peak KV pages"
for steps in $STEPS; do
  for running in $RUNNING; do
    name="offline_s${steps}_r${running}"
    timeout 300 "$BIN/weft" bench --model "$MODEL" --dataset "$W" --num-requests "$REQUESTS" \
      --gpu-memory-fraction 0.85 --max-tokens-per-step "$steps" --max-running "$running" \
      "${EXTRA[@]}" 2> "$OUT/$name.err" > "$OUT/$name.json"
    summary "$OUT/$name.json" "offline steps=$steps running=$running"
    if [ "$RATE" != 0 ]; then
      name="online${RATE}_s${steps}_r${running}"
      timeout 300 "$BIN/weft" bench --model "$MODEL" --dataset "$W" --num-requests "$ONLINE" \
        --request-rate "$RATE" --gpu-memory-fraction 0.85 --max-tokens-per-step "$steps" \
        --max-running "$running" "${EXTRA[@]}" 2> "$OUT/$name.err" > "$OUT/$name.json"
      summary "$OUT/$name.json" "rate $RATE steps=$steps running=$running"
    fi
  done
done
