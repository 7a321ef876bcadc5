#!/usr/bin/env bash
# Serving throughput on the GPU with a ShareGPT-shaped workload (issue 19's figures), in one
# device call: a random Llama-3-8B-shaped bf16 folder (bench/make_random_model.py), the decode
# rows of cuda_forward_bench against their floors (weights + KV bytes, or FLOPs) at batches
# 64-512 at context 512 and 64-192 at 2048, and `weft bench --dataset` on 1,000 ShareGPT-shaped requests
# offline (defaults, then a large step budget) and online at 8 requests/s. Results go to $OUT
# (default build/gpu-sharegpt).
#
# Here:  WEFT_CARRY=.devcarry/release scripts/gpu-check --stage   (binaries of build/release)
#        and the Llama-3 tokenizer in .devcarry/l3, as bench/gpu_8b.sh says.
# There: run(command="WEFT_CARRY=.devcarry/release bash bench/gpu_sharegpt.sh",
#            carry=[".devcarry/release", ".devcarry/l3"])
#   ONLINE_REQUESTS (default 400) sets how many of the workload's requests the online run sends.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-sharegpt}
mkdir -p "$OUT"
C=${WEFT_CARRY:-.devcarry/gpu}
export LD_LIBRARY_PATH=$PWD/$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models
B=$C/bin
M=${MODEL_DIR:-/tmp/llama8b}
W=$OUT/sharegpt_1000.jsonl
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
t0=$(date +%s)
stamp() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ -f "$M/config.json" ] || python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out "$M" 2>&1 | tail -1
python3 bench/make_sharegpt_workload.py --out "$W"
stamp "model and workload ready"
# bf16 KV is 128 KiB per token of this shape: 512 x 2,048 tokens (137 GB) or 256 x 2,048 (69 GB
# plus 16 GB of weights) do not fit an 80 GB H100, so the 2,048 row stops at 192 sequences.
for run in "512 64,128,256,512" "2048 64,128,192"; do
  set -- $run; ctx=$1
  $B/cuda_forward_bench --model "$M" --context $ctx --batches $2 --prefill "" \
    --json "$OUT/decode_ctx$ctx.json" 2>&1 | tee "$OUT/decode_ctx$ctx.txt" | grep -E "^(decode|kind|device|gemm peak)"
done
stamp "forward bench done"
run_bench() {  # name, then weft bench arguments
  local name=$1; shift
  echo "== $name: weft bench --dataset $W $*"
  timeout 240 $B/weft bench --model "$M" --dataset "$W" --gpu-memory-fraction 0.85 "$@" \
    2> "$OUT/$name.err" | tee "$OUT/$name.txt" | tail -3
  stamp "$name done"
}
run_bench offline_default
run_bench offline_large_steps --max-tokens-per-step 8192 --max-running 1024
run_bench online_rate8 --request-rate 8 --num-requests "${ONLINE_REQUESTS:-400}"
