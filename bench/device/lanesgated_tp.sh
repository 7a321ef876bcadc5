#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, last): the lanes quantized product's gated
# form (quant_gemv_gated at 1-2 tokens: gate_up ending in its activation; WEFT_QUANT_GATED=0
# turns every gated product off; measured slower and not merged: docs/notes/lanesgated.md holds
# the change its binaries were built with) and the L2 prefetch and decode-attention switches at TP=2
# batch 1 under the new defaults.
#   1. kernels_test's gated products (every format, bf16/fp16, lanes bitwise against its
#      product and mlp_activation) and the CudaGemv cases on GPU 0, model_cuda_test's
#      quantized model against the CPU on GPU 1;
#   2. cuda_forward_bench --shape 8b --quantize q4_b32 --batches 1,2 (one GPU each, two at a
#      time, alternating sides): WEFT_QUANT_GATED=0 against the default;
#   3. TP=2 batch 1 (bf16): the defaults, WEFT_L2_PREFETCH_MB=0 (no L2 prefetch),
#      WEFT_TP_PREFETCH_MB=0 (the single-GPU caps), WEFT_DECODE_PARTS=1 (no split attention).
# Input: .devcarry/lg/gpu.tar.xz (bin/{kernels_test,model_cuda_test,cuda_forward_bench}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/lg"], command="bash bench/device/lanesgated_tp.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-lg}"
st tests
CUDA_VISIBLE_DEVICES=0 timeout 90 $B/kernels_test --gtest_color=no \
  --gtest_filter='*GatedProduct*:*CudaGemv*' >"$O/kt.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 90 $B/model_cuda_test --gtest_color=no \
  --gtest_filter='CudaModel.QuantizedWeightsAgreeWithTheCpuModel' >"$O/mt.log" 2>&1
wait
for f in kt mt; do
  echo "$f: $(grep -E '^\[  (PASSED|FAILED) ' "$O/$f.log" | tr '\n' ' ') ($(grep -c 'OK \]' "$O/$f.log") ok)"
  grep -E "^\[  FAILED|Failure" "$O/$f.log" | head -5
done
. bench/device/fwdruns.sh
FB_TIMEOUT=100
MPI_VARS="WEFT_L2_PREFETCH_MB WEFT_TP_PREFETCH_MB WEFT_DECODE_PARTS"
q4="--quantize q4_b32 --batches 1,2"
st "q4_b32, one GPU each (the gated product off on one side, sides swapped in round 2)"
pair q4_r1_gpu0 WEFT_QUANT_GATED=0 "$q4" q4_r1_gpu1 "" "$q4"
pair q4_r2_gpu0 "" "$q4" q4_r2_gpu1 WEFT_QUANT_GATED=0 "$q4"
st "TP=2 batch 1"
read -ra mpi2 <<<"$(mpi_np 2)"
fb tp2_default -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp2_noprefetch WEFT_L2_PREFETCH_MB=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp2_tpprefetch0 WEFT_TP_PREFETCH_MB=0 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp2_parts1 WEFT_DECODE_PARTS=1 -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
fb tp2_default_b -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
st end
