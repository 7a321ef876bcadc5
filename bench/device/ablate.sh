#!/usr/bin/env bash
# Device call on one GPU (issue #16; branch ablate, not for merging): where an 8B q4_b64
# batch-1 step's time goes inside the step, by leaving one kind of kernel out of every layer
# (WEFT_ABLATE names them: qkv, attn, oproj, gateup, down; the results are wrong, the times
# are what each kind costs where it stands in the step), cuda_forward_bench, context 512, best
# of 20.
# Input: .devcarry/$CARRY (bin/cuda_forward_bench of branch ablate, default abl).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/abl"], command="bash bench/device/ablate.sh")
set -u
. bench/device/carry.sh "${CARRY:-abl}"
. bench/device/fwdruns.sh
q=(--batches 1 --quantize q4_b64)
fb base -- "$F" "${q[@]}"
for a in attn qkv oproj gateup down attn,oproj qkv,attn,oproj,gateup,down; do
  fb "no_$a" WEFT_ABLATE=$a -- "$F" "${q[@]}"
done
fb base2 -- "$F" "${q[@]}"
