#!/usr/bin/env bash
# Device call on one GPU (issue #16, branch dp4a8): the dp4a product at 3-8 tokens (its 8-token
# kernel; WEFT_QUANT_GEMV=dp4a takes it there, auto keeps stream):
#   1. kernels_test: the q4 product cases through every kernel, dp4a's rounding bound at 1-8
#      tokens, each token of a 3-, 5- and 8-token dp4a product bitwise its 1-token product;
#   2. cuda_forward_bench, 8B shape, context 512, best of 20, batches 1, 2, 4, 8: bf16, q4_b64 and
#      q4_b32 with the defaults (stream at 3-8 tokens) and with dp4a at every step size.
# Input: .devcarry/$CARRY (bin/{kernels_test,cuda_forward_bench}, default d8).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/d8"], command="bash bench/device/dp4a8.sh")
set -u
. bench/device/carry.sh "${CARRY:-d8}"
. bench/device/fwdruns.sh
timeout 200 "$B/kernels_test" --gtest_color=no \
  --gtest_filter='*CudaQuant*q4*:*Dp4a*:*KernelChoice*' >"$O/kt.log" 2>&1
echo "kernels_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is" "$O/kt.log" | head -12
b=(--batches 1,2,4,8)
fb bf16 -- "$F" "${b[@]}"
for f in q4_b64 q4_b32; do
  fb "${f}_auto" -- "$F" "${b[@]}" --quantize $f
  fb "${f}_dp4a" WEFT_QUANT_GEMV=dp4a -- "$F" "${b[@]}" --quantize $f
done
fb q4_b64_auto_2 -- "$F" "${b[@]}" --quantize q4_b64
fb q4_b64_dp4a_2 WEFT_QUANT_GEMV=dp4a -- "$F" "${b[@]}" --quantize q4_b64
