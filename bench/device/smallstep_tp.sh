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
mpi2=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH
  -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR -x NCCL_NVLS_ENABLE -x WEFT_PDL_PRODUCTS -x WEFT_GEMV_GATED)
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
F=$B/cuda_forward_bench
fb() { # NAME ENV... -- COMMAND ARGS...: one forward bench, its decode rows
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 150 "$@" --shape 8b --context 512 --prefill "" --repeats 20 \
    >"$O/$name.txt" 2>&1
  echo "$name rc=$?: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ' | head -3 | tr '\n' ';')"
}
if [ "${FWD:-1}" = 1 ]; then
  st "TP=2, batch 1 (new defaults and without the gated product, alternating)"
  for k in 1 2; do
    fb tp2_new$k X=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
    fb tp2_nogated$k WEFT_GEMV_GATED=0 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1
  done
  fb tp2_cublas X=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1 --small-step-kernel-tokens 0
  fb tp2_prof X=1 -- "${mpi2[@]}" $F --tensor-parallel 2 --batches 1,64 --profile
  grep -E "profile" "$O/tp2_prof.txt" | head -4
  st "TP=1, two runs at a time (GPU 0 | GPU 1)"
  pair() { # NAME0 ENV0 ARGS0 NAME1 ENV1 ARGS1 (batch 1)
    fb "$1" CUDA_VISIBLE_DEVICES=0 $2 -- $F --batches 1 $3 >"$O/$1.line" &
    fb "$4" CUDA_VISIBLE_DEVICES=1 $5 -- $F --batches 1 $6 >"$O/$4.line"
    wait; cat "$O/$1.line" "$O/$4.line"; rm -f "$O/$1.line" "$O/$4.line"
  }
  s1="--small-step-kernel-tokens 1"
  pair tp1_cublas X=1 "" tp1_ss1 X=1 "$s1"
  pair tp1_ss1_nogated WEFT_GEMV_GATED=0 "$s1" tp1_ss1_b X=1 "$s1"
  pair tp1_ss1_c X=1 "$s1" tp1_ss1_nogated_b WEFT_GEMV_GATED=0 "$s1"
  pair tp1_ss1_d X=1 "$s1" tp1_cublas_b X=1 ""
fi
if [ "${ENG:-1}" = 1 ]; then
  . bench/device/model8b.sh
  st "model made"
  field() { echo "$2" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }
  w=(--model $M --device cuda --gpu-memory-fraction 0.85 --seed 1 --num-requests 8 --max-concurrency 1 --input-len 128 --output-len 128)
  for c in tp1 tp2; do
    case $c in
      tp1) l=(); a=() ;;
      tp2) l=("${mpi2[@]}"); a=(--tensor-parallel 2) ;;
    esac
    st "$c"
    line=$(timeout 150 "${l[@]}" $B/weft bench "${w[@]}" "${a[@]}" 2>"$O/$c.err" | grep -v '^NCCL' | tail -1)
    echo "$c: tok/s $(field output_tokens_per_s "$line"), TPOT p50 $(field tpot_ms_p50 "$line") p99 $(field tpot_ms_p99 "$line"), TTFT p50 $(field ttft_ms_p50 "$line"), failed $(field failed "$line")"
    [ -n "$line" ] || tail -3 "$O/$c.err"
  done
fi
st end
