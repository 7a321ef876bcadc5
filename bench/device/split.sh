#!/usr/bin/env bash
# Device call on one GPU (2026-11-27): enqueue_step's prefetches and products moved into
# step_prefetch.cpp and cuda_model_product.cpp (the same kernels in the same order):
#   1. model_cuda_test: the fixtures' references, the CudaModel cases, quantized weights, the
#      draft chains, the sampler;
#   2. cuda_forward_bench, 8B shape, context 512, best of 20: q4_b64 batch 1 (two rounds), bf16
#      batches 1, 64, 256;
#   3. the decode attention's share of bf16 steps at batches 64 and 256 (issue #19), by leaving
#      it out (cuda_forward_bench_abl of branch ablate, WEFT_ABLATE=attn; wrong results, the
#      time it takes where it stands).
# Input: .devcarry/$CARRY (bin/{model_cuda_test,cuda_forward_bench,cuda_forward_bench_abl}).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/split"], command="bash bench/device/split.sh")
set -u
. bench/device/carry.sh "${CARRY:-split}"
. bench/device/fwdruns.sh
timeout 240 "$B/model_cuda_test" --gtest_color=no \
  --gtest_filter='*CudaReference*:CudaModel.*:*Quantiz*:*ChainRows*:CudaSampler.*' >"$O/mt.log" 2>&1
echo "model_cuda_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/mt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$O/mt.log" | head -8
for round in 1 2; do fb "q4_$round" -- "$F" --batches 1 --quantize q4_b64; done
fb bf16 -- "$F" --batches 1,64,256
fb bf16_abl -- "${F}_abl" --batches 64,256
fb bf16_abl_noattn WEFT_ABLATE=attn -- "${F}_abl" --batches 64,256
