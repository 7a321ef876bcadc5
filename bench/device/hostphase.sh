#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, afternoon; branch hoststep): where a serving
# step's host time goes, and what reading the detokenizer's reply while the next step runs
# gains. executor_cuda_test (the engine on the CUDA model, overlap on by default), then the
# ShareGPT-shaped workload (bench/make_sharegpt_workload.py --seed 0, 1,000 requests) on the
# random 8B folder, offline, --schedule-policy lof, with --overlap-steps off and on
# (interleaved), and the default fcfs order with overlap on: output tok/s, steps, the output
# digest (must not change) and weft bench's step_phases (µs per step).
# Input: .devcarry/hs/gpu.tar.xz (bin/{weft,executor_cuda_test}, lib/), .devcarry/l3.
#   run(kind="nvidia-h100-x1", carry=[".devcarry/hs", ".devcarry/l3"], command="bash bench/device/hostphase.sh")
# RUNS (default "lof_off lof_on fcfs_on").
set -u
start=$(date +%s)
. bench/device/carry.sh hs
if [ -x $d/bin/executor_cuda_test ]; then
  timeout 120 $d/bin/executor_cuda_test --gtest_color=no > "$O/executor_cuda_test.log" 2>&1
  echo "executor_cuda_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/executor_cuda_test.log" | tr '\n' ' ')"
fi
TOK=.devcarry/l3; [ -f $TOK/tokenizer.json ] || xz -dk $TOK/tokenizer.json.xz
M=/tmp/llama8b
[ -f $M/config.json ] || python3 bench/make_random_model.py --shape 8b --tokenizer $TOK --out $M 2>&1 | tail -1
python3 bench/make_sharegpt_workload.py --seed 0 --out /tmp/sg.jsonl > /dev/null 2>&1 || python3 bench/make_sharegpt_workload.py --seed 0 > /tmp/sg.jsonl
wc -l < /tmp/sg.jsonl
for r in ${RUNS:-lof_off lof_on fcfs_on}; do
  case $r in
    lof_off) a=(--schedule-policy lof --overlap-steps off) ;;
    lof_on) a=(--schedule-policy lof --overlap-steps on) ;;
    fcfs_on) a=(--overlap-steps on) ;;
    fcfs_off) a=(--overlap-steps off) ;;
  esac
  s=$(date +%s)
  timeout 200 $d/bin/weft bench --model $M --gpu-memory-fraction 0.85 --dataset /tmp/sg.jsonl "${a[@]}" \
    > "$O/$r.txt" 2> "$O/$r.err"
  echo "== $r rc=$? ($(( $(date +%s) - s )) s)"
  grep -E "^(requests|output|step phases|TTFT|TPOT)" "$O/$r.txt" | head -6
  tail -1 "$O/$r.txt" > "$O/$r.json"
  python3 - "$O/$r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d.get("step_phases", {})
print(f'tok/s {d["output_tokens_per_s"]:.0f}, steps {d.get("steps")}, digest {d.get("output_digest")}, overlapped {p.get("overlapped_steps")}, dropped {p.get("dropped_tokens")}')
print("per step us: " + ", ".join(f"{k} {v:.0f}" for k, v in p.get("per_step_us", {}).items()))
PY
done
echo "done in $(( $(date +%s) - start )) s"
