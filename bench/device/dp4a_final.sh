#!/usr/bin/env bash
# Device call on one GPU (issue #16): the branch's final binaries (dp4a for q4 at 1-2 tokens,
# rounded inputs without remainders by default, no L2 prefetch of quantized matrices):
#   1. kernels_test, the q4 product tests (every kernel), dp4a's own and the kernel choice;
#   2. cuda_forward_bench --shape 8b --batches 1 --prefill "": two rounds of bf16, q4_b64 and
#      q4_b32; q8_b32 and q4_b64 with the old 8 MB prefetch (WEFT_L2_PREFETCH_QUANT_MB=8), q8_b32
#      without; q4_b64 through the lanes kernel (WEFT_QUANT_GEMV=lanes), without prefetch.
# Input: .devcarry/dp4az (bin/{kernels_test,cuda_forward_bench}).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/dp4az"], command="bash bench/device/dp4a_final.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-dp4az}"
. bench/device/fwdruns.sh
timeout 150 "$B/kernels_test" --gtest_color=no \
  --gtest_filter='*CudaQuant*q4*:*Dp4a*:*KernelChoice*' >"$O/kt.log" 2>&1
echo "kernels_test q4: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$O/kt.log" | head -6
st "steps"
b=(--batches 1)
for round in 1 2; do
  fb "bf16_$round" -- "$F" "${b[@]}"
  fb "q4_b64_$round" -- "$F" "${b[@]}" --quantize q4_b64
  fb "q4_b32_$round" -- "$F" "${b[@]}" --quantize q4_b32
done
fb q4_b64_pf8 WEFT_L2_PREFETCH_QUANT_MB=8 -- "$F" "${b[@]}" --quantize q4_b64
fb q8_b32 -- "$F" "${b[@]}" --quantize q8_b32
fb q8_b32_pf8 WEFT_L2_PREFETCH_QUANT_MB=8 -- "$F" "${b[@]}" --quantize q8_b32
fb q4_b64_lanes WEFT_QUANT_GEMV=lanes -- "$F" "${b[@]}" --quantize q4_b64
st "done"
