#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, evening): the streaming decode attention with
# 2-stage rings by default. Its tests and the KV-quant tests, model_cuda_test whole, then 8B
# decode steps at batches 1, 64 and 256 (contexts 512 and 2048) with the new default and with
# WEFT_DECODE_STREAM_STAGES=3 (the old one), interleaved. Input: .devcarry/st2/gpu.tar.xz.
#   run(kind="nvidia-h100-x1", carry=[".devcarry/st2"], command="bash bench/device/stages2.sh")
set -u
. bench/device/carry.sh st2
timeout 200 $B/kernels_test --gtest_filter='*DecodeAttention*:CudaKvQuant*' --gtest_color=no > /tmp/k.log 2>&1
echo "kernels_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' /tmp/k.log | tr '\n' ' ')"; grep -E "^\[  FAILED" /tmp/k.log | head
timeout 300 $B/model_cuda_test --gtest_color=no > /tmp/m.log 2>&1
echo "model_cuda_test rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' /tmp/m.log | tr '\n' ' ')"; grep -E "^\[  FAILED" /tmp/m.log | head
for ctx in 512 2048; do for s in default 3 default 3; do
  e=(); [ $s = 3 ] && e=(env WEFT_DECODE_STREAM_STAGES=3)
  printf "context %s stages %s: " $ctx $s
  timeout 150 "${e[@]}" $B/cuda_forward_bench --shape 8b --context $ctx --batches 1,64,256 --prefill "" \
    --repeats 15 2>&1 | grep -E "^decode" | awk '{printf "b%s %s ms (%s)  ", $2, $4, $6}'; echo
done; done
