#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, late afternoon): segments of 1024 keys by
# default for one-byte KV pages in the streaming decode attention. Tests, attention alone with
# the new default against WEFT_DECODE_STREAM_SEGMENT_KEYS=256 (the old one) at batches 1, 64
# and 256, and 8B int8 decode steps. Input: .devcarry/seg/gpu.tar.xz (kernels_test,
# model_cuda_test, cuda_decode_attention_bench, cuda_forward_bench).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/seg"], command="bash bench/device/kvseg.sh")
set -u
. bench/device/carry.sh seg
timeout 200 $B/kernels_test --gtest_filter='CudaKvQuant*:*DecodeAttentionStream*:*DecodeAttention*' --gtest_color=no > "$O/kernels.log" 2>&1
echo "kernels_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/kernels.log" | tr '\n' ' ')"; grep -E "^\[  FAILED" "$O/kernels.log" | head
timeout 120 $B/model_cuda_test --gtest_filter='CudaKvQuantModel*:CudaKvCompressModel*' --gtest_color=no > "$O/model.log" 2>&1
echo "model_cuda_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/model.log" | tr '\n' ' ')"
for v in default 256; do for dt in int8 fp8; do
  e=(); [ $v = 256 ] && e=(env WEFT_DECODE_STREAM_SEGMENT_KEYS=256)
  echo "== $dt, segments: $v"
  timeout 90 "${e[@]}" $B/cuda_decode_attention_bench --kv-cache-dtype $dt --no-rope --kernels stream \
    --batches 1,64,256 --contexts 512,2048 --layers 8 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ stream"
done; done
echo "== bf16"; timeout 90 $B/cuda_decode_attention_bench --kv-cache-dtype bf16 --no-rope --kernels stream \
  --batches 1,64,256 --contexts 512,2048 --layers 8 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ stream"
timeout 150 $B/cuda_forward_bench --shape 8b --kv-cache-dtype int8 --gpu-memory-fraction 0.9 --context 2048 \
  --batches 1,64,128 --prefill "" --repeats 10 > "$O/steps_int8.txt" 2>&1
echo "== 8B int8 steps, context 2048 (rc=$?)"; grep -E "^(decode|KV pool)" "$O/steps_int8.txt"
