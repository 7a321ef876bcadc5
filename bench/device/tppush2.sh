#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, afternoon), after tppush.sh: the pushes again
# with gemv's push loop unrolled over the possible peers (tppush.sh's build indexed the
# parameter's array by a variable, which put it on the stack of every thread of every gemv).
#   1. NcclFusedNorm.ProductsPushIntoTheLlExchange under mpirun -np 2;
#   2. cuda_forward_bench, 8B shape, context 512, batch 1, alternating three rounds: one GPU,
#      TP=2 (pushes on, the default), TP=2 with WEFT_TP_FUSED_PUSH=0; then TP=2 with the
#      16-bit products releasing early too (WEFT_PDL_RELEASE=31), twice.
# Input: .devcarry/tpp/gpu.tar.xz (bin/{nccl_communicator_test,cuda_forward_bench}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tpp"], command="bash bench/device/tppush2.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tpp
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_PUSH WEFT_PDL_RELEASE"
read -ra mpi2 <<<"$(mpi_np 2)"
timeout 120 "${mpi2[@]}" $B/nccl_communicator_test --gtest_color=no \
  --gtest_filter='NcclFusedNorm.ProductsPush*' >"$O/nfn.log" 2>&1
echo "nfn rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/nfn.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|measured" "$O/nfn.log" | sort -u | head -8
st "forward pass, batch 1, alternating"
for k in 1 2 3; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  fb tp2_$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  fb tp2_nopush_$k WEFT_TP_FUSED_PUSH=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
for k in 1 2; do
  fb tp2_r31_$k WEFT_PDL_RELEASE=31 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
st end
