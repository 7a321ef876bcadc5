#!/usr/bin/env bash
# Device call on four GPUs (session of 2026-11-27, afternoon): the products' pushes into the LL
# exchange (ll_push.hpp) against main before them (cbde9ac) in one call, and the batch-1 defaults
# in a group of four, with the LL exchange there (off by default at four ranks until it passes).
#   1. NcclFusedNorm* over four ranks (the LL exchange bitwise the barrier; the pushes bitwise
#      the fused kernel's own; graph timings);
#   2. cuda_forward_bench, 8B shape, context 512, graph replay, batch 1, two rounds: one GPU,
#      the old build and the new at once on GPUs 0 and 1; TP=2 old and new; TP=4 old, new with
#      its defaults, new with the LL exchange (WEFT_TP_FUSED_LL_ROWS=2, pushed); then once TP=2
#      and TP=4-with-LL without the pushes (WEFT_TP_FUSED_PUSH=0), and TP=4 batches 64 and 256.
# Input: .devcarry/tpp/gpu.tar.xz (bin/{nccl_communicator_test,cuda_forward_bench}, lib/: the new
# build), .devcarry/old/gpu.tar.xz (bin/cuda_forward_bench of cbde9ac).
#   run(kind="nvidia-h200-x4", carry=[".devcarry/tpp", ".devcarry/old"], command="bash bench/device/tp4push.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh old >/dev/null
OLD=$B/cuda_forward_bench
. bench/device/carry.sh tpp
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_LL_ROWS WEFT_TP_FUSED_PUSH"
read -ra mpi2 <<<"$(mpi_np 2)"
read -ra mpi4 <<<"$(mpi_np 4)"
st "NcclFusedNorm over four ranks"
timeout 200 "${mpi4[@]}" $B/nccl_communicator_test --gtest_color=no \
  --gtest_filter='NcclFusedNorm*' >"$O/nfn.log" 2>&1
echo "nfn rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/nfn.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|measured.*CUDA graphs" "$O/nfn.log" | sort -u | head -12
st "batch 1: one GPU, TP=2, TP=4, old and new"
for k in 1 2; do
  fb tp1_old_$k CUDA_VISIBLE_DEVICES=0 -- "$OLD" --batches 1 &
  fb tp1_new_$k CUDA_VISIBLE_DEVICES=1 -- "$F" --batches 1
  wait
  fb tp2_old_$k -- "${mpi2[@]}" "$OLD" --tensor-parallel 2 --batches 1
  fb tp2_new_$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  fb tp4_old_$k -- "${mpi4[@]}" "$OLD" --tensor-parallel 4 --batches 1
  fb tp4_new_$k -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 1
  fb tp4_ll_$k WEFT_TP_FUSED_LL_ROWS=2 -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 1
done
fb tp2_nopush WEFT_TP_FUSED_PUSH=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp4_ll_nopush WEFT_TP_FUSED_LL_ROWS=2 WEFT_TP_FUSED_PUSH=0 -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 1
st "TP=4, batches 64 and 256"
fb tp4_big -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 64,256
grep -h "fused norm" "$O"/tp4_ll_1.txt | head -1
st end
