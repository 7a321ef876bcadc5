#!/usr/bin/env bash
# The quantized-weight GPU figures of docs/PERFORMANCE.md on one GPU, two tables:
#
# 1. cuda_quant_gemv_bench: per format, the dequantize-fused product's effective bandwidth
#    (quantized bytes / time) and its share of the measured copy bandwidth on the 8B shapes,
#    then batch-1 decode's products alone against their floor.
# 2. cuda_forward_bench on a random Llama-3-8B-shaped model (built in memory, nothing to
#    download), once for bf16 and once per format: batch-1 decode tokens/s against its floor
#    (weights + KV bytes / copy bandwidth; "weights" is the weights-only ratio), the speed-up
#    over bf16 of the same run, the GPU weight bytes and the KV pool the rest of the memory
#    holds (--gpu-memory-fraction 0.9). Each format once per kernel of --kernels
#    (WEFT_QUANT_GEMV=lanes|mma|stream|auto, quant_gemv.hpp), the kernel in its own column.
#
#   bench/gpu_quant.sh --bin DIR [--formats LIST|all] [--kernels lanes,mma,stream] [--tokens N]
#                      [--context N] [--skip-gemv]
#
# --bin: the folder with cuda_quant_gemv_bench and cuda_forward_bench (build/release/bin, or
# .devcarry/gpu/bin from scripts/gpu-check --stage; a lib/ beside it is put on the library path).
# --formats: comma-separated (default: Inferflow's Table 3 choices q8_b32,q6_b64,q5_b64,q4_b32,
# q3h_b64,q3_b32,q2_b32, plus q4_b64); "all" is every format (about a minute each).
# --kernels: the quantized product kernels to compare (default lanes,mma,stream: the CUDA-core
# kernel, the tensor-core one, and the tensor-core one in persistent streaming blocks, which
# runs lanes for formats other than q4 and q8; auto is the default choice per call).
set -u
cd "$(dirname "$0")/.."
bin=
formats=q8_b32,q6_b64,q5_b64,q4_b32,q4_b64,q3h_b64,q3_b32,q2_b32
tokens=1
context=512
skip_gemv=0
kernels=lanes,mma,stream
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --formats) formats="$2"; shift 2 ;;
    --kernels) kernels="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --skip-gemv) skip_gemv=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "gpu_quant.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ] || [ ! -x "$bin/cuda_forward_bench" ] || [ ! -x "$bin/cuda_quant_gemv_bench" ]; then
  echo "gpu_quant.sh: --bin DIR must hold cuda_forward_bench and cuda_quant_gemv_bench" >&2
  exit 2
fi
[ "$formats" = all ] &&
  formats=q8_b32,q8_b64,q6_b32,q6_b64,q5_b32,q5_b64,q4_b32,q4_b64,q3h_b32,q3h_b64,q3_b32,q3_b64,q2_b32,q2_b64
export LD_LIBRARY_PATH=$bin/../lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=${WEFT_SPEC_DIR:-$PWD/config/models}

if [ "$skip_gemv" = 0 ]; then
  echo "== 1. dequantize-fused products (cuda_quant_gemv_bench --tokens $tokens)"
  "$bin/cuda_quant_gemv_bench" --tokens "$tokens" --formats "$formats" --kernels "$kernels" ||
    exit 1
  echo
fi

echo "== 2. batch-$tokens decode, 8B shape, context $context (cuda_forward_bench)"
printf "%-9s %-6s %10s %10s %10s %9s %9s %8s %12s\n" format kernel "weights GB" "ms/step" \
  "tokens/s" "vs floor" weights "vs bf16" "KV tokens"
bf16_tps=
runs="bf16:-"
for f in ${formats//,/ }; do
  for k in ${kernels//,/ }; do runs="$runs $f:$k"; done
done
for run in $runs; do
  f=${run%%:*}
  k=${run#*:}
  args=(--shape 8b --batches "$tokens" --prefill "" --context "$context" --gpu-memory-fraction 0.9)
  [ "$f" != bf16 ] && args+=(--quantize "$f")
  log=$(mktemp)
  if ! WEFT_QUANT_GEMV=${k/-/mma} "$bin/cuda_forward_bench" "${args[@]}" >"$log" 2>&1; then
    echo "$f $k: cuda_forward_bench failed:"; tail -5 "$log"; rm -f "$log"; continue
  fi
  gb=$(sed -n 's/.*model [^,]*, \([0-9.]*\) GB of.*/\1/p' "$log" | head -1)
  kv=$(sed -n 's/^KV pool: [0-9]* pages of [0-9]* tokens = \([0-9]*\) tokens.*/\1/p' "$log" | head -1)
  # decode BATCH CONTEXT ms/step tokens/s vs-floor% bound weights%
  row=$(awk -v b="$tokens" '$1 == "decode" && $2 == b {print; exit}' "$log")
  rm -f "$log"
  if [ -z "$row" ]; then echo "$f $k: no decode row in the output"; continue; fi
  read -r _ _ _ ms tps floor _ wfloor <<<"$row"
  [ "$f" = bf16 ] && bf16_tps=$tps
  speedup=$(awk -v a="$tps" -v b="${bf16_tps:-0}" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "-"}')
  printf "%-9s %-6s %10s %10s %10s %9s %9s %8s %12s\n" "$f" "$k" "$gb" "$ms" "$tps" "$floor" \
    "$wfloor" "$speedup" "$kv"
done
