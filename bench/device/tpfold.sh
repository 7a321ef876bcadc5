#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, evening): the streaming decode attention
# folding a token's part records in the block that finishes its last part
# (AttentionArgs::combine_counters, given by the model) instead of the combine kernel
# (WEFT_DECODE_FOLD=0).
#   1. kernels_test '*DecodeAttentionStream*' on GPU 0 (the fold bitwise the combine kernel,
#      counters left at zero); the runs below only if it passes;
#   2. cuda_forward_bench, 8B shape, context 512, batch 1, graph replay, alternating: TP=2 with
#      the fold / without, two rounds; one GPU once.
# Input: .devcarry/tfo/gpu.tar.xz (bin/{cuda_forward_bench,kernels_test}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tfo"], command="bash bench/device/tpfold.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tfo
. bench/device/fwdruns.sh
MPI_VARS="WEFT_DECODE_FOLD"
read -ra mpi2 <<<"$(mpi_np 2)"
st "tests"
CUDA_VISIBLE_DEVICES=0 timeout 120 $B/kernels_test --gtest_color=no \
  --gtest_filter='*DecodeAttentionStream*' >"$O/kt.log" 2>&1
rc=$?
echo "kt rc=$rc: $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|differ|reset" "$O/kt.log" | sort -u | head -8
[ $rc = 0 ] || exit 1
st "TP=2 batch 1, fold / combine kernel, alternating; one GPU"
for k in 1 2; do
  fb tp2_fold$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  fb tp2_comb$k WEFT_DECODE_FOLD=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
fb tp1 CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
st end
