#!/usr/bin/env bash
# Device call on one GPU (issue #16, branch normfuse): the residual add and RMS norm inside the
# dp4a products (cuda::QuantNormArgs; WEFT_QUANT_NORM_FUSED=0 keeps the add_norm kernels):
#   1. kernels_test: the fused norm's tests, the q4 product tests (every kernel), dp4a's own;
#   2. model_cuda_test '*Quantiz*' (weft-tiny in every format on the GPU against the CPU model;
#      the q4 decode steps run the fused norm);
#   3. cuda_forward_bench --shape 8b --batches 1 --prefill "": two rounds of bf16, q4_b64 and
#      q4_b32 with the fused norm and without; q4_b64 fused with the remainders
#      (WEFT_QUANT_DP4A_FINE=1).
# Each part runs where the carry has its binary (the 64 MiB carry may not hold all three).
# Input: .devcarry/$CARRY (bin/{kernels_test,model_cuda_test,cuda_forward_bench}, default nf).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/nf"], command="bash bench/device/normfuse.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-nf}"
. bench/device/fwdruns.sh
if [ -x "$B/kernels_test" ]; then
  timeout 150 "$B/kernels_test" --gtest_color=no \
    --gtest_filter='*CudaQuantNorm*:*CudaQuant*q4*:*Dp4a*' >"$O/kt.log" 2>&1
  echo "kernels_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|Expected|Which is|row " "$O/kt.log" | head -12
fi
if [ -x "$B/model_cuda_test" ]; then
  timeout 150 "$B/model_cuda_test" --gtest_color=no --gtest_filter='*Quantiz*' >"$O/mt.log" 2>&1
  echo "model_cuda_test quantized: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/mt.log" | tr '\n' ' ')"
  grep -E "q4_b|^\[  FAILED|Failure" "$O/mt.log" | head -8
fi
if [ -x "$B/cuda_forward_bench" ]; then
  st "steps"
  b=(--batches 1)
  for round in 1 2; do
    fb "bf16_$round" -- "$F" "${b[@]}"
    fb "q4_b64_fused_$round" -- "$F" "${b[@]}" --quantize q4_b64
    fb "q4_b64_plain_$round" WEFT_QUANT_NORM_FUSED=0 -- "$F" "${b[@]}" --quantize q4_b64
  done
  fb q4_b64_fused_fine WEFT_QUANT_DP4A_FINE=1 -- "$F" "${b[@]}" --quantize q4_b64
  fb q4_b32_fused -- "$F" "${b[@]}" --quantize q4_b32
  fb q4_b32_plain WEFT_QUANT_NORM_FUSED=0 -- "$F" "${b[@]}" --quantize q4_b32
fi
st "done"
