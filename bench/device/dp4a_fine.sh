#!/usr/bin/env bash
# Device call on one GPU (issue #16): the dp4a product with the inputs' remainders rounded and
# summed too (WEFT_QUANT_DP4A_FINE=1, the default: x carried to within s / 508) against without
# (=0: within s / 2), and the decode attention kernels at batch 1, in the same call:
#   1. kernels_test '*CudaQuant*' with each (the tests' bound follows the switch);
#   2. cuda_quant_gemv_bench --tokens 1 --kernels lanes,dp4a --formats q4_b32,q4_b64, each;
#   3. cuda_forward_bench --shape 8b --batches 1 --attn-kernels old,new,stream: bf16, then
#      q4_b64 and q4_b32 with each switch; q4_b64 with 64-key segments.
# Input: .devcarry/dp4af (bin/{kernels_test,cuda_quant_gemv_bench,cuda_forward_bench}).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/dp4af"], command="bash bench/device/dp4a_fine.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-dp4af}"
. bench/device/fwdruns.sh
for fine in 1 0; do
  WEFT_QUANT_DP4A_FINE=$fine timeout 200 "$B/kernels_test" --gtest_color=no \
    --gtest_filter='*CudaQuant*' >"$O/kt$fine.log" 2>&1
  echo "kernels_test quant, fine=$fine: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt$fine.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|Expected|Which is|tokens=" "$O/kt$fine.log" | head -8
done
st "products"
for fine in 1 0; do
  WEFT_QUANT_DP4A_FINE=$fine timeout 120 "$B/cuda_quant_gemv_bench" --tokens 1 --kernels lanes,dp4a \
    --formats q4_b32,q4_b64 --no-reference >"$O/qg$fine.txt" 2>&1
  echo "== fine=$fine"; grep -E "dp4a|lanes" "$O/qg$fine.txt" | grep -vE "^gate_up" | tail -22
done
st "steps"
a=(--batches 1 --attn-kernels old,new,stream)
fb bf16 -- "$F" "${a[@]}"
for q in q4_b64 q4_b32; do
  fb "${q}_fine" -- "$F" "${a[@]}" --quantize "$q"
  fb "${q}_coarse" WEFT_QUANT_DP4A_FINE=0 -- "$F" "${a[@]}" --quantize "$q"
done
fb q4_b64_seg64 WEFT_DECODE_STREAM_SEGMENT_KEYS=64 -- "$F" --batches 1 --quantize q4_b64
fb bf16_seg64 WEFT_DECODE_STREAM_SEGMENT_KEYS=64 -- "$F" --batches 1
for n in bf16 q4_b64_fine q4_b64_coarse q4_b32_fine q4_b32_coarse; do
  echo "$n: $(grep -E '^decode' "$O/$n.txt" | tr -s ' ' | tr '\n' ';')"
done
st "done"
