#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, evening): the fused all-reduce + norm's LL
# exchange (kernels/cuda/tp_fused.cu: each rank stores its partial rows, flagged with the
# launch's epoch, into the peers' receive areas; no barrier, no loads over NVLink) against the
# barrier (WEFT_TP_FUSED_LL_ROWS=0), and the decode attention's segment at TP=2.
#   1. tests: NcclFusedNorm* over both GPUs (both paths against NCCL + add_norm, LL bitwise
#      the barrier's, graph timings per pair), cuda_tensor_parallel_test (TP=2 against one GPU
#      on every fixture, LL on by default);
#   2. cuda_forward_bench, 8B shape, context 512, graph replay: TP=2 batch 1 with LL and
#      without, alternating; with 128-key decode segments; batches 64 and 256 at 256 and 128
#      keys; TP=1 batch 1 (cuBLAS, its default) and with the small-step kernel.
# Input: .devcarry/tll/gpu.tar.xz (bin/{nccl_communicator_test,cuda_tensor_parallel_test,
# cuda_forward_bench,weft}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tll"], command="bash bench/device/tpll.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-tll}"
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_LL_ROWS WEFT_DECODE_STREAM_SEGMENT_KEYS"
read -ra mpi2 <<<"$(mpi_np 2)"
if [ "${TESTS:-1}" = 1 ]; then
  st "tests"
  timeout 150 "${mpi2[@]}" $B/nccl_communicator_test --gtest_color=no \
    --gtest_filter='NcclFusedNorm*' >"$O/nfn.log" 2>&1
  echo "nfn rc=$?"
  timeout 240 "${mpi2[@]}" $B/cuda_tensor_parallel_test --gtest_color=no >"$O/tpt.log" 2>&1
  echo "tpt rc=$?"
  for f in nfn tpt; do
    echo "$f: $(grep -E '^\[  (PASSED|FAILED) ' "$O/$f.log" | sort -u | tr '\n' ' ')"
    grep -E "^\[  FAILED|Failure" "$O/$f.log" | sort -u | head -8
  done
  grep -E "measured.*(CUDA graphs|LL\)|window)" "$O/nfn.log" | sort -u | head -20
  grep -E "fused norm" "$O/tpt.log" | sort -u | head -4
fi
if [ "${FWD:-1}" = 1 ]; then
  st "TP=2, batch 1: LL exchange / barrier, alternating"
  for k in 1 2; do
    fb tp2_ll$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
    fb tp2_bar$k WEFT_TP_FUSED_LL_ROWS=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  done
  st "TP=2, decode segments of 128 keys"
  fb tp2_ll_s128 WEFT_DECODE_STREAM_SEGMENT_KEYS=128 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  fb tp2_b64_256_s256 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 16,64,256
  fb tp2_b64_256_s128 WEFT_DECODE_STREAM_SEGMENT_KEYS=128 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 16,64,256
  st "TP=1 (GPU 0 | GPU 1)"
  pair tp1_cublas "" "--batches 1" tp1_ss1 "" "--batches 1 --small-step-kernel-tokens 1"
fi
st end
