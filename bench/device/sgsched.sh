#!/usr/bin/env bash
# Device call (session of 2026-11-26, branch sgsched): what the scheduler simulation predicts
# (docs/engine.md, "How fast can this workload go"), checked on one H100 with the random 8B
# folder and the ShareGPT-shaped workload (bench/make_sharegpt_workload.py --seed 0), offline:
#   1. defaults, the workload in file order (the baseline: 6,570 tok/s on main at 5a39b3f)
#   2. defaults, the same requests sorted by output length, longest first (what a longest-first
#      admission would do; the simulation predicts 1,666 steps instead of ~2,150 and +15-18%)
#   3. defaults with --prefix-cache off (the cache's eviction cost the scheduler 1.9 ms a step
#      on the 2-core VM before this branch; with the branch's fix 1 and 3 should agree)
#   4. online at 8 requests/s, 400 requests (TTFT p99; 43.7 ms on main)
#   5. (binaries with --schedule-policy) defaults with --schedule-policy lof, the file's order:
#      the scheduler queues by max_tokens itself, as 2. does by sorting the file
# Each run also writes its step trace ($OUT/NAME.steps.jsonl, weft bench --step-trace) and
# bench/step_trace_summary.py says whether the engine admitted the requests in the file's order
# and when the longest ones started (2026-11-26, branch simlong: before weft bench handed
# offline requests over in file order, both offline files reached the scheduler mostly
# reversed; docs/PERFORMANCE.md, "Why the longest-first file took 2,160 steps"). Binaries
# without --step-trace (older than simlong) run without it.
# Input: weft in $WEFT_CARRY/bin (+ lib/), e.g. WEFT_CARRY=.devcarry/sgs scripts/gpu-check --stage
# on this branch (and the same with main's checkout for an A/B), the Llama-3 tokenizer in
# .devcarry/l3 (bench/gpu_8b.sh). About 5 minutes with the model folder made in the call.
#   run(command="WEFT_CARRY=.devcarry/sgs bash bench/device/sgsched.sh", carry=[".devcarry/sgs", ".devcarry/l3"])
# RUNS="offline_file offline_lof online_rate8" makes only those; AFTER="..." runs a command
# after them (the session of 2026-11-26, late morning: AFTER="bash bench/device/fuzz_long.sh
# 260 --targets gguf:16", the fuzz binaries in .devcarry/fuzz).
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
C=${WEFT_CARRY:-.devcarry/sgs}
[ -f "$C/gpu.tar.xz" ] && [ ! -x "$C/bin/weft" ] && tar -C "$C" -xJf "$C/gpu.tar.xz"
export LD_LIBRARY_PATH=$PWD/$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models
M=${MODEL_DIR:-/tmp/llama8b}
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
[ -f "$M/config.json" ] || python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out "$M" 2>&1 | tail -1
W=$O/sg.jsonl
python3 bench/make_sharegpt_workload.py --out "$W"
python3 - "$W" "$O/sg_longest.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows.sort(key=lambda r: -r["output_len"])  # stable: ties keep file order
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
python3 bench/sharegpt_bound.py "$W" --steps 1666 | tail -6
st "model and workloads ready"
TRACE=0; "$C/bin/weft" bench --help 2>&1 | grep -q -- --step-trace && TRACE=1
run_bench() {  # name, then weft bench arguments
  local name=$1; shift
  local trace=(); [ "$TRACE" = 1 ] && trace=(--step-trace "$O/$name.steps.jsonl")
  timeout 200 "$C/bin/weft" bench --model "$M" --gpu-memory-fraction 0.85 "$@" "${trace[@]}" \
    2> "$O/$name.err" > "$O/$name.json"
  python3 - "$O/$name.json" "$name" <<'PY'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:
    print("%-24s failed (%s)" % (sys.argv[2], e)); sys.exit(0)
print("%-24s %9.0f out tok/s  steps %5d  TTFT p50/p99 %8.1f / %8.1f ms  TPOT p50/p99 %6.2f / %6.2f ms  peak KV %d / %d" % (
    sys.argv[2], d["output_tokens_per_s"], d["steps"], d["ttft_ms_p50"], d["ttft_ms_p99"],
    d["tpot_ms_p50"], d["tpot_ms_p99"], d["peak_kv_pages"], d["kv_pages_total"]))
PY
  if [ "$TRACE" = 1 ]; then  # the workload file is the argument after --dataset
    local w=""; local prev=""; for a in "$@"; do [ "$prev" = --dataset ] && w=$a; prev=$a; done
    python3 bench/step_trace_summary.py "$O/$name.steps.jsonl" --workload "$w" | sed 's/^/    /'
    xz -9 "$O/$name.steps.jsonl"
  fi
  st "$name done"
}
# RUNS: the runs to make, by name (default all five).
want_run() { case " ${RUNS:-offline_file offline_longest offline_no_cache offline_lof online_rate8} " in *" $1 "*) return 0 ;; esac; return 1; }
want_run offline_file && run_bench offline_file --dataset "$W"
want_run offline_longest && run_bench offline_longest --dataset "$O/sg_longest.jsonl"
want_run offline_no_cache && run_bench offline_no_cache --dataset "$W" --prefix-cache off
# The scheduler ordering the file's requests itself, longest output first (branch simlong;
# predicted 1,667 steps, as the sorted file's 1,666 plus the first request's step).
want_run offline_lof && "$C/bin/weft" bench --help 2>&1 | grep -q -- --schedule-policy &&
  run_bench offline_lof --dataset "$W" --schedule-policy lof
want_run online_rate8 && run_bench online_rate8 --dataset "$W" --request-rate 8 --num-requests 400
# AFTER="command": run after the benchmarks, in this call (e.g. a fuzz run on the host's cores,
# which must not share them with the engine's scheduler while it is timed).
if [ -n "${AFTER:-}" ]; then
  st "after: $AFTER"
  bash -c "$AFTER"
fi
