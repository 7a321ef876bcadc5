#!/usr/bin/env bash
# Device call on one GPU at the end of a session (2026-11-26): main's GPU tests after the merges
# (kernels_test's CUDA suites, model_cuda_test, executor_cuda_test, in parallel on the one GPU),
# the encoder-decoder end-to-end checks of bench/device/seq2seq_gpu.sh (weft generate, bench and
# serve with --device cuda), then bench/gpu_speculative.sh on weft-tiny (prompt lookup, the
# weft-tiny-draft model on the GPU and on the CPU, self-drafting; batch 1 and 64).
# Input: .devcarry/fin/gpu.tar.xz (bin/{weft,kernels_test,model_cuda_test,executor_cuda_test},
# lib/), packed here with strip + xz -9e from a build of main (cmake --preset release).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/fin"], command="bash bench/device/final_gpu.sh")
# PHASES="tests e2e spec" picks phases. Logs and a summary under $OUT.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O/t"
R=$PWD; G=$R/.devcarry/gpu
mkdir -p "$G" && tar -C "$G" -xJf .devcarry/fin/gpu.tar.xz
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models WEFT_TEST_SOURCE_DIR=$R
PHASES=${PHASES:-tests e2e spec}
want() { [[ " $PHASES " == *" $1 "* ]]; }
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if want tests; then
  timeout 300 "$G/bin/kernels_test" --gtest_filter='*Cuda*:DeviceInfo*' --gtest_color=no > "$O/t/kernels_test.log" 2>&1 & a=$!
  timeout 300 "$G/bin/model_cuda_test" --gtest_color=no > "$O/t/model_cuda_test.log" 2>&1 & b=$!
  timeout 300 "$G/bin/executor_cuda_test" --gtest_color=no > "$O/t/executor_cuda_test.log" 2>&1 & c=$!
  wait $a; echo "kernels_test rc=$?"; wait $b; echo "model_cuda_test rc=$?"; wait $c; echo "executor_cuda_test rc=$?"
  for f in kernels_test model_cuda_test executor_cuda_test; do
    echo "-- $f"; grep -E "^\[  PASSED  \]|^\[  FAILED  \]" "$O/t/$f.log" | sort -u | head -12
  done
  grep -h "measured" "$O"/t/*.log | head -80 > "$O/measured.txt"
  st "tests done"
fi
if want e2e; then
  OUT=$O/e2e timeout 240 bash bench/device/seq2seq_gpu.sh 2>&1 | grep -E "^PASS|^FAIL|seq2seq_gpu:" 
  st "e2e done"
fi
if want spec; then
  timeout ${SPEC_S:-240} bash bench/gpu_speculative.sh --bin "$G/bin" --batches "${SPEC_BATCHES:-1 64}" > "$O/spec.log" 2>&1
  echo "gpu_speculative rc=$?"; grep -vE "^\s*$" "$O/spec.log" | tail -40
  st "spec done"
fi
cd "$O" && tar czf logs.tgz --exclude=logs.tgz . 2>/dev/null
