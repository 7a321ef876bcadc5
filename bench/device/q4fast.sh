#!/usr/bin/env bash
# Issue #16 item 5 on one H100 (nvidia-h100-x1), under 10 minutes: the stream kernel
# (quant_gemv_stream.cu, WEFT_QUANT_GEMV=stream) against the lanes and mma kernels, and the
# default `auto` (stream for q4/q8 at every token count), docs/quantization.md "On the GPU".
#   1. tests: kernels_test's *CudaQuant* (every kernel, every format, 1-8 tokens, the fused
#      gate_up, batch invariance of mma and stream), model_cuda_test's quantized weft-tiny with
#      WEFT_QUANT_GEMV=stream and =lanes;
#   2. cuda_quant_gemv_bench --tokens 1 for q4_b32, q4_b64, q8_b32 (QF to change) through
#      lanes, mma and stream: per shape (4096x4096, 1024x4096, 6144x4096, 14336x4096,
#      28672x4096, 4096x14336, 128256x4096) us, GB/s and % of the copy bandwidth; the fused
#      gate_up; the 32 layers' products against their floor, bf16 in the same run; then
#      q4_b32 stream again with WEFT_QUANT_STREAM_BLOCKS=2 (2 blocks an SM instead of 3);
#   3. cuda_forward_bench, random 8B model, decode at context 512, batches 1 and 8: bf16, then
#      q4_b32 with WEFT_QUANT_GEMV=stream, lanes, mma (each run quantizes the random model on
#      the CPU, about a minute);
#   4. the products alone at 2, 4 and 8 tokens (q4_b32; lanes, mma, stream).
# Parts that would start after BUDGET_S (default 500 s) of the call are skipped; PARTS (default
# "1 2 3 4") picks parts. All four take more than one call's 10 minutes, so run it twice:
# PARTS="1 2" (tests, products: about 5 minutes), then PARTS="3 4" (decode: about 7). Writes
# $OUT/q4fast.md (the summary tables) and the logs beside it.
# The four binaries (stripped, with the MPI and simdjson libraries beside them), built with
# `cmake --preset release`:
#   cmake --build build/release -j2 --target kernels_test model_cuda_test \
#     cuda_quant_gemv_bench cuda_forward_bench
#   rm -rf .devcarry/q4f && mkdir -p .devcarry/q4f/bin .devcarry/q4f/lib
#   for b in tests/kernels/kernels_test tests/runtime/model_cuda_test bin/cuda_quant_gemv_bench \
#     bin/cuda_forward_bench; do strip -o .devcarry/q4f/bin/${b##*/} build/release/$b; done
#   for b in .devcarry/q4f/bin/*; do ldd $b | awk '/=> \// {print $3}'; done |
#     grep -E 'simdjson|libmpi|open-rte|open-pal|hwloc|libevent' | sort -u |
#     xargs -r -I{} cp -L {} .devcarry/q4f/lib/
#   tar -C .devcarry/q4f -cf - bin lib | xz -6 -T2 > .devcarry/q4fast.tar.xz
#   run(command="PARTS='1 2' bash bench/device/q4fast.sh .devcarry/q4fast.tar.xz",
#       carry=[".devcarry/q4fast.tar.xz"])
#   run(command="PARTS='3 4' bash bench/device/q4fast.sh .devcarry/q4fast.tar.xz",
#       carry=[".devcarry/q4fast.tar.xz"])
# (A folder with bin/ and lib/, e.g. from scripts/gpu-check --stage, works too.)
set -u
C=${1:-.devcarry/q4fast.tar.xz}
O=${OUT:-/tmp/out}
mkdir -p "$O"
R=$PWD
if [ -f "$C" ]; then
  mkdir -p /tmp/q4fast && tar -C /tmp/q4fast -xJf "$C" && C=/tmp/q4fast
elif [ -d "$R/$C" ]; then
  C=$R/$C
fi
B=$C/bin
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models \
  WEFT_TEST_SOURCE_DIR=$R
PARTS=" ${PARTS:-1 2 3 4} "
BUDGET=${BUDGET_S:-500}
QF=${QF:-q4_b32,q4_b64,q8_b32}
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
late() { [ $(($(date +%s) - t0)) -gt "$BUDGET" ]; }
S=$O/q4fast.md
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "# q4fast on $gpu ($(date -u +%FT%TZ))" >"$S"

if [[ $PARTS == *" 1 "* ]]; then
  st "1. tests"
  timeout 210 "$B/kernels_test" --gtest_filter='*CudaQuant*' --gtest_color=no \
    >"$O/kernels_quant.log" 2>&1
  rc=$?
  echo "kernels_test *CudaQuant* rc=$rc"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]|^\[  FAILED  \]|Failure|Expected|Which is' \
    "$O/kernels_quant.log" | head -30
  {
    echo
    echo "## Tests"
    echo
    echo "- kernels_test *CudaQuant*: rc=$rc, $(grep -E '^\[  PASSED  \] [0-9]' "$O/kernels_quant.log")"
    grep -E '^\[  FAILED  \] [A-Z]' "$O/kernels_quant.log" | head -20 | sed 's/^/  - /'
  } >>"$S"
  for k in stream lanes; do
    WEFT_QUANT_GEMV=$k timeout 120 "$B/model_cuda_test" --gtest_filter='CudaModel.Quantized*' \
      --gtest_color=no >"$O/model_quant_$k.log" 2>&1
    rc=$?
    echo "model_cuda_test CudaModel.Quantized* with $k rc=$rc"
    grep -E 'worst relative|^\[  (PASSED|FAILED) |Failure' "$O/model_quant_$k.log" | head -20
    echo "- model_cuda_test CudaModel.Quantized* (WEFT_QUANT_GEMV=$k): rc=$rc" >>"$S"
  done
