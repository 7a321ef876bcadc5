#!/usr/bin/env bash
# Device call on one GPU (issue #16): where an 8B q4_b64 batch-1 decode step's time goes, by
# differences of whole steps (cuda_forward_bench, best of 20), all in one call:
#   layers 32 against 16 (a layer's cost; what is left is the step's fixed part: embedding,
#   the last norm, lm_head, sampling), context 512 against 16 (the attention's share that grows
#   with the context), decode segments of 64 and 128 keys, 4-stage rings, every kernel
#   releasing its successor early.
# Input: .devcarry/$CARRY (bin/cuda_forward_bench, default nf).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/nf"], command="bash bench/device/b1_parts.sh")
set -u
. bench/device/carry.sh "${CARRY:-nf}"
. bench/device/fwdruns.sh
q=(--batches 1 --quantize q4_b64)
fb base -- "$F" "${q[@]}"
fb layers16 -- "$F" "${q[@]}" --layers 16
fb layers8 -- "$F" "${q[@]}" --layers 8
fb ctx16 -- "$F" "${q[@]}" --context 16
fb seg64 WEFT_DECODE_STREAM_SEGMENT_KEYS=64 -- "$F" "${q[@]}"
fb seg128 WEFT_DECODE_STREAM_SEGMENT_KEYS=128 -- "$F" "${q[@]}"
fb stages4 WEFT_DECODE_STREAM_STAGES=4 -- "$F" "${q[@]}"
fb release127 WEFT_PDL_RELEASE=127 -- "$F" "${q[@]}"
fb base2 -- "$F" "${q[@]}"
fb bf16 -- "$F" --batches 1
