#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-27): compute-sanitizer over the few-token product
# kernels' tests after their programmatic-dependent-launch change and the gated gate_up
# product: memcheck, racecheck (gemv_rows' shared sums) and synccheck on kernels_test's
# CudaGemv cases, memcheck on the quantized lanes product's (1-2 tokens) cases.
# Input: .devcarry/sst/gpu.tar.xz (as smallstep_tp.sh).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/sst"], command="bash bench/device/sanitize_gemv.sh")
set -u
. bench/device/carry.sh "${CARRY:-sst}"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$CS" ] || { echo "no compute-sanitizer"; exit 2; }
for tool in memcheck racecheck synccheck; do
  timeout 200 "$CS" --tool $tool --error-exitcode 9 $B/kernels_test --gtest_color=no \
    --gtest_filter='*CudaGemv*' >"$O/$tool.log" 2>&1
  echo "$tool rc=$?: $(grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY|RACECHECK SUMMARY' "$O/$tool.log" | tr '\n' ' ')"
done
timeout 200 "$CS" --tool memcheck --error-exitcode 9 $B/kernels_test --gtest_color=no \
  --gtest_filter='*CudaQuantGemvProduct.MatchesDequantizeThenProduct/q4*lanes*' >"$O/quant.log" 2>&1
echo "quant lanes memcheck rc=$?: $(grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY' "$O/quant.log" | tr '\n' ' ')"
