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
. bench/device/fwdruns.sh
MPI_VARS=WEFT_DECODE_STREAM_SEGMENT_KEYS
read -ra m2 <<<"$(mpi_np 2)"
read -ra m4 <<<"$(mpi_np 4)"
if [ "${TESTS:-1}" = 1 ]; then
  st "tests over four ranks"
  timeout 200 "${m4[@]}" $B/cuda_tensor_parallel_test --gtest_color=no >"$O/tpt4.log" 2>&1
  echo "tpt4 rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/tpt4.log" | sort -u | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$O/tpt4.log" | sort -u | head -8
fi
if [ "${FWD:-1}" = 1 ]; then
  st "batch 1"
  fb tp1 -- "$F" --batches 1
  fb tp1_ss1 -- "$F" --batches 1 --small-step-kernel-tokens 1
  fb tp2 -- "${m2[@]}" "$F" --tensor-parallel 2 --batches 1
  fb tp4 -- "${m4[@]}" "$F" --tensor-parallel 4 --batches 1
  fb tp4_cublas -- "${m4[@]}" "$F" --tensor-parallel 4 --batches 1 --small-step-kernel-tokens 0
  fb tp1_b -- "$F" --batches 1
  for k in 64 128; do
    fb tp1_ss1_seg$k WEFT_DECODE_STREAM_SEGMENT_KEYS=$k -- "$F" --batches 1 --small-step-kernel-tokens 1
    fb tp2_seg$k WEFT_DECODE_STREAM_SEGMENT_KEYS=$k -- "${m2[@]}" "$F" --tensor-parallel 2 --batches 1
  done
  fb tp2_b -- "${m2[@]}" "$F" --tensor-parallel 2 --batches 1
fi
if [ "${ENG:-1}" = 1 ]; then
  st "engine, one request at a time"
  engine_b1 tp1 tp2 tp4
fi
st end
