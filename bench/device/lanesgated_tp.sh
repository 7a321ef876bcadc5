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
F=$B/cuda_forward_bench
fb() { # NAME ENV... -- COMMAND ARGS...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 100 "$@" --shape 8b --context 512 --prefill "" --repeats 20 \
    >"$O/$name.txt" 2>&1
  echo "$name rc=$?: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ' | cut -d' ' -f1-6 | tr '\n' ';')"
}
st "q4_b32, one GPU each"
for round in 1 2; do
  a=WEFT_QUANT_GATED=0; b=X=1
  [ $round = 2 ] && { a=X=1; b=WEFT_QUANT_GATED=0; }
  fb q4_r${round}_gpu0 CUDA_VISIBLE_DEVICES=0 $a -- $F --quantize q4_b32 --batches 1,2 >"$O/l0" &
  fb q4_r${round}_gpu1 CUDA_VISIBLE_DEVICES=1 $b -- $F --quantize q4_b32 --batches 1,2 >"$O/l1"
  wait; echo "($a | $b)"; cat "$O/l0" "$O/l1"; rm -f "$O/l0" "$O/l1"
done
st "TP=2 batch 1"
mpi2=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH
  -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE -x WEFT_L2_PREFETCH_MB -x WEFT_TP_PREFETCH_MB -x WEFT_DECODE_PARTS)
fb tp2_default X=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
fb tp2_noprefetch WEFT_L2_PREFETCH_MB=0 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
fb tp2_tpprefetch0 WEFT_TP_PREFETCH_MB=0 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
fb tp2_parts1 WEFT_DECODE_PARTS=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
fb tp2_default_b X=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
st end
