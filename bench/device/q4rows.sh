#!/usr/bin/env bash
# Device call on one GPU (issue #16): 8 rows per block in the one-token q4 lanes product, which
# q4exp.sh found 4-7% faster on the q4_b32 step. Checks and measures before it lands:
#   1. kernels_test '*CudaQuant*q4*' of the build with 8 rows (every q4 case: the sums unchanged);
#   2. cuda_forward_bench --shape 8b --context 512 --prefill "" --repeats 20 --batches 1: q4_b32 with
#      8 rows (the new build) against 4 (the experiment build of q4exp.sh, unset), and q4_b64 with
#      the experiment build's WEFT_EXP_QUANT_ROWS=8 against 4, alternating.
#   run(kind="nvidia-h100-x1", carry=[".devcarry/qr8", ".devcarry/qexp"], command="bash bench/device/q4rows.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh qexp >/dev/null
EXP=$B/cuda_forward_bench
. bench/device/carry.sh qr8
timeout 100 $B/kernels_test --gtest_color=no --gtest_filter='*CudaQuant*q4*' >"$O/kt.log" 2>&1
echo "kernels_test q4: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED" "$O/kt.log" | head -5
st steps
fbq() {
  local name=$1 bin=$2 fmt=$3; shift 3
  env "$@" timeout 60 "$bin" --shape 8b --context 512 --prefill "" --repeats 20 --batches 1 \
    --quantize "$fmt" >"$O/$name.txt" 2>&1
  echo "$name: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ')"
}
fbq b32_rows8 $B/cuda_forward_bench q4_b32
fbq b32_rows4 $EXP q4_b32
fbq b64_rows8 $EXP q4_b64 WEFT_EXP_QUANT_ROWS=8
fbq b64_rows4 $EXP q4_b64
fbq b32_rows8_2 $B/cuda_forward_bench q4_b32
st end
