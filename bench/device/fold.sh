#!/usr/bin/env bash
# Device call on one GPU (issue #16, branch partfold, not merged): the streaming decode
# attention's last part folding its token's records (AttentionArgs::part_counters; WEFT_DECODE_PART_FOLD=0 keeps the
# combine kernel) and gate_up's first rows fetched during the attention (WEFT_L2_AHEAD_QUANT_MB,
# default 16):
#   1. kernels_test '*CudaDecodeAttentionStream*' (the new PartCountersFold test among them);
#   2. model_cuda_test: the fixtures' greedy tokens and logits against the CPU, quantized too;
#   3. cuda_forward_bench, 8B shape, context 512: q4_b64 batch 1 and bf16 batches 1, 64, 256,
#      fold on and off, two rounds.
# Input: .devcarry/$CARRY (bin/{kernels_test,cuda_forward_bench} of branch partfold, model_cuda_test
# where it fits; default fold).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/fold"], command="bash bench/device/fold.sh")
set -u
. bench/device/carry.sh "${CARRY:-fold}"
. bench/device/fwdruns.sh
timeout 200 "$B/kernels_test" --gtest_color=no --gtest_filter='*CudaDecodeAttentionStream*' \
  >"$O/kt.log" 2>&1
echo "kernels_test stream: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is|not left" "$O/kt.log" | head -12
[ -x "$B/model_cuda_test" ] && timeout 200 "$B/model_cuda_test" --gtest_color=no \
  --gtest_filter='*CudaReference*:*Quantiz*:CudaModel.*Graph*:CudaModel.*Greedy*' >"$O/mt.log" 2>&1
echo "model_cuda_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/mt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$O/mt.log" | head -8
for round in 1 2; do
  fb "q4_fold_$round" -- "$F" --batches 1 --quantize q4_b64
  fb "q4_nofold_$round" WEFT_DECODE_PART_FOLD=0 -- "$F" --batches 1 --quantize q4_b64
done
fb q4_noahead WEFT_L2_AHEAD_QUANT_MB=0 -- "$F" --batches 1 --quantize q4_b64
fb bf16_fold -- "$F" --batches 1,64,256
fb bf16_nofold WEFT_DECODE_PART_FOLD=0 -- "$F" --batches 1,64,256
