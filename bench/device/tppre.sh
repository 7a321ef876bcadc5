#!/usr/bin/env bash
# Device call on two GPUs (branch tppre, not merged: docs/PERFORMANCE.md, "The residual read
# before the wait"): the fused all-reduce + norm reading the residual row and its LL epoch counter
# before its wait on the product (instead of after, with a block barrier to share the epoch),
# against main (1dc5dc5) in the same call.
#   1. NcclFusedNorm.* under mpirun -np 2 (bitwise against NCCL + add_norm, the LL exchange
#      against the barrier, the pushes against the fused kernel's own);
#   2. weft-tiny at TP=2, 16 greedy tokens: the defaults, the fused kernel pushing, the barrier
#      (the CTest weft_generate_tensor_parallel_cuda_ll_push), and one GPU;
#   3. cuda_forward_bench, 8B shape, context 512, batch 1, alternating three rounds: one GPU,
#      TP=2 of main, TP=2 of the branch.
# Input: .devcarry/pre/gpu.tar.xz (the branch: bin/{nccl_communicator_test,cuda_forward_bench,
# weft}, lib/), .devcarry/mainf/gpu.tar.xz (main: bin/cuda_forward_bench).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/pre", ".devcarry/mainf"], command="bash bench/device/tppre.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh mainf >/dev/null
MAIN=$B/cuda_forward_bench
. bench/device/carry.sh pre
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_PUSH WEFT_TP_FUSED_LL_ROWS"
read -ra mpi2 <<<"$(mpi_np 2)"
timeout 180 "${mpi2[@]}" $B/nccl_communicator_test --gtest_color=no \
  --gtest_filter='NcclFusedNorm.*' >"$O/nfn.log" 2>&1
echo "nfn rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/nfn.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|measured.*(pushing|LL exchange\))" "$O/nfn.log" | sort -u | head -10
t=(generate --model models/weft-tiny --device cuda --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos)
one=$(timeout 60 $B/weft "${t[@]}" 2>/dev/null)
a=$(timeout 60 "${mpi2[@]}" $B/weft "${t[@]}" --tensor-parallel 2 2>/dev/null)
b=$(WEFT_TP_FUSED_PUSH=0 timeout 60 "${mpi2[@]}" $B/weft "${t[@]}" --tensor-parallel 2 2>/dev/null)
c=$(WEFT_TP_FUSED_LL_ROWS=0 timeout 60 "${mpi2[@]}" $B/weft "${t[@]}" --tensor-parallel 2 2>/dev/null)
echo "one GPU: $one"; echo "TP=2: $a"
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && echo "TP=2: same tokens three ways" || echo "TP=2: DIFFERENT: '$b' / '$c'"
st "forward pass, batch 1, alternating"
for k in 1 2 3; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  fb tp2_main_$k -- "${mpi2[@]}" "$MAIN" --tensor-parallel 2 --batches 1
  fb tp2_pre_$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
st end
