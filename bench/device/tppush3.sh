#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, afternoon), after tp4push.sh: the pushes with
# gemv's kernel without them as it was (the pushes in a kernel of their own, gemv_push_kernel:
# tp4push.sh's build gave every gemv the pushes' 88 bytes of parameters, and TP=2 without pushes
# came out 2.5% slower than main before), against main before them (cbde9ac).
#   1. NcclFusedNorm.ProductsPushIntoTheLlExchange under mpirun -np 2;
#   2. cuda_forward_bench, 8B shape, context 512, batch 1, alternating two rounds: one GPU, TP=2
#      of cbde9ac, TP=2 (pushes on, the default); once TP=2 with WEFT_TP_FUSED_PUSH=0;
#   3. weft bench on the random 8B folder, one request at a time (8 of 128 + 128 tokens): one GPU
#      and TP=2.
# Input: .devcarry/tpp/gpu.tar.xz (bin/{nccl_communicator_test,cuda_forward_bench,weft}, lib/),
# .devcarry/old/gpu.tar.xz (bin/cuda_forward_bench of cbde9ac), the Llama-3 tokenizer in
# .devcarry/l3.
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tpp", ".devcarry/old", ".devcarry/l3"], command="bash bench/device/tppush3.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh old >/dev/null
OLD=$B/cuda_forward_bench
. bench/device/carry.sh tpp
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_PUSH"
read -ra mpi2 <<<"$(mpi_np 2)"
timeout 120 "${mpi2[@]}" $B/nccl_communicator_test --gtest_color=no \
  --gtest_filter='NcclFusedNorm.ProductsPush*' >"$O/nfn.log" 2>&1
echo "nfn rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/nfn.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|measured.*pushing" "$O/nfn.log" | sort -u | head -6
st "forward pass, batch 1, alternating"
for k in 1 2; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  fb tp2_old_$k -- "${mpi2[@]}" "$OLD" --tensor-parallel 2 --batches 1
  fb tp2_$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
fb tp2_nopush WEFT_TP_FUSED_PUSH=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
st "engine, one request at a time"
engine_b1 tp1 tp2
st end
