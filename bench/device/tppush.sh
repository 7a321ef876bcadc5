#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, afternoon): products that push their own rows
# into the LL exchange (kernels/cuda/ll_push.hpp; WEFT_TP_FUSED_PUSH), and the checks of branch
# gputp (quantized weights and KV-Compress on GPU ranks under tensor parallelism), one build of
# both.
#   1. nccl_communicator_test NcclFusedNorm.* (ProductsPushIntoTheLlExchange: bitwise against the
#      fused kernel pushing, and its time per pair) under mpirun -np 2;
#   2. bench/device/gputp.sh with every cuda_tensor_parallel_test test (the TP=2 greedy tokens
#      against one GPU take the pushes now), then weft generate with KV-Compress and q8_b32;
#   3. cuda_forward_bench, 8B shape, context 512, batch 1, alternating three rounds: one GPU,
#      TP=2 (pushes on, the default), TP=2 with WEFT_TP_FUSED_PUSH=0; then TP=2 batches 2, 16, 64.
# Input: .devcarry/tpp/gpu.tar.xz (bin/{nccl_communicator_test,cuda_tensor_parallel_test,weft,
# cuda_forward_bench}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tpp"], command="bash bench/device/tppush.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tpp
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_PUSH"
read -ra mpi2 <<<"$(mpi_np 2)"
st "NcclFusedNorm"
timeout 180 "${mpi2[@]}" $B/nccl_communicator_test --gtest_color=no \
  --gtest_filter='NcclFusedNorm.*' >"$O/nfn.log" 2>&1
echo "nfn rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/nfn.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|measured.*(push|LL exchange\))" "$O/nfn.log" | sort -u | head -16
st "gputp checks, every tensor-parallel test"
TPT_FILTER='*' CARRY=tpp bash bench/device/gputp.sh 2>&1 | grep -v '^ *[0-9] NVIDIA'
st "forward pass, batch 1, alternating"
for k in 1 2 3; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  fb tp2_$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  fb tp2_nopush_$k WEFT_TP_FUSED_PUSH=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
fb tp2_more -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 2,16,64
grep -h "fused norm" "$O"/tp2_1.txt | head -2
st end
