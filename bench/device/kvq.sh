#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, afternoon; branch kvq): the streaming decode
# attention and the mma prefill on int8/fp8 KV pages. Tests, then attention alone per KV dtype
# (old CUDA-core kernel against the streaming one), then whole 8B decode steps and a 2048-token
# prefill per KV dtype. Input: .devcarry/kvq/gpu.tar.xz (bin/{kernels_test,model_cuda_test,
# cuda_forward_bench,cuda_decode_attention_bench}, lib/).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/kvq"], command="bash bench/device/kvq.sh")
# PHASES (default "tests attn steps").
set -u
start=$(date +%s)
. bench/device/carry.sh kvq
PHASES=${PHASES:-"tests attn steps"}
want() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
if want tests; then
  for t in kernels_test model_cuda_test; do
    s=$(date +%s)
    f='*Cuda*:DeviceInfo*'
    timeout 240 $d/bin/$t --gtest_filter="$f" --gtest_color=no > "$O/$t.log" 2>&1
    echo "$t rc=$? ($(( $(date +%s) - s )) s)"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|^\[  FAILED" "$O/$t.log" | sort | uniq -c | head -20
  done
fi
if want attn; then
  for dt in bf16 int8 fp8; do
    timeout 120 $d/bin/cuda_decode_attention_bench --kv-cache-dtype $dt --no-rope --kernels old,stream \
      --batches 64,128,256 --contexts 512,2048 --layers 8 > "$O/attn_$dt.txt" 2>&1
    echo "== attention alone, $dt KV (rc=$?)"; grep -vE "^\s*$" "$O/attn_$dt.txt" | tail -14
  done
fi
if want steps; then
  for dt in bf16 int8 fp8; do
    timeout 150 $d/bin/cuda_forward_bench --shape 8b --kv-cache-dtype $dt --gpu-memory-fraction 0.9 \
      --context 2048 --batches 64,128 --prefill 2048 --repeats 10 > "$O/steps_$dt.txt" 2>&1
    echo "== 8B steps, $dt KV, context 2048 (rc=$?)"; grep -E "^(decode|prefill|KV pool)" "$O/steps_$dt.txt" | head -8
  done
fi
echo "done in $(( $(date +%s) - start )) s"
