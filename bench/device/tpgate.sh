#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, afternoon), after the pushes landed (c0d86f7):
# does releasing early from the gated gate_up product (WEFT_PDL_RELEASE bit 32, split from the
# 16-bit products' bit 1, whose release made TP=2 slower) let down's product preload its first
# weights while gate_up runs? And the L2 prefetch beside the all-reduce with the shorter fused
# kernel (WEFT_TP_PREFETCH_MB 0 and 32; 16 the default).
#   cuda_forward_bench, 8B shape, context 512, batch 1, alternating two rounds: one GPU, TP=2
#   (release 30, the default), TP=2 with release 62 (30 + gated); then TP=2 with 63 (every
#   product too), and with the prefetch at 0 and 32 MB.
# Input: .devcarry/tpg/gpu.tar.xz (bin/cuda_forward_bench, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tpg"], command="bash bench/device/tpgate.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tpg
. bench/device/fwdruns.sh
MPI_VARS="WEFT_PDL_RELEASE WEFT_TP_PREFETCH_MB"
read -ra mpi2 <<<"$(mpi_np 2)"
for k in 1 2; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  fb tp2_$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  fb tp2_r62_$k WEFT_PDL_RELEASE=62 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
fb tp2_r63 WEFT_PDL_RELEASE=63 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp2_pf0 WEFT_TP_PREFETCH_MB=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp2_pf32 WEFT_TP_PREFETCH_MB=32 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
st end
