#!/usr/bin/env bash
# Device call on one GPU (issue #16, branch dp4around): steps of 3-8 tokens through the dp4a
# product on x rounded once per product (quant_round_inputs + quant_gemv_dp4a_rounded;
# WEFT_QUANT_DP4A_ROUNDED=0: the stream kernel, as before):
#   1. kernels_test: the q4 product cases, each token of a 3-, 5- and 8-token product on rounded
#      inputs bitwise its 1-token dp4a product (plain and gated), the kernel choice;
#   2. cuda_forward_bench, 8B shape, context 512, best of 20, batches 1, 2, 4, 8: bf16, and
#      q4_b64 and q4_b32 with and without the rounded inputs, alternating.
# Input: .devcarry/$CARRY (bin/{kernels_test,cuda_forward_bench}, default dr).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/dr"], command="bash bench/device/dp4around.sh")
set -u
. bench/device/carry.sh "${CARRY:-dr}"
. bench/device/fwdruns.sh
timeout 200 "$B/kernels_test" --gtest_color=no \
  --gtest_filter='*CudaQuant*q4*:*Dp4a*:*KernelChoice*' >"$O/kt.log" 2>&1
echo "kernels_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is" "$O/kt.log" | head -12
b=(--batches 1,2,4,8)
fb bf16 -- "$F" "${b[@]}"
for round in 1 2; do
  fb "q4_b64_rounded_$round" -- "$F" "${b[@]}" --quantize q4_b64
  fb "q4_b64_stream_$round" WEFT_QUANT_DP4A_ROUNDED=0 -- "$F" "${b[@]}" --quantize q4_b64
done
fb q4_b32_rounded -- "$F" "${b[@]}" --quantize q4_b32
fb q4_b32_stream WEFT_QUANT_DP4A_ROUNDED=0 -- "$F" "${b[@]}" --quantize q4_b32
