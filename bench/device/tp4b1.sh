#!/usr/bin/env bash
# Device call on four GPUs (session of 2026-11-27, afternoon): batch-1 decode of the 8B shape
# with one-token steps through the small-step kernel under tensor parallelism (the new default)
# at TP=1, 2 and 4, the TP=4 tests, and the decode attention's smallest segment at batch 1.
#   1. cuda_tensor_parallel_test over four ranks;
#   2. cuda_forward_bench --shape 8b --batches 1 --context 512 (graph replay, best of 20):
#      TP=1 (cuBLAS, its default; and --small-step-kernel-tokens 1), TP=2, TP=4 (the new
#      default; and --small-step-kernel-tokens 0, cuBLAS as before); then
#      WEFT_DECODE_STREAM_SEGMENT_KEYS=64 and 128 (default 256) at TP=1 and TP=2;
#   3. weft bench, one request at a time (8 of 128 + 128 tokens), TP=1, 2 and 4.
# Input: .devcarry/sst/gpu.tar.xz (as smallstep_tp.sh), the Llama-3 tokenizer in .devcarry/l3.
#   run(kind="nvidia-h100-x4", carry=[".devcarry/sst", ".devcarry/l3"], command="bash bench/device/tp4b1.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-sst}"
mpi() {
  echo mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$1" -x LD_LIBRARY_PATH \
    -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR -x NCCL_NVLS_ENABLE -x WEFT_DECODE_STREAM_SEGMENT_KEYS
}
read -ra m2 <<<"$(mpi 2)"
read -ra m4 <<<"$(mpi 4)"
if [ "${TESTS:-1}" = 1 ]; then
  st "tests over four ranks"
  timeout 200 "${m4[@]}" $B/cuda_tensor_parallel_test --gtest_color=no >"$O/tpt4.log" 2>&1
  echo "tpt4 rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/tpt4.log" | sort -u | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$O/tpt4.log" | sort -u | head -8
fi
F=$B/cuda_forward_bench
fb() { # NAME ENV... -- COMMAND ARGS...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 150 "$@" --shape 8b --context 512 --prefill "" --repeats 20 --batches 1 \
    >"$O/$name.txt" 2>&1
  echo "$name rc=$?: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ' | head -3 | tr '\n' ';')"
}
if [ "${FWD:-1}" = 1 ]; then
  st "batch 1"
  fb tp1 X=1 -- $F
  fb tp1_ss1 X=1 -- $F --small-step-kernel-tokens 1
  fb tp2 X=1 -- "${m2[@]}" $F --tensor-parallel 2
  fb tp4 X=1 -- "${m4[@]}" $F --tensor-parallel 4
  fb tp4_cublas X=1 -- "${m4[@]}" $F --tensor-parallel 4 --small-step-kernel-tokens 0
  fb tp1_b X=1 -- $F
  for k in 64 128; do
    fb tp1_ss1_seg$k WEFT_DECODE_STREAM_SEGMENT_KEYS=$k -- $F --small-step-kernel-tokens 1
    fb tp2_seg$k WEFT_DECODE_STREAM_SEGMENT_KEYS=$k -- "${m2[@]}" $F --tensor-parallel 2
  done
  fb tp2_b X=1 -- "${m2[@]}" $F --tensor-parallel 2
fi
if [ "${ENG:-1}" = 1 ]; then
  . bench/device/model8b.sh
  st "model made"
  field() { echo "$2" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }
  w=(--model $M --device cuda --gpu-memory-fraction 0.85 --seed 1 --num-requests 8 --max-concurrency 1 --input-len 128 --output-len 128)
  for c in tp1 tp2 tp4; do
    case $c in
      tp1) l=(); a=() ;;
      tp2) l=("${m2[@]}"); a=(--tensor-parallel 2) ;;
      tp4) l=("${m4[@]}"); a=(--tensor-parallel 4) ;;
    esac
    st "$c"
    line=$(timeout 150 "${l[@]}" $B/weft bench "${w[@]}" "${a[@]}" 2>"$O/$c.err" | grep -v '^NCCL' | tail -1)
    echo "$c: tok/s $(field output_tokens_per_s "$line"), TPOT p50 $(field tpot_ms_p50 "$line") p99 $(field tpot_ms_p99 "$line"), TTFT p50 $(field ttft_ms_p50 "$line"), failed $(field failed "$line")"
    [ -n "$line" ] || tail -3 "$O/$c.err"
  done
fi
st end
