#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-26, evening): pipeline sequence groups after the
# hang fix, in longer runs than ppgroups.sh's (so the pipeline's first-step warm-up weighs
# less): the random 8B folder, 256 requests of 512 input and 128 output tokens, 64 at a time
# (table5.sh's batch-64 shape), one GPU against PP=2 over NCCL with one step at a time
# (--pp-groups 1) and with two groups in flight (--pp-groups 2), then two groups at 128 at a
# time. Input: .devcarry/ppg/gpu.tar.xz (bin/weft), .devcarry/l3 (Llama-3 tokenizer).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/ppg", ".devcarry/l3"], command="bash bench/device/pplong.sh")
set -u
. bench/device/carry.sh ppg
export WEFT_PP_TRANSPORT=nccl WEFT_PP_GROUPS_GPU=1
MPI2=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH -x WEFT_SPEC_DIR
  -x NCCL_NVLS_ENABLE -x WEFT_PP_TRANSPORT -x WEFT_PP_GROUPS_GPU)
TOK=.devcarry/l3; [ -f $TOK/tokenizer.json ] || xz -dk $TOK/tokenizer.json.xz
M=/tmp/llama8b
[ -f $M/config.json ] || python3 bench/make_random_model.py --shape 8b --tokenizer $TOK --out $M 2>&1 | tail -1
A=(bench --model $M --device cuda --gpu-memory-fraction 0.85 --seed 1 --input-len 512 --output-len 128)
row() {  # TAG CONCURRENCY LAUNCH... -- ARGS...
  local tag=$1 c=$2; shift 2; local launch=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done; shift
  local s=$(date +%s)
  local line=$(timeout ${RUN_TIMEOUT:-150} "${launch[@]}" $d/bin/weft "${A[@]}" --num-requests $((4 * c)) \
    --max-concurrency $c "$@" 2>>/tmp/ppl.err | tail -1)
  python3 - "$tag" "$c" "$line" "$(( $(date +%s) - s ))" <<'PY'
import json, sys
tag, c, line, secs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
try:
    d = json.loads(line)
except Exception:
    print(f"| {tag} | {c} | no result ({secs} s) | | | | |"); sys.exit()
print(f"| {tag} | {c} | {d['output_tokens_per_s']:.0f} | {d['tpot_ms_p50']:.2f} | {d['ttft_ms_p50']:.0f} | {d.get('steps_in_flight_peak', 0)} | {d['failed']} |")
PY
}
echo "| run | concurrency | output tok/s | TPOT p50 ms | TTFT p50 ms | steps in flight | failed |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
row "one GPU" 64 --
row "PP=2, one step at a time" 64 "${MPI2[@]}" -- --pipeline-parallel 2 --pp-groups 1
row "PP=2, two groups" 64 "${MPI2[@]}" -- --pipeline-parallel 2 --pp-groups 2
row "PP=2, two groups" 128 "${MPI2[@]}" -- --pipeline-parallel 2 --pp-groups 2
row "one GPU" 128 --
tail -3 /tmp/ppl.err
