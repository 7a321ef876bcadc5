#!/usr/bin/env bash
# Device call on four GPUs (prepared in the session of 2026-11-27, evening, for the next one):
# the batch-1 defaults of that session in a group of four, which it could not run there:
# 128-key decode segments in a group, early release (WEFT_PDL_RELEASE 30), and the LL exchange
# (off by default above two ranks until this passes).
#   1. NcclFusedNorm* over four ranks (the LL exchange bitwise the barrier at four ranks, graph
#      timings of both);
#   2. cuda_forward_bench, 8B shape, context 512, graph replay: one GPU; TP=4 batch 1 with the
#      defaults, with 256-key segments, with no release, with the LL exchange
#      (WEFT_TP_FUSED_LL_ROWS=2); TP=4 batches 64 and 256 with the defaults and 256-key segments.
# Input: .devcarry/t4d/gpu.tar.xz (bin/{cuda_forward_bench,nccl_communicator_test}, lib/).
#   run(kind="nvidia-h100-x4", carry=[".devcarry/t4d"], command="bash bench/device/tp4defaults.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-t4d}"
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_LL_ROWS WEFT_DECODE_STREAM_SEGMENT_KEYS WEFT_PDL_RELEASE"
read -ra mpi4 <<<"$(mpi_np 4)"
st "NcclFusedNorm over four ranks"
timeout 200 "${mpi4[@]}" $B/nccl_communicator_test --gtest_color=no \
  --gtest_filter='NcclFusedNorm*' >"$O/nfn.log" 2>&1
echo "nfn rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/nfn.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|measured.*CUDA graphs" "$O/nfn.log" | sort -u | head -10
st "one GPU and TP=4, batch 1"
tp4() { fb "$1" "${@:2}" -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches "${BATCHES:-1}"; }
for k in 1 2; do
  fb tp1_$k CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
  tp4 tp4_$k
done
tp4 tp4_s256 WEFT_DECODE_STREAM_SEGMENT_KEYS=256
tp4 tp4_r0 WEFT_PDL_RELEASE=0
tp4 tp4_ll WEFT_TP_FUSED_LL_ROWS=2
st "TP=4, batches 64 and 256"
BATCHES=64,256 tp4 tp4_big
BATCHES=64,256 tp4 tp4_big_s256 WEFT_DECODE_STREAM_SEGMENT_KEYS=256
st end
