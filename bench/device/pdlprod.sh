#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, afternoon): the products of a few tokens (the
# small-step kernel gemv, the row kernel gemv_rows, the lanes quantized product) launched with
# programmatic dependent launch, loading their first weights before waiting on the kernel before
# (WEFT_PDL_PRODUCTS=0 launches them plainly, as before). Tests first (kernels_test's product,
# norm and quantized cases; model_cuda_test against transformers' fixtures with PDL products on,
# also with the row kernel on every decode step), then batch-1 decode of the 8B shape at
# context 512 (cuda_forward_bench, graph replay, best of 20) at TP=2 over both GPUs and at TP=1
# on each GPU (two runs at a time), per product path: cuBLAS (the default), the small-step kernel
# (--small-step-kernel-tokens 1), the row kernel (WEFT_ROW_KERNEL_TOKENS=1), q4_b32 (lanes),
# each with WEFT_PDL_PRODUCTS 0 and 1; the default rows with --profile (time per kernel class).
# Input: .devcarry/pdl/gpu.tar.xz (bin/{kernels_test,model_cuda_test,cuda_forward_bench}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/pdl"], command="bash bench/device/pdlprod.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-pdl}"
if [ "${TESTS:-1}" = 1 ]; then
  st "tests"
  CUDA_VISIBLE_DEVICES=0 timeout 150 $B/kernels_test --gtest_color=no \
    --gtest_filter='CudaGemv*:*AddNorm*:CudaKernels*Linear*:CudaQuantGemv*' >"$O/kt.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout 150 $B/model_cuda_test --gtest_color=no \
    --gtest_filter='CudaModel.*:CudaReference*' >"$O/mt.log" 2>&1
  wait
  CUDA_VISIBLE_DEVICES=1 WEFT_ROW_KERNEL_TOKENS=16 timeout 120 $B/model_cuda_test --gtest_color=no \
    --gtest_filter='CudaReference*:CudaModel.DecodeGraphs*:CudaModel.Agrees*' >"$O/mt_rows.log" 2>&1
  for f in kt mt mt_rows; do
    echo "$f: $(grep -E '^\[  (PASSED|FAILED) |tests ran' "$O/$f.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED|Failure|error" "$O/$f.log" | head -8
  done
fi
fb() { # NAME ENV... -- ARGS...: one forward bench, its decode rows
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 150 "$@" --shape 8b --context 512 --prefill "" --repeats 20 \
    >"$O/$name.txt" 2>&1
  echo "$name rc=$?: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ' | head -3 | tr '\n' ';')"
}
mpi2=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH
  -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE -x WEFT_PDL_PRODUCTS -x WEFT_ROW_KERNEL_TOKENS)
F=$B/cuda_forward_bench
st "TP=2, batch 1"
for v in 0 1; do
  fb tp2_ss_pdl$v WEFT_PDL_PRODUCTS=$v -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1 --small-step-kernel-tokens 1
  fb tp2_row_pdl$v WEFT_PDL_PRODUCTS=$v WEFT_ROW_KERNEL_TOKENS=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
done
fb tp2_base WEFT_PDL_PRODUCTS=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1 --profile
grep -E "profile|^ +[a-z_ +-]+ +[0-9.]+ ms" "$O/tp2_base.txt" | head -30
fb tp2_q4_pdl0 WEFT_PDL_PRODUCTS=0 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1,2 --quantize q4_b32
fb tp2_q4_pdl1 WEFT_PDL_PRODUCTS=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1,2 --quantize q4_b32
st "TP=1, two runs at a time (GPU 0 | GPU 1)"
pair() { # NAME0 ENV0 NAME1 ENV1 ARGS: the same args on both GPUs, each with its env
  local n0=$1 e0=$2 n1=$3 e1=$4; shift 4
  fb "$n0" CUDA_VISIBLE_DEVICES=0 $e0 -- $F "$@" >"$O/$n0.line" &
  fb "$n1" CUDA_VISIBLE_DEVICES=1 $e1 -- $F "$@" >"$O/$n1.line"
  wait; cat "$O/$n0.line" "$O/$n1.line"
}
pair tp1_ss_pdl0 WEFT_PDL_PRODUCTS=0 tp1_ss_pdl1 WEFT_PDL_PRODUCTS=1 --batches 1 --small-step-kernel-tokens 1
pair tp1_ss_pdl1b WEFT_PDL_PRODUCTS=1 tp1_ss_pdl0b WEFT_PDL_PRODUCTS=0 --batches 1 --small-step-kernel-tokens 1
pair tp1_base WEFT_PDL_PRODUCTS=1 tp1_base_prof WEFT_PDL_PRODUCTS=1 --batches 1 --profile
grep -E "profile|^ +[a-z_ +-]+ +[0-9.]+ ms" "$O/tp1_base_prof.txt" | head -30
pair tp1_q4_pdl0 WEFT_PDL_PRODUCTS=0 tp1_q4_pdl1 WEFT_PDL_PRODUCTS=1 --batches 1,2 --quantize q4_b32
pair tp1_row_pdl0 "WEFT_PDL_PRODUCTS=0 WEFT_ROW_KERNEL_TOKENS=1" tp1_row_pdl1 "WEFT_PDL_PRODUCTS=1 WEFT_ROW_KERNEL_TOKENS=1" --batches 1
st done
