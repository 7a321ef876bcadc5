#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, evening; branch lanesgated): the quantized
# gate_up product applying the activation in the lanes kernel's epilogue at 1-2 tokens. The
# quantized kernel tests (the gated one now checks lanes bitwise against its product followed
# by mlp_activation) and the model's quantized tests, then 8B q4_b32 and q8_b32 decode at
# batch 1 and 2 with the fused epilogue (default) and without it (WEFT_QUANT_GATED=0, the
# activation kernel after the product), interleaved. Input: .devcarry/lg/gpu.tar.xz.
#   run(kind="nvidia-h100-x1", carry=[".devcarry/lg"], command="bash bench/device/lanesgated.sh")
set -u
. bench/device/carry.sh lg
timeout 240 $B/kernels_test --gtest_filter='*CudaQuant*' --gtest_color=no > /tmp/k.log 2>&1
echo "kernels_test *CudaQuant* rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' /tmp/k.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|bitwise" /tmp/k.log | head
timeout 240 $B/model_cuda_test --gtest_filter='*Quant*' --gtest_color=no > /tmp/m.log 2>&1
echo "model_cuda_test *Quant* rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' /tmp/m.log | tr '\n' ' ')"
grep -E "^\[  FAILED" /tmp/m.log | head
for rep in 1 2; do for f in q4_b32 q8_b32; do for g in 1 0; do
  printf "%s gated=%s rep %s: " $f $g $rep
  WEFT_QUANT_GATED=$g timeout 120 $B/cuda_forward_bench --shape 8b --batches 1,2 --prefill "" \
    --quantize $f --repeats 30 2>&1 | grep -E "^decode" | awk '{printf "batch %s %s ms  ", $2, $4}'; echo
done; done; done
