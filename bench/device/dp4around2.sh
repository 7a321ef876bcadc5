#!/usr/bin/env bash
# Device call on one GPU (issue #16, branch dp4around, after dp4around.sh): the rounded-input
# dp4a product from 5 tokens on, in the model:
#   1. model_cuda_test: weft-tiny in every format against the CPU model (its 5-token step goes
#      through the rounded product for q4), the CudaModel cases, the fixtures' references;
#   2. cuda_forward_bench, 8B shape, context 512, best of 20, batches 4, 5, 8: q4_b64 with and
#      without (WEFT_QUANT_DP4A_ROUNDED=0) the rounded inputs.
# Input: .devcarry/$CARRY (bin/{model_cuda_test,cuda_forward_bench}, default dr2).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/dr2"], command="bash bench/device/dp4around2.sh")
set -u
. bench/device/carry.sh "${CARRY:-dr2}"
. bench/device/fwdruns.sh
timeout 200 "$B/model_cuda_test" --gtest_color=no \
  --gtest_filter='*Quantiz*:CudaModel.*:*CudaReference*' >"$O/mt.log" 2>&1
echo "model_cuda_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/mt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|q4_b" "$O/mt.log" | head -8
b=(--batches 4,5,8)
fb q4_b64_rounded -- "$F" "${b[@]}" --quantize q4_b64
fb q4_b64_stream WEFT_QUANT_DP4A_ROUNDED=0 -- "$F" "${b[@]}" --quantize q4_b64
