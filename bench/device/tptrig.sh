#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, evening): the decode chain's kernels
# releasing the next kernel once past their own wait (griddepcontrol.launch_dependents,
# kernels/cuda/dependent_launch.cuh: the few-token products, the streaming decode attention
# and its combine, the fused all-reduce + norm, add_norm), 128-key decode segments in a
# tensor-parallel group (CudaModelOptions::decode_segment_keys -1), and the LL exchange for
# steps of up to 2 rows. New binaries (.devcarry/tlt) against the previous build's
# cuda_forward_bench (.devcarry/tlo: no release; 256-key segments; LL up to 16 rows).
#   1. tests (new binaries): kernels_test (decode attention incl. the caller's segment, gemv,
#      norms, quantized products), model_cuda_test, NcclFusedNorm* and
#      cuda_tensor_parallel_test over both GPUs;
#   2. cuda_forward_bench, 8B shape, context 512, graph replay, alternating new / old:
#      TP=2 batch 1 (new default; new with 256-key segments = old's segment), TP=2 batches
#      16, 64, 256; one GPU batch 1 (cuBLAS, small-step kernel, q4_b32), two at a time.
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tlt", ".devcarry/tlo"], command="bash bench/device/tptrig.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tlo
OLD=$B/cuda_forward_bench
. bench/device/carry.sh tlt
. bench/device/fwdruns.sh
NEW=$F
MPI_VARS="WEFT_TP_FUSED_LL_ROWS WEFT_DECODE_STREAM_SEGMENT_KEYS"
read -ra mpi2 <<<"$(mpi_np 2)"
if [ "${TESTS:-1}" = 1 ]; then
  st "tests"
  CUDA_VISIBLE_DEVICES=0 timeout 200 $B/kernels_test --gtest_color=no \
    --gtest_filter='*DecodeAttention*:*CudaGemv*:*AddNorm*:*Norm*:*CudaQuantGemv*:*Linear*' >"$O/kt.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout 200 $B/model_cuda_test --gtest_color=no >"$O/mt.log" 2>&1
  wait
  timeout 150 "${mpi2[@]}" $B/nccl_communicator_test --gtest_color=no \
    --gtest_filter='NcclFusedNorm*' >"$O/nfn.log" 2>&1
  echo "nfn rc=$?"
  timeout 240 "${mpi2[@]}" $B/cuda_tensor_parallel_test --gtest_color=no >"$O/tpt.log" 2>&1
  echo "tpt rc=$?"
  for f in kt mt nfn tpt; do
    echo "$f: $(grep -E '^\[  (PASSED|FAILED) ' "$O/$f.log" | sort -u | tr '\n' ' ')"
    grep -E "^\[  FAILED|Failure" "$O/$f.log" | sort -u | head -8
  done
  grep -E "measured.*CUDA graphs" "$O/nfn.log" | sort -u | head -8
fi
if [ "${FWD:-1}" = 1 ]; then
  st "TP=2, batch 1: new / new with 256-key segments / old, alternating"
  for k in 1 2; do
    fb tp2_new$k -- "${mpi2[@]}" "$NEW" --tensor-parallel 2 --batches 1
    fb tp2_new_s256_$k WEFT_DECODE_STREAM_SEGMENT_KEYS=256 -- "${mpi2[@]}" "$NEW" --tensor-parallel 2 --batches 1
    fb tp2_old$k -- "${mpi2[@]}" "$OLD" --tensor-parallel 2 --batches 1
  done
  st "TP=2, batches 16, 64, 256: new / old"
  fb tp2_big_new -- "${mpi2[@]}" "$NEW" --tensor-parallel 2 --batches 16,64,256
  fb tp2_big_old -- "${mpi2[@]}" "$OLD" --tensor-parallel 2 --batches 16,64,256
  st "one GPU, new | old at once on the two GPUs (swapped in round 2)"
  for k in 1 2; do
    gn=$((k - 1)) go=$((2 - k))  # round 2 swaps the GPUs
    for a in "--batches 1" "--batches 1 --small-step-kernel-tokens 1" "--batches 1 --quantize q4_b32"; do
      n=$(echo "$a" | tr -dc 'a-z0-9' | sed 's/batches1//')
      # shellcheck disable=SC2086
      fb tp1_new_${n:-cublas}$k CUDA_VISIBLE_DEVICES=$gn -- "$NEW" $a >"$O/l0" &
      # shellcheck disable=SC2086
      fb tp1_old_${n:-cublas}$k CUDA_VISIBLE_DEVICES=$go -- "$OLD" $a >"$O/l1"
      wait; cat "$O/l0" "$O/l1"
    done
  done
  rm -f "$O/l0" "$O/l1"
fi
st end
