#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, evening): where batch-1 decode attention's
# 12.5 us a layer go. The streaming kernel alone (cuda_decode_attention_bench, 8B shape) at
# small batches and contexts 16 to 2048, with and without the fused rotary embedding, with the
# launch's own part count and with WEFT_DECODE_PARTS forced; and `read` (plain loads).
# Input: .devcarry/b1p/gpu.tar.xz (bench/device/b1prof.sh's).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/b1p"], command="bash bench/device/b1attn.sh")
set -u
. bench/device/carry.sh b1p
row() { grep -E "^ +[0-9]+ +[0-9]+ " | sed "s/^/$1 /"; }
for parts in auto 1 2 4; do
  e=(); [ $parts != auto ] && e=(env WEFT_DECODE_PARTS=$parts)
  for rope in rope no-rope; do
    r=(); [ $rope = no-rope ] && r=(--no-rope)
    timeout 60 "${e[@]}" $B/cuda_decode_attention_bench --kernels stream --batches 1,4 \
      --contexts 16,64,256,512,2048 --layers 8 "${r[@]}" 2>&1 | row "parts=$parts $rope"
  done
done
timeout 60 $B/cuda_decode_attention_bench --kernels read --batches 1 --contexts 16,512,2048 \
  --layers 8 2>&1 | row "read"
