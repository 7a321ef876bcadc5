#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, evening): the batch-1 defaults after this
# session's changes (128-key decode segments in a group, the LL exchange up to 2 rows, early
# release by the attention, the fused norm, add_norm and the lanes product: WEFT_PDL_RELEASE 30)
# against one GPU, in the forward pass and end to end.
#   1. cuda_forward_bench, 8B shape, context 512, graph replay, alternating: one GPU (cuBLAS,
#      its default) and TP=2 batch 1, three rounds; TP=2 batch 1 without any release
#      (WEFT_PDL_RELEASE=0); TP=2 batches 16, 64, 256;
#   2. weft bench on the random 8B folder, one request at a time (8 of 128 + 128 tokens):
#      one GPU and TP=2.
# Input: .devcarry/tlf/gpu.tar.xz (bin/{cuda_forward_bench,weft}, lib/), the Llama-3
# tokenizer in .devcarry/l3.
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tlf", ".devcarry/l3"], command="bash bench/device/tpfinal.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tlf
. bench/device/fwdruns.sh
MPI_VARS="WEFT_PDL_RELEASE"
read -ra mpi2 <<<"$(mpi_np 2)"
st "one GPU / TP=2, batch 1, alternating"
for k in 1 2 3; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  fb tp2_$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
fb tp2_r0 WEFT_PDL_RELEASE=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp2_big -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 16,64,256
st "engine, one request at a time"
engine_b1 tp1 tp2
st end
