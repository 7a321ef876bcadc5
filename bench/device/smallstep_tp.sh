#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, afternoon): one-token steps through the
# small-step kernel under tensor parallelism by default (CudaModelOptions::
# small_step_kernel_tokens -1), with the gated MLP's activation
# in gate_up's product (cuda::gemv_gated; WEFT_GEMV_GATED=0 turns it off; a first version that
# put it in down's product, reading gate_up's fp32 rows, was slower) and the products launched with
# programmatic dependent launch (WEFT_PDL_PRODUCTS=0: plainly).
#   1. tests: kernels_test (the product kernels, norms, cuBLAS/gemv linear), model_cuda_test
#      (transformers' fixtures, graphs), cuda_tensor_parallel_test over both GPUs (TP=2 against
#      one GPU on every fixture, now with the small-step kernel in its one-token steps);
#   2. cuda_forward_bench, 8B shape, batch 1 at context 512, graph replay: TP=2 with the new
#      defaults, without the gated product, through cuBLAS (--small-step-kernel-tokens 0, the
#      old default); TP=1 (cuBLAS, its default) and with --small-step-kernel-tokens 1, two runs
#      at a time (GPU 0 | GPU 1);
#   3. weft bench end to end on the random 8B folder, one request at a time (8 requests of
#      128 + 128 tokens): one GPU against TP=2.
# Input: .devcarry/sst/gpu.tar.xz (bin/{kernels_test,model_cuda_test,cuda_forward_bench,
# cuda_tensor_parallel_test,weft}, lib/), the Llama-3 tokenizer in .devcarry/l3.
#   run(kind="nvidia-h200-x2", carry=[".devcarry/sst", ".devcarry/l3"], command="bash bench/device/smallstep_tp.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-sst}"
. bench/device/fwdruns.sh
MPI_VARS="WEFT_PDL_PRODUCTS WEFT_GEMV_GATED"
read -ra mpi2 <<<"$(mpi_np 2)"
if [ "${TESTS:-1}" = 1 ]; then
  st "tests"
  CUDA_VISIBLE_DEVICES=0 timeout 150 $B/kernels_test --gtest_color=no \
    --gtest_filter='*CudaGemv*:*AddNorm*:*Linear*' >"$O/kt.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout 150 $B/model_cuda_test --gtest_color=no \
    --gtest_filter='CudaModel.*:CudaReference*' >"$O/mt.log" 2>&1
  wait
  timeout 240 "${mpi2[@]}" $B/cuda_tensor_parallel_test --gtest_color=no >"$O/tpt.log" 2>&1
  echo "tpt rc=$?"
  for f in kt mt tpt; do
    echo "$f: $(grep -E '^\[  (PASSED|FAILED) ' "$O/$f.log" | sort -u | tr '\n' ' ')"
    grep -E "^\[  FAILED|Failure" "$O/$f.log" | sort -u | head -8
  done
  grep -E "measured.*(TP|rank|relative)" "$O/tpt.log" | sort -u | head -12
fi
if [ "${FWD:-1}" = 1 ]; then
  st "TP=2, batch 1 (new defaults and without the gated product, alternating)"
  for k in 1 2; do
    fb tp2_new$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
    fb tp2_nogated$k WEFT_GEMV_GATED=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
  done
  fb tp2_cublas -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1 --small-step-kernel-tokens 0
  fb tp2_prof -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1,64 --profile
  grep -E "profile" "$O/tp2_prof.txt" | head -4
  st "TP=1, two runs at a time (GPU 0 | GPU 1)"
  b1="--batches 1" s1="--batches 1 --small-step-kernel-tokens 1"
  pair tp1_cublas "" "$b1" tp1_ss1 "" "$s1"
  pair tp1_ss1_nogated WEFT_GEMV_GATED=0 "$s1" tp1_ss1_b "" "$s1"
  pair tp1_ss1_c "" "$s1" tp1_ss1_nogated_b WEFT_GEMV_GATED=0 "$s1"
  pair tp1_ss1_d "" "$s1" tp1_cublas_b "" "$b1"
fi
if [ "${ENG:-1}" = 1 ]; then
  st "engine, one request at a time"
  engine_b1 tp1 tp2
fi
st end
