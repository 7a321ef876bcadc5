#!/usr/bin/env bash
# Device call on one GPU (issue #16, branch ahead): the first rows of each layer's quantized
# gate_up fetched into L2 during the attention (WEFT_L2_AHEAD_QUANT_MB), and 128-key decode
# segments on one GPU (WEFT_DECODE_STREAM_SEGMENT_KEYS=128) at batch 1 and at batches 64 and
# 256 (where longer segments were chosen), cuda_forward_bench on the 8B shape, context 512,
# best of 20, alternating.
# Input: .devcarry/$CARRY (bin/cuda_forward_bench, default ah).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/ah"], command="bash bench/device/ahead.sh")
set -u
. bench/device/carry.sh "${CARRY:-ah}"
. bench/device/fwdruns.sh
q=(--batches 1 --quantize q4_b64)
for round in 1 2; do
  fb "q4_ahead0_$round" -- "$F" "${q[@]}"
  for mb in 8 16 24; do fb "q4_ahead${mb}_$round" WEFT_L2_AHEAD_QUANT_MB=$mb -- "$F" "${q[@]}"; done
done
fb q4_seg128_ahead16 WEFT_DECODE_STREAM_SEGMENT_KEYS=128 WEFT_L2_AHEAD_QUANT_MB=16 -- "$F" "${q[@]}"
fb bf16_seg256 -- "$F" --batches 1,64,256
fb bf16_seg128 WEFT_DECODE_STREAM_SEGMENT_KEYS=128 -- "$F" --batches 1,64,256
