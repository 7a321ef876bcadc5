#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, afternoon), after tpgate.sh (the gated
# product's release: 3% slower): the release split further, to find which product's release
# hurts. At TP=2 batch 1, o's and down's products are the pushing gemv (bit 64: the fused kernel
# follows, and launched at the product's exit it waits for nothing), qkv's the plain one (bit 1:
# the decode attention follows).
#   cuda_forward_bench, 8B shape, context 512, batch 1, alternating two rounds: one GPU, TP=2
#   with release 30 (the default), 94 (30 + pushing gemv), 31 (30 + plain gemv), 95 (both).
# Input: .devcarry/tpg/gpu.tar.xz (bin/cuda_forward_bench, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tpg"], command="bash bench/device/tprel2.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tpg
. bench/device/fwdruns.sh
MPI_VARS="WEFT_PDL_RELEASE"
read -ra mpi2 <<<"$(mpi_np 2)"
for k in 1 2; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  for r in 30 94 31 95; do
    fb tp2_r${r}_$k WEFT_PDL_RELEASE=$r -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  done
done
st end
