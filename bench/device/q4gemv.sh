#!/usr/bin/env bash
# The quantized-product kernels on one H100 (nvidia-h100-x1), under 10 minutes: the tensor-core
# kernel ("mma", quant_gemv_mma.cu) against the CUDA-core one ("lanes"), docs/quantization.md
# "On the GPU".
#   1. tests: kernels_test's *CudaQuant* (both kernels, every format, 1-8 tokens, the fused
#      gate_up), model_cuda_test's quantized weft-tiny with WEFT_QUANT_GEMV=mma and =lanes;
#   2. cuda_quant_gemv_bench --tokens 1: per product and per decode step, lanes against mma, for
#      q4_b32, q4_b64, q8_b32, q2_b32 (QF to change), bf16 in the same run; then the decode
#      products alone at 4 and 8 tokens for q4_b32;
#   3. cuda_forward_bench, random 8B model, batch-1 decode at context 512: bf16, then q4_b32 with
#      lanes, with mma, with mma but WEFT_QUANT_GATED=0 (gate_up and activation apart), with mma
#      but WEFT_QUANT_GEMV_PREFETCH=0, with mma and WEFT_PDL=0; last, mma with --profile (each
#      run quantizes the random model on the CPU, about a minute; runs that would start after
#      BUDGET_S, default 480 s, are skipped so the call ends within 10 minutes).
# The four binaries (stripped, about 70 MB: over the 64 MiB a call carries, so as an xz
# tarball of bin/ and lib/, about 18 MB), built here with `cmake --preset release`:
#   cmake --build build/release -j2 --target kernels_test model_cuda_test \
#     cuda_quant_gemv_bench cuda_forward_bench
#   mkdir -p .devcarry/q4/bin .devcarry/q4/lib
#   for b in tests/kernels/kernels_test tests/runtime/model_cuda_test bin/cuda_quant_gemv_bench \
#     bin/cuda_forward_bench; do strip -o .devcarry/q4/bin/${b##*/} build/release/$b; done
#   for b in .devcarry/q4/bin/*; do ldd $b | awk '/=> \// {print $3}'; done |
#     grep -E 'simdjson|libmpi|open-rte|open-pal|hwloc|libevent' | sort -u |
#     xargs -r -I{} cp -L {} .devcarry/q4/lib/
#   tar -C .devcarry/q4 -cf - bin lib | xz -6 -T2 > .devcarry/q4gemv.tar.xz
#   run(command="bash bench/device/q4gemv.sh .devcarry/q4gemv.tar.xz",
#       carry=[".devcarry/q4gemv.tar.xz"])
# (A folder with bin/ and lib/, e.g. from scripts/gpu-check --stage, works too.)
set -u
C=${1:-.devcarry/q4gemv.tar.xz}
O=${OUT:-/tmp/out}
mkdir -p "$O"
R=$PWD
if [ -f "$C" ]; then
  mkdir -p /tmp/q4gemv && tar -C /tmp/q4gemv -xJf "$C" && C=/tmp/q4gemv
else
  C=$R/$C
fi
B=$C/bin
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models \
  WEFT_TEST_SOURCE_DIR=$R
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

st "1. tests"
timeout 120 "$B/kernels_test" --gtest_filter='*CudaQuant*' --gtest_color=no >"$O/kernels_quant.log" 2>&1
echo "kernels_test *CudaQuant* rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]|^\[  FAILED  \]|Failure|Expected|Which is' \
  "$O/kernels_quant.log" | head -30
for k in mma lanes; do
  WEFT_QUANT_GEMV=$k timeout 120 "$B/model_cuda_test" --gtest_filter='CudaModel.Quantized*' \
    --gtest_color=no >"$O/model_quant_$k.log" 2>&1
  echo "model_cuda_test CudaModel.Quantized* with $k rc=$?"
  grep -E 'worst relative|^\[  (PASSED|FAILED) |Failure' "$O/model_quant_$k.log" | head -20
done

st "2. products"
timeout 150 "$B/cuda_quant_gemv_bench" --tokens 1 --formats "${QF:-q4_b32,q4_b64,q8_b32,q2_b32}" \
  --kernels lanes,mma --no-reference 2>&1 | tee "$O/gemv.txt"

for n in 4 8; do  # decode batches: the mma kernel's 2 and 4 token pairs
  timeout 60 "$B/cuda_quant_gemv_bench" --tokens $n --formats q4_b32 --kernels lanes,mma \
    --no-reference 2>&1 | tee "$O/gemv_tokens$n.txt" | sed -n '/decode products/,$p'
done

st "3. batch-1 decode, 8B"
decode() {  # label, then environment assignments; Q: the format ("" for bf16)
  local label=$1
  shift
  if [ $(($(date +%s) - t0)) -gt "${BUDGET_S:-480}" ]; then
    echo "$label: skipped (past ${BUDGET_S:-480} s of the call)"
    return
  fi
  local args=(--shape 8b --batches 1 --prefill "" --context 512 --gpu-memory-fraction 0.9)
  [ -n "$Q" ] && args+=(--quantize "$Q")
  env "$@" timeout 110 "$B/cuda_forward_bench" "${args[@]}" ${EXTRA:-} >"$O/decode_$label.log" 2>&1
  echo "$label (rc=$?): $(awk '$1 == "decode" && $2 == 1 {print; exit}' "$O/decode_$label.log")"
}
echo "columns: decode BATCH CONTEXT ms/step tokens/s vs-floor bound weights-floor"
Q= decode bf16
Q=q4_b32 decode q4_lanes WEFT_QUANT_GEMV=lanes
Q=q4_b32 decode q4_mma WEFT_QUANT_GEMV=mma
Q=q4_b32 decode q4_mma_unfused WEFT_QUANT_GATED=0
Q=q4_b32 decode q4_mma_noprefetch WEFT_QUANT_GEMV_PREFETCH=0
Q=q4_b32 decode q4_mma_nopdl WEFT_PDL=0
st "profile"
Q=q4_b32 EXTRA=--profile decode q4_mma_profile WEFT_QUANT_GEMV=mma
sed -n '/profile/,$p' "$O/decode_q4_mma_profile.log" | head -40
st done
