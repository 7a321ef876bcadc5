#!/usr/bin/env bash
# Device call on four GPUs (session of 2026-11-26, afternoon; issue #20's Table 5): weft bench
# end to end on the random 8B folder under every layout four GPUs allow, the same two loads
# each: one GPU, TP=2, TP=4, PP=2, the hybrid TP=2 x PP=2 (a pipeline of two tensor-parallel
# pairs, one rank per GPU), then (experimental on GPUs, last, short limit) sequence groups in
# flight for the pipelines (--pp-groups 2, WEFT_PP_GROUPS_GPU=1).
#   loads: b1  = 8 requests one at a time, 128 in / 128 out (batch-1 latency: TPOT)
#          b64 = 256 requests, 64 at a time, 512 in / 128 out (throughput: output tok/s)
# Input: .devcarry/t5/gpu.tar.xz (bin/weft, lib/) and the Llama-3 tokenizer in .devcarry/l3.
#   run(kind="nvidia-h100-x4", carry=[".devcarry/t5", ".devcarry/l3"],
#       command="bash bench/device/table5.sh")
# CONFIGS picks configurations (default: tp1 tp2 tp4 pp2 tp2pp2 pp2g2 tp2pp2g2); BUDGET_S stops
# starting runs after that many seconds (default 520).
set -u
start=$(date +%s)
BUDGET_S=${BUDGET_S:-520}
CONFIGS=${CONFIGS:-"tp1 tp2 tp4 pp2 tp2pp2 pp2g2 tp2pp2g2"}
. bench/device/carry.sh t5
W=$d/bin/weft
export WEFT_PP_TRANSPORT=nccl
mpi() { echo mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$1" -x LD_LIBRARY_PATH \
  -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE -x WEFT_PP_TRANSPORT -x WEFT_PP_GROUPS_GPU; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$O/gpus.txt"
TOK=.devcarry/l3
[ -f $TOK/tokenizer.json ] || xz -dk $TOK/tokenizer.json.xz
M=/tmp/llama8b
if [ ! -f $M/config.json ]; then
  s=$(date +%s)
  python3 bench/make_random_model.py --shape 8b --tokenizer $TOK --out $M 2>&1 | tail -1
  echo "model made in $(( $(date +%s) - s )) s"
fi
field() { echo "$2" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }
RUNS=$O/table5_runs.jsonl; : > "$RUNS"
for c in $CONFIGS; do
  case $c in
    tp1) np=1; a=() ;;
    tp2) np=2; a=(--tensor-parallel 2) ;;
    tp4) np=4; a=(--tensor-parallel 4) ;;
    pp2) np=2; a=(--pipeline-parallel 2) ;;
    tp2pp2) np=4; a=(--tensor-parallel 2 --pipeline-parallel 2) ;;
    pp2g2) np=2; a=(--pipeline-parallel 2 --pp-groups 2) ;;
    tp2pp2g2) np=4; a=(--tensor-parallel 2 --pipeline-parallel 2 --pp-groups 2) ;;
    *) echo "unknown config $c"; continue ;;
  esac
  limit=240; export WEFT_PP_GROUPS_GPU=0
  case $c in *g2) limit=100; export WEFT_PP_GROUPS_GPU=1 ;; esac
  for load in b1 b64; do
    [ $(( $(date +%s) - start )) -lt "$BUDGET_S" ] || { echo "budget: $c $load not run"; continue; }
    [ $load = b1 ] && case $c in *g2) continue ;; esac   # groups are for throughput
    if [ $load = b1 ]; then w=(--num-requests 8 --max-concurrency 1 --input-len 128 --output-len 128)
    else w=(--num-requests 256 --max-concurrency 64 --input-len 512 --output-len 128); fi
    launch=(); [ $np -gt 1 ] && read -ra launch <<<"$(mpi $np)"
    s=$(date +%s)
    line=$(timeout $limit "${launch[@]}" $W bench --model $M --device cuda --gpu-memory-fraction 0.85 \
      --seed 1 "${w[@]}" "${a[@]}" 2>"$O/${c}_$load.err" | grep -v '^NCCL version' | tail -1)
    rc=$?
    echo "$c $load ($(( $(date +%s) - s )) s): tok/s $(field output_tokens_per_s "$line"), TPOT p50 $(field tpot_ms_p50 "$line") ms, TTFT p50 $(field ttft_ms_p50 "$line") ms, failed $(field failed "$line")"
    python3 -c 'import json,sys; d=json.loads(sys.argv[3]); d.update(config=sys.argv[1], load=sys.argv[2]); print(json.dumps(d))' \
      "$c" "$load" "$line" >> "$RUNS" 2>/dev/null || { echo "  no JSON; stderr:"; tail -3 "$O/${c}_$load.err"; }
  done
done
python3 - "$RUNS" <<'PY' | tee "$O/table5.md"
import json, sys
runs = {}
for l in open(sys.argv[1]):
    d = json.loads(l); runs[(d["config"], d["load"])] = d
gpus = {"tp1": 1, "tp2": 2, "tp4": 4, "pp2": 2, "tp2pp2": 4, "pp2g2": 2, "tp2pp2g2": 4}
print("| layout | GPUs | batch 1: TPOT p50 ms (x 1 GPU) | batch 64: output tok/s (x 1 GPU, per GPU) |")
print("| --- | ---: | ---: | ---: |")
b1 = runs.get(("tp1", "b1"), {}).get("tpot_ms_p50"); b64 = runs.get(("tp1", "b64"), {}).get("output_tokens_per_s")
for c in gpus:
    r1, r64 = runs.get((c, "b1")), runs.get((c, "b64"))
    if not r1 and not r64: continue
    s1 = f'{r1["tpot_ms_p50"]:.2f} ({b1 / r1["tpot_ms_p50"]:.2f}x)' if r1 and b1 else ""
    s64 = f'{r64["output_tokens_per_s"]:,.0f} ({r64["output_tokens_per_s"] / b64:.2f}x, {r64["output_tokens_per_s"] / b64 / gpus[c]:.0%})' if r64 and b64 else ""
    print(f"| {c} | {gpus[c]} | {s1} | {s64} |")
PY
echo "done in $(( $(date +%s) - start )) s"
