#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, evening): the KV-quant tests after their
# dedupe, then where a batch-1 and batch-2 decode step's time goes for bf16 and q4_b32
# (cuda_forward_bench --profile: plain launches with an event after each kernel class), the
# decode attention alone at small batches, and the quantized products alone at one token.
# Input: .devcarry/b1p/gpu.tar.xz (bin/{kernels_test,cuda_forward_bench,
# cuda_decode_attention_bench,cuda_quant_gemv_bench}, lib/).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/b1p"], command="bash bench/device/b1prof.sh")
set -u
. bench/device/carry.sh b1p
timeout 150 $B/kernels_test --gtest_filter='CudaKvQuant*' --gtest_color=no > "$O/kernels.log" 2>&1
echo "kernels_test CudaKvQuant* rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/kernels.log" | tr '\n' ' ')"
grep -E "^\[  FAILED" "$O/kernels.log" | head
for f in ${FORMATS:-bf16 q4_b32}; do
  q=(); [ "$f" != bf16 ] && q=(--quantize "$f")
  timeout 200 $B/cuda_forward_bench --shape 8b --batches 1,2 --prefill "" --repeats 20 --profile \
    "${q[@]}" > "$O/fwd_$f.txt" 2>&1
  echo "== $f rc=$?"; grep -E "^(decode|  profile)" "$O/fwd_$f.txt"
done
echo "== decode attention alone, bf16 pages, with rope (as the model runs it)"
timeout 120 $B/cuda_decode_attention_bench --kernels stream --batches 1,2,4,8 --contexts 512,2048 \
  --layers 8 > "$O/attn.txt" 2>&1; echo "rc=$?"; grep -E "^ +[0-9]+ +[0-9]+ " "$O/attn.txt" | head -20
echo "== q4_b32 products at one token"
timeout 120 $B/cuda_quant_gemv_bench --tokens 1 --formats q4_b32 --kernels lanes,stream \
  > "$O/gemv.txt" 2>&1; echo "rc=$?"; tail -30 "$O/gemv.txt"
