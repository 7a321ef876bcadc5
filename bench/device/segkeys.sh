#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-27, afternoon): the streaming decode attention's
# smallest segment (WEFT_DECODE_STREAM_SEGMENT_KEYS, default 256) at 64 against 256 over
# batches 1, 64 and 256 at contexts 512 and 2048 (cuda_forward_bench, 8B shape, graph replay,
# best of 20; alternating), after the decode attention tests with 64.
# Input: .devcarry/sst/gpu.tar.xz (as smallstep_tp.sh).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/sst"], command="bash bench/device/segkeys.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-sst}"
WEFT_DECODE_STREAM_SEGMENT_KEYS=64 timeout 120 $B/kernels_test --gtest_color=no \
  --gtest_filter='*DecodeAttention*' >"$O/kt64.log" 2>&1
echo "kernels_test *DecodeAttention* with 64: $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt64.log" | tr '\n' ' ')"
grep -E "^\[  FAILED" "$O/kt64.log" | head -5
for ctx in 512 2048; do
  for seg in 256 64 256 64; do
    WEFT_DECODE_STREAM_SEGMENT_KEYS=$seg timeout 120 $B/cuda_forward_bench --shape 8b --context $ctx \
      --batches $([ $ctx = 512 ] && echo 1,64,256 || echo 1,64,128) --prefill "" --repeats 20 >"$O/c${ctx}_s$seg.txt" 2>&1
    echo "context $ctx segment $seg rc=$?: $(grep -E '^decode' "$O/c${ctx}_s$seg.txt" | tr -s ' ' | cut -d' ' -f1-5 | tr '\n' ';')"
  done
done
st end
