#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, evening): the ShareGPT-shaped workload
# (bench/make_sharegpt_workload.py --seed 0) offline on the random 8B folder with
# --schedule-policy lof, step by step (--step-trace: each step's plan time, rows and keys, so
# step durations can be set against the forward bench's graph times), then variants: the
# streaming decode attention with 2-stage rings (WEFT_DECODE_STREAM_STAGES=2), and int8 / fp8
# KV pages. Input: .devcarry/sgd/gpu.tar.xz (bin/weft, lib/), .devcarry/l3 (Llama-3 tokenizer).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/sgd", ".devcarry/l3"], command="bash bench/device/sgdiag.sh")
# RUNS (default "lof stages2 int8 fp8"; also lof_again, fp8_again). Only the trace is written
# under $OUT (the device returns few files).
set -u
start=$(date +%s)
. bench/device/carry.sh sgd
TOK=.devcarry/l3; [ -f $TOK/tokenizer.json ] || xz -dk $TOK/tokenizer.json.xz
M=/tmp/llama8b
[ -f $M/config.json ] || python3 bench/make_random_model.py --shape 8b --tokenizer $TOK --out $M 2>&1 | tail -1
python3 bench/make_sharegpt_workload.py --seed 0 --out /tmp/sg.jsonl > /dev/null 2>&1 || python3 bench/make_sharegpt_workload.py --seed 0 > /tmp/sg.jsonl
echo "setup $(( $(date +%s) - start )) s"
for r in ${RUNS:-lof stages2 int8 fp8}; do
  a=(--schedule-policy lof); e=()
  case $r in
    lof) a+=(--step-trace "$O/trace_lof.jsonl") ;;
    stages2) e=(env WEFT_DECODE_STREAM_STAGES=2) ;;
    int8|fp8) a+=(--kv-cache-dtype $r) ;;
    lof_again) ;;
    fp8_again) a+=(--kv-cache-dtype fp8) ;;
  esac
  s=$(date +%s)
  timeout 200 "${e[@]}" $d/bin/weft bench --model $M --gpu-memory-fraction 0.85 --dataset /tmp/sg.jsonl \
    "${a[@]}" > /tmp/$r.txt 2> /tmp/$r.err
  echo "== $r rc=$? ($(( $(date +%s) - s )) s)"
  tail -1 /tmp/$r.txt > /tmp/$r.json
  python3 - /tmp/$r.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d.get("step_phases", {})
print(f'tok/s {d["output_tokens_per_s"]:.0f}, steps {d.get("steps")}, digest {d.get("output_digest")}, '
      f'TTFT p50/p99 {d.get("ttft_ms_p50")}/{d.get("ttft_ms_p99")} ms, TPOT p50/p99 {d.get("tpot_ms_p50")}/{d.get("tpot_ms_p99")} ms')
print("per step us: " + ", ".join(f"{k} {v:.0f}" for k, v in p.get("per_step_us", {}).items()))
PY
done
[ -f "$O/trace_lof.jsonl" ] && xz -9 "$O/trace_lof.jsonl"
echo "done in $(( $(date +%s) - start )) s"
