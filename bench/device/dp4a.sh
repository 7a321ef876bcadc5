#!/usr/bin/env bash
# Device call on one GPU (issue #16's batch-1 goal): the dp4a quantized product (q4 at 1-2
# tokens with x rounded to 8-bit integers per 32 inputs, quant_gemv_dp4a.cu) against the lanes
# kernel, in the same call:
#   1. kernels_test '*CudaQuant*' (every kernel, dp4a's rounding bound);
#   2. cuda_quant_gemv_bench --tokens 1 --kernels lanes,dp4a --formats q4_b32,q4_b64;
#   3. cuda_forward_bench --shape 8b --batches 1 --prefill "": bf16, then q4_b32 and q4_b64 with
#      WEFT_QUANT_GEMV=lanes and with the default (dp4a), two alternating rounds.
# Input: .devcarry/dp4a (bin/{kernels_test,cuda_quant_gemv_bench,cuda_forward_bench}).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/dp4a"], command="bash bench/device/dp4a.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-dp4a}"
. bench/device/fwdruns.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 200 "$B/kernels_test" --gtest_color=no --gtest_filter='*CudaQuant*' >"$O/kt.log" 2>&1
  echo "kernels_test quant: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|Expected|Which is|tokens=" "$O/kt.log" | head -12
fi
st "products"
timeout 120 "$B/cuda_quant_gemv_bench" --tokens 1 --kernels lanes,dp4a --formats q4_b32,q4_b64 \
  >"$O/qg.txt" 2>&1
grep -vE "^\s*$" "$O/qg.txt" | tail -40
st "steps"
fb bf16 -- "$F" --batches 1
for round in 1 2; do
  for q in q4_b32 q4_b64; do
    fb "${q}_lanes_$round" WEFT_QUANT_GEMV=lanes -- "$F" --batches 1 --quantize "$q"
    fb "${q}_dp4a_$round" -- "$F" --batches 1 --quantize "$q"
  done
done
st "done"