fi

if [[ $PARTS == *" 2 "* ]] && ! late; then
  st "2. products, 1 token"
  timeout 200 "$B/cuda_quant_gemv_bench" --tokens 1 --formats "$QF" --kernels lanes,mma,stream \
    --no-reference >"$O/gemv_tokens1.txt" 2>&1
  echo "cuda_quant_gemv_bench --tokens 1 rc=$?"
  cat "$O/gemv_tokens1.txt"
  # The stream kernel with 2 blocks an SM instead of 3 (16 warps, 100 KB in flight).
  WEFT_QUANT_STREAM_BLOCKS=2 timeout 60 "$B/cuda_quant_gemv_bench" --tokens 1 --formats q4_b32 \
    --kernels stream --no-reference >"$O/gemv_tokens1_stream2.txt" 2>&1
  echo "stream with WEFT_QUANT_STREAM_BLOCKS=2 rc=$?"
  grep -E "^q4_b32 stream" "$O/gemv_tokens1_stream2.txt"
  {
    echo
    echo "## Products, 1 token (cuda_quant_gemv_bench --tokens 1 --formats $QF)"
    echo
    echo '```'
    cat "$O/gemv_tokens1.txt"
    echo
    echo "q4_b32 stream with WEFT_QUANT_STREAM_BLOCKS=2:"
    grep -E "^q4_b32 stream" "$O/gemv_tokens1_stream2.txt"
    echo '```'
  } >>"$S"
fi

if [[ $PARTS == *" 3 "* ]]; then
  st "3. decode, 8B, batches 1 and 8"
  {
    echo
    echo "## Decode steps, random 8B model, context 512 (cuda_forward_bench)"
    echo
    echo "| weights | kernel | batch 1 ms/step | tok/s | vs floor | batch 8 ms/step | tok/s |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
  } >>"$S"
  bf16_ms=
  decode() { # label, format ("" for bf16), kernel
    local label=$1 q=$2 k=$3
    if late; then
      echo "$label: skipped (past $BUDGET s of the call)"
      echo "| $q | $k | skipped | | | | |" >>"$S"
      return
    fi
    local args=(--shape 8b --batches 1,8 --prefill "" --context 512 --gpu-memory-fraction 0.9
      --repeats 20)
    [ -n "$q" ] && args+=(--quantize "$q")
    WEFT_QUANT_GEMV=$k timeout 150 "$B/cuda_forward_bench" "${args[@]}" >"$O/decode_$label.log" 2>&1
    local rc=$?
    local one eight
    one=$(awk '$1 == "decode" && $2 == 1 {print; exit}' "$O/decode_$label.log")
    eight=$(awk '$1 == "decode" && $2 == 8 {print; exit}' "$O/decode_$label.log")
    echo "$label (rc=$rc): $one | $eight"
    # decode BATCH CONTEXT ms/step tokens/s vs-floor ...
    local ms1 tps1 fl1 ms8 tps8
    ms1=$(echo "$one" | awk '{print $4}')
    tps1=$(echo "$one" | awk '{print $5}')
    fl1=$(echo "$one" | awk '{print $6}')
    ms8=$(echo "$eight" | awk '{print $4}')
    tps8=$(echo "$eight" | awk '{print $5}')
    [ -z "$q" ] && bf16_ms=$ms1
    local ratio=
    if [ -n "$bf16_ms" ] && [ -n "$ms1" ] && [ -n "$q" ]; then
      ratio=" ($(awk -v a="$bf16_ms" -v b="$ms1" 'BEGIN {printf "%.2fx bf16", a / b}'))"
    fi
    echo "| ${q:-bf16} | $k | ${ms1:-rc=$rc}$ratio | $tps1 | $fl1 | $ms8 | $tps8 |" >>"$S"
  }
  echo "columns: decode BATCH CONTEXT ms/step tokens/s vs-floor bound weights-floor"
  decode bf16 "" auto
  decode q4_stream q4_b32 stream
  decode q4_lanes q4_b32 lanes
  decode q4_mma q4_b32 mma
fi

if [[ $PARTS == *" 4 "* ]]; then
  st "4. products at 2, 4, 8 tokens"
  {
    echo
    echo "## Decode products at 2-8 tokens (cuda_quant_gemv_bench --formats q4_b32, table 2)"
    echo
    echo '```'
  } >>"$S"
  for n in 2 4 8; do
    if late; then
      echo "tokens $n: skipped (past $BUDGET s of the call)"
      continue
    fi
    timeout 90 "$B/cuda_quant_gemv_bench" --tokens $n --formats q4_b32 --kernels lanes,mma,stream \
      --no-reference >"$O/gemv_tokens$n.txt" 2>&1
    echo "tokens $n rc=$?"
    sed -n '/decode products/,$p' "$O/gemv_tokens$n.txt" | tee -a "$S"
  done
  echo '```' >>"$S"
fi
st done
cat "$S"
