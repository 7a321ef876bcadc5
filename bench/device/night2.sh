#!/usr/bin/env bash
# Device call on one H100 (session of 2026-11-25, night): the merged branches' GPU tests (the
# pipelined decode attention, the tensor-core quantized products, the GPU draft model, the CUDA
# encoder-decoder model), then the two new kernels against the old ones in one run.
# Input: .devcarry/n2/gpu.tar.xz (weft, kernels_test, model_cuda_test, executor_cuda_test,
# cuda_forward_bench, cuda_quant_gemv_bench + lib/), built from main with cmake --preset release.
set -u
O=${OUT:-/tmp/out}; W=/tmp/work; mkdir -p $O $W
R=$PWD; G=$R/.devcarry/gpu; mkdir -p $G && tar -C $G -xJf .devcarry/n2/gpu.tar.xz
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models WEFT_TEST_SOURCE_DIR=$R
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 $G/bin/kernels_test --gtest_filter='*Cuda*:DeviceInfo*' --gtest_color=no > $W/kernels_test.log 2>&1 & a=$!
timeout 240 $G/bin/model_cuda_test --gtest_color=no > $W/model_cuda_test.log 2>&1 & b=$!
timeout 240 $G/bin/executor_cuda_test --gtest_color=no > $W/executor_cuda_test.log 2>&1 & c=$!
wait $a; echo "kernels_test rc=$?"; wait $b; echo "model_cuda_test rc=$?"; wait $c; echo "executor_cuda_test rc=$?"
for f in kernels_test model_cuda_test executor_cuda_test; do grep -E "^\[  (PASSED|SKIPPED) |^\[  FAILED  \]" $W/$f.log | sort -u | head -20; done
grep -h "measured" $W/*.log | head -40 > $O/measured.txt
st "tests done"
timeout 100 $G/bin/cuda_quant_gemv_bench --tokens 1 --formats q4_b32,q8_b32 > $W/gemv.log 2>&1; echo "gemv rc=$?"; tail -30 $W/gemv.log
st "gemv done"
for k in lanes mma; do
  WEFT_QUANT_GEMV=$k timeout 80 $G/bin/cuda_forward_bench --shape 8b --quantize q4_b32 --batches 1,8 --prefill "" --repeats 20 > $W/q4_$k.log 2>&1; echo "q4 $k rc=$?"; grep -E "decode|floor" $W/q4_$k.log | tail -4
done
timeout 60 $G/bin/cuda_forward_bench --shape 8b --batches 1 --prefill "" --repeats 20 > $W/bf16.log 2>&1; echo "bf16 rc=$?"; grep -E "decode|floor" $W/bf16.log | tail -3
st "q4 done"
WEFT_DECODE_ATTN=new timeout 150 $G/bin/cuda_forward_bench --shape 8b --context 512 --batches 64,256 --prefill "" --profile > $W/attn.log 2>&1; echo "attn rc=$?"; grep -iE "decode|attention|floor" $W/attn.log | tail -16
st end
tar czf $O/work.tgz -C $W . 2>/dev/null; ls -la $O
