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
# (The call of 2026-11-27 ran this script's first version, whose kernels_test filter caught
# only the add_norm cases, and TP=2 q4 rows the bench refuses.)
# Input: .devcarry/pdl/gpu.tar.xz (bin/{kernels_test,model_cuda_test,cuda_forward_bench}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/pdl"], command="bash bench/device/pdlprod.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-pdl}"
if [ "${TESTS:-1}" = 1 ]; then
  st "tests"
  CUDA_VISIBLE_DEVICES=0 timeout 150 $B/kernels_test --gtest_color=no \
    --gtest_filter='*CudaGemv*:*AddNorm*:*Linear*:*CudaQuantGemv*' >"$O/kt.log" 2>&1 &
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
. bench/device/fwdruns.sh
MPI_VARS="WEFT_PDL_PRODUCTS WEFT_ROW_KERNEL_TOKENS"
read -ra mpi2 <<<"$(mpi_np 2)"
st "TP=2, batch 1"
for v in 0 1; do
  fb tp2_ss_pdl$v WEFT_PDL_PRODUCTS=$v -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1 --small-step-kernel-tokens 1
  fb tp2_row_pdl$v WEFT_PDL_PRODUCTS=$v WEFT_ROW_KERNEL_TOKENS=1 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
fb tp2_base WEFT_PDL_PRODUCTS=1 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1 --profile
grep -E "profile" "$O/tp2_base.txt" | head -4
st "TP=1, two runs at a time (GPU 0 | GPU 1)"
s1="--batches 1 --small-step-kernel-tokens 1"
pair tp1_ss_pdl0 WEFT_PDL_PRODUCTS=0 "$s1" tp1_ss_pdl1 WEFT_PDL_PRODUCTS=1 "$s1"
pair tp1_ss_pdl1b WEFT_PDL_PRODUCTS=1 "$s1" tp1_ss_pdl0b WEFT_PDL_PRODUCTS=0 "$s1"
pair tp1_base WEFT_PDL_PRODUCTS=1 "--batches 1" tp1_base_prof WEFT_PDL_PRODUCTS=1 "--batches 1 --profile"
grep -E "profile" "$O/tp1_base_prof.txt" | head -4
q4="--batches 1,2 --quantize q4_b32"
pair tp1_q4_pdl0 WEFT_PDL_PRODUCTS=0 "$q4" tp1_q4_pdl1 WEFT_PDL_PRODUCTS=1 "$q4"
pair tp1_row_pdl0 "WEFT_PDL_PRODUCTS=0 WEFT_ROW_KERNEL_TOKENS=1" "--batches 1" \
  tp1_row_pdl1 "WEFT_PDL_PRODUCTS=1 WEFT_ROW_KERNEL_TOKENS=1" "--batches 1"
st done
