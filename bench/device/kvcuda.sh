#!/usr/bin/env bash
# Device call on one H100: KV-Compress on the CUDA backend (docs/kv-compress.md). First its GPU
# tests (the kernels against the CPU's, the CUDA model against the CPU model, the engine's
# pool accounting), then throughput at a fixed KV budget on a Llama-3-8B-shaped model with
# random bf16 weights (bench/make_random_model.py), rates 0, 0.5 and 0.75, through
# bench/kv_compress_budget.sh. The table goes to $OUT/kvcuda.txt, each run's JSON beside it.
#
# Here:  bench/device/kvcuda.sh --stage    (builds weft and the three GPU test binaries in
#        build/release and packs them stripped, with the shared libraries the device machine
#        lacks, into .devcarry/kvcuda/gpu.tar.xz); the Llama-3 tokenizer in .devcarry/l3
#        (bench/gpu_8b.sh says how)
# There: run(command="bash bench/device/kvcuda.sh", carry=[".devcarry/kvcuda", ".devcarry/l3"])
# Knobs (environment): WEFT_CARRY (default .devcarry/kvcuda), MODEL_DIR (/tmp/llama8b),
# BUDGET_MB (2048: 1,024 pages of 16 tokens of the 8B shape's bf16 KV), REQUESTS (256), INPUT
# (1024), OUTPUT (128), RATES ("0.5 0.75"), SKIP_TESTS=1.
set -u
cd "$(dirname "$0")/../.."
C=${WEFT_CARRY:-.devcarry/kvcuda}
if [ "${1:-}" = --stage ]; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  [ -f build/release/CMakeCache.txt ] || cmake --preset release
  cmake --build build/release -j2 --target weft kernels_test model_cuda_test executor_cuda_test
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib"
  cp build/release/bin/weft build/release/tests/kernels/kernels_test \
    build/release/tests/runtime/model_cuda_test build/release/tests/actors/executor_cuda_test "$C/bin/"
  strip "$C"/bin/*
  for b in "$C"/bin/*; do ldd "$b" | awk '/=> \// {print $3}' | grep -E 'simdjson|benchmark|fmt' || true; done |
    sort -u | xargs -r -I{} cp -L {} "$C/lib/"
  # Packed: the CUDA kernels, repeated in every binary, compress to one copy (the carry holds
  # 64 MiB).
  tar -C "$C" -cf - bin lib | xz -9e -T2 > "$C/gpu.tar.xz" && rm -rf "$C/bin" "$C/lib"
  du -sh "$C"
  exit 0
fi
OUT=${OUT:-build/kvcuda}
mkdir -p "$OUT"
if [ -f "$C/gpu.tar.xz" ]; then
  G=/tmp/kvcuda-bin && mkdir -p $G && tar -C $G -xJf "$C/gpu.tar.xz"
else
  G=$PWD/$C
fi
BIN=$G/bin
M=${MODEL_DIR:-/tmp/llama8b}
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models WEFT_TEST_SOURCE_DIR=$PWD
t0=$(date +%s)
stamp() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  for t in kernels_test model_cuda_test executor_cuda_test; do
    timeout 240 "$BIN/$t" --gtest_filter='*KvCompress*' --gtest_color=no > "$OUT/$t.log" 2>&1
    echo "$t rc=$?"
    grep -E "^\[  (PASSED|SKIPPED|FAILED) |^\[  FAILED  \]|measured" "$OUT/$t.log" | sort -u | head -30
  done
  stamp "tests done"
fi
if [ ! -f "$M/config.json" ]; then
  [ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
  python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out "$M" 2>&1 | tail -1
fi
stamp "model ready"
OUT=$OUT bash bench/kv_compress_budget.sh --bin "$BIN" --model "$M" --device cuda:0 \
  --budget-mb "${BUDGET_MB:-2048}" --rates "${RATES:-0.5 0.75}" --requests "${REQUESTS:-256}" \
  --input-len "${INPUT:-1024}" --output-len "${OUTPUT:-128}" | tee "$OUT/kvcuda.txt"
for r in 0 ${RATES:-0.5 0.75}; do grep -E "weights ->|KV pool" "$OUT/rate$r.err" | tail -2; done
stamp end
