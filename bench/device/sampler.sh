#!/usr/bin/env bash
# Device call on one GPU (issue #16, branch sampler, not merged): the GPU sampler's first two passes over
# slices of 4,096 logits (many blocks a row) instead of one block a row:
#   1. model_cuda_test: the sampler against the CPU's, rows alone and in a batch, greedy tokens
#      batch-independent, draft chains bitwise plain decoding, the fixtures' references;
#   2. cuda_forward_bench, 8B shape, context 512, best of 20, the sampler's branch against the
#      binary without it (cuda_forward_bench_ah: branch ahead), alternating: q4_b64 batch 1,
#      bf16 batches 1, 64, 256.
# Input: .devcarry/$CARRY (bin/{model_cuda_test,cuda_forward_bench,cuda_forward_bench_ah}).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/samp"], command="bash bench/device/sampler.sh")
set -u
. bench/device/carry.sh "${CARRY:-samp}"
. bench/device/fwdruns.sh
timeout 240 "$B/model_cuda_test" --gtest_color=no --gtest_filter='CudaSampler.*:CudaModel.GreedyTokensDoNotDependOnTheBatch:*ChainRows*:*CudaReference*:*Quantiz*' >"$O/mt.log" 2>&1
echo "model_cuda_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/mt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$O/mt.log" | head -8
for round in 1 2; do
  fb "q4_new_$round" -- "$F" --batches 1 --quantize q4_b64
  fb "q4_old_$round" -- "${F}_ah" --batches 1 --quantize q4_b64
done
fb bf16_new -- "$F" --batches 1,64,256
fb bf16_old -- "${F}_ah" --batches 1,64,256
