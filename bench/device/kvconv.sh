#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-26, afternoon): (1) nccl_communicator_test over 2
# ranks after its graph test took over the timed one (main at 7971304; .devcarry/ncc), then
# (2) branch kvconv's cheaper one-byte KV tile conversion on GPU 0: its tests and attention
# alone on int8/fp8 pages against bf16 ones (.devcarry/kvc: kernels_test, model_cuda_test,
# cuda_decode_attention_bench).
#   run(kind="nvidia-h100-x2", carry=[".devcarry/ncc", ".devcarry/kvc"], command="bash bench/device/kvconv.sh")
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
start=$(date +%s)
for p in ncc kvc; do mkdir -p /tmp/$p && tar -C /tmp/$p -xJf .devcarry/$p/gpu.tar.xz; done
export LD_LIBRARY_PATH=/tmp/kvc/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models WEFT_TEST_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH \
  -x NCCL_NVLS_ENABLE /tmp/ncc/bin/nccl_communicator_test --gtest_color=no > "$O/nccl.log" 2>&1
echo "nccl_communicator_test np2 rc=$?"
grep -E "^\[  (PASSED|FAILED) |measured \].*GPUs in CUDA graphs|Failure" "$O/nccl.log" | sort -u | head
export CUDA_VISIBLE_DEVICES=0
B=/tmp/kvc/bin
timeout 200 $B/kernels_test --gtest_filter='CudaKvQuant*:*DecodeAttentionStream*:*DecodeAttention*' --gtest_color=no > "$O/kernels.log" 2>&1
echo "kernels_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/kernels.log" | tr '\n' ' ')"
grep -E "^\[  FAILED" "$O/kernels.log" | head
timeout 120 $B/model_cuda_test --gtest_filter='CudaKvQuantModel*:CudaKvCompressModel*' --gtest_color=no > "$O/model.log" 2>&1
echo "model_cuda_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/model.log" | tr '\n' ' ')"
for dt in bf16 int8 fp8; do
  timeout 90 $B/cuda_decode_attention_bench --kv-cache-dtype $dt --no-rope --kernels stream \
    --batches 64,256 --contexts 512,2048 --layers 8 > "$O/attn_$dt.txt" 2>&1
  echo "== attention alone, $dt (rc=$?)"; grep -E "^ +[0-9]+ +[0-9]+ stream" "$O/attn_$dt.txt"
done
echo "done in $(( $(date +%s) - start )) s"
