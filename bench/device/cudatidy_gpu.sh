#!/usr/bin/env bash
# Device call for the cudatidy branch (2026-11-26) on one GPU: the tensor-core decode attention
# kernels' shared prologue (kernels/cuda/decode_prologue.cuh: query load, fused rope and the
# token's own K/V row, now one copy for the per-split, pipelined and streaming kernels) and the
# CUDA encoder / encoder-decoder weight upload (runtime/model/cuda/weight_upload.cpp).
# - kernels_test's CUDA suites: each decode kernel against the CPU and the split kernel, bitwise
#   the same for every cut and batch, and with AttentionArgs::rope_inv_freq bitwise
#   rope_store_kv followed by the kernel (CudaDecodeAttention*, CudaKernels.DecodeAttention*,
#   the latter once more under WEFT_DECODE_ATTN=old and new);
# - model_cuda_test once per WEFT_DECODE_ATTN (stream, old = per-split, new = pipelined): every
#   fixture against transformers through that kernel, and the CUDA encoder and seq2seq suites;
# - executor_cuda_test (the engine on the GPU, seq2seq included).
# Input: .devcarry/ct/gpu.tar.xz (bin/{kernels_test,model_cuda_test,executor_cuda_test}, lib/),
# packed from a release build of the branch:
#   BUILD=build/release bash /work/wt/pack_gpu.sh /work/wt/cudatidy ct kernels_test \
#     model_cuda_test executor_cuda_test
#   run(kind="nvidia-h100-x1", carry=[".devcarry/ct"], command="bash bench/device/cudatidy_gpu.sh")
# Prints rc and the PASSED/FAILED lines per run; logs under $OUT.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O/t"
R=$PWD; G=$R/.devcarry/gpu
mkdir -p "$G" && tar -C "$G" -xJf .devcarry/ct/gpu.tar.xz
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models WEFT_TEST_SOURCE_DIR=$R
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
report() {  # log names
  for f in "$@"; do
    echo "-- $f"; grep -E "^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]" "$O/t/$f.log" | sort -u | head -12
  done
}
timeout 280 "$G/bin/kernels_test" --gtest_filter='*Cuda*:DeviceInfo*:DecodeAttentionKernel*' \
  --gtest_color=no > "$O/t/kernels_test.log" 2>&1 & a=$!
WEFT_DECODE_ATTN=stream timeout 280 "$G/bin/model_cuda_test" --gtest_color=no \
  > "$O/t/model_cuda_test_stream.log" 2>&1 & b=$!
timeout 280 "$G/bin/executor_cuda_test" --gtest_color=no > "$O/t/executor_cuda_test.log" 2>&1 & c=$!
wait $a; echo "kernels_test rc=$?"; wait $b; echo "model_cuda_test (stream) rc=$?"
wait $c; echo "executor_cuda_test rc=$?"
st "first round done"
WEFT_DECODE_ATTN=old timeout 250 "$G/bin/model_cuda_test" --gtest_color=no \
  > "$O/t/model_cuda_test_old.log" 2>&1 & a=$!
WEFT_DECODE_ATTN=new timeout 250 "$G/bin/model_cuda_test" --gtest_color=no \
  > "$O/t/model_cuda_test_new.log" 2>&1 & b=$!
wait $a; echo "model_cuda_test (old) rc=$?"; wait $b; echo "model_cuda_test (new) rc=$?"
st "second round done"
# CudaKernels.DecodeAttention* run the process's kernel (stream above): the per-split and
# pipelined kernels' fused rope through them too.
for k in old new; do
  WEFT_DECODE_ATTN=$k timeout 120 "$G/bin/kernels_test" --gtest_filter='*CudaKernels.DecodeAttention*' \
    --gtest_color=no > "$O/t/kernels_test_$k.log" 2>&1
  echo "kernels_test CudaKernels.DecodeAttention* ($k) rc=$?"
done
report kernels_test kernels_test_old kernels_test_new model_cuda_test_stream model_cuda_test_old \
  model_cuda_test_new executor_cuda_test
grep -h "FAILED\|Failure" "$O"/t/*.log | head -40
