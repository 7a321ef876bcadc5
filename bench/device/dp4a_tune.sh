#!/usr/bin/env bash
# Device call on one GPU (issue #16): with the dp4a product (rounded inputs, the default at 1-2
# q4 tokens), switches around it on the 8B batch-1 step, in one call:
#   1. model_cuda_test '*Quantiz*' with WEFT_QUANT_DP4A_FINE=0 (default) and =1 (remainders):
#      weft-tiny's worst GPU-vs-CPU logit error per format;
#   2. cuda_forward_bench --shape 8b --batches 1 --prefill "": q4_b64 as is, with one decode
#      attention part per kv head (WEFT_DECODE_PARTS=1: no combine kernel), without and with
#      16 MB of L2 prefetch (WEFT_L2_PREFETCH_MB=0|16; 8 by default), with 4 rows a block for
#      the products of up to 8192 rows (WEFT_EXP_DP4A_ROWS4_MAX: a switch of the build of
#      this call only, removed after it measured slower); bf16 as
#      is and with one part; q4_b32 as is.
# Input: .devcarry/dp4at (bin/{model_cuda_test,cuda_forward_bench}).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/dp4at"], command="bash bench/device/dp4a_tune.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-dp4at}"
. bench/device/fwdruns.sh
for fine in 0 1; do
  WEFT_QUANT_DP4A_FINE=$fine timeout 200 "$B/model_cuda_test" --gtest_color=no \
    --gtest_filter='*Quantiz*' >"$O/mt$fine.log" 2>&1
  echo "model_cuda_test quantized, fine=$fine: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/mt$fine.log" | tr '\n' ' ')"
  grep -E "q4_b|^\[  FAILED|Failure" "$O/mt$fine.log" | head -6
done
st "steps"
b=(--batches 1)
fb q4_b64 -- "$F" "${b[@]}" --quantize q4_b64
fb bf16 -- "$F" "${b[@]}"
fb q4_b64_parts1 WEFT_DECODE_PARTS=1 -- "$F" "${b[@]}" --quantize q4_b64
fb q4_b64_pf0 WEFT_L2_PREFETCH_MB=0 -- "$F" "${b[@]}" --quantize q4_b64
fb q4_b64_pf16 WEFT_L2_PREFETCH_MB=16 -- "$F" "${b[@]}" --quantize q4_b64
fb q4_b64_rows4 WEFT_EXP_DP4A_ROWS4_MAX=8192 -- "$F" "${b[@]}" --quantize q4_b64
fb bf16_parts1 WEFT_DECODE_PARTS=1 -- "$F" "${b[@]}"
fb q4_b32 -- "$F" "${b[@]}" --quantize q4_b32
fb q4_b64_again -- "$F" "${b[@]}" --quantize q4_b64
st "done"
