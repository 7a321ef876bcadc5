#!/usr/bin/env bash
# The GPU figures of docs/PERFORMANCE.md for a Llama-3-8B-shaped model, in one device call:
# a random bf16 folder with the Llama-3 tokenizer (bench/make_random_model.py), the forward
# bench (GEMM peak, prefill, decode sampled on the GPU, and decode with logits to the host),
# weft bench with 1000 requests, the transformers baseline, and constrained vs unconstrained
# decoding (bench/gpu_constrained.sh). Results go to $OUT (default build/gpu-8b).
#
# Here:  scripts/gpu-check --stage   (binaries into .devcarry/gpu)
#        mkdir -p .devcarry/l3 && xz -9e -c build/release/test-data/tokenizers/llama3/tokenizer.json \
#          > .devcarry/l3/tokenizer.json.xz && cp build/release/test-data/tokenizers/llama3/tokenizer_config.json .devcarry/l3/
#        (xz: 1.6 MB, where gzip makes 2.3; the scripts take either)
# There: run(command="bash bench/gpu_8b.sh", carry=[".devcarry/gpu", ".devcarry/l3"])
#        (WEFT_CARRY=.devcarry/NAME for binaries staged elsewhere; strip them if the carry
#        exceeds the device tool's 64 MiB)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-8b}
mkdir -p "$OUT"
C=${WEFT_CARRY:-.devcarry/gpu}
export LD_LIBRARY_PATH=$PWD/$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models
B=$C/bin
M=${MODEL_DIR:-/tmp/llama8b}
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
t0=$(date +%s)
stamp() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
[ -f "$M/config.json" ] || python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out "$M" 2>&1 | tail -1
stamp "model ready"
$B/cuda_forward_bench --model "$M" --batches 1,8,32,64,128,256 --profile --json "$OUT/bench_8b.json" 2>&1 |
  tee "$OUT/bench_8b.txt" | grep -v "^  profile"
$B/cuda_forward_bench --model "$M" --batches 1,64 --prefill "" --logits-to-host 2>&1 | grep -E "^decode"
stamp "forward bench done"
timeout 200 $B/weft bench --model "$M" --num-requests 1000 --input-len 512 --output-len 128 \
  --range-ratio 0.5 --gpu-memory-fraction 0.85 2> "$OUT/weft_bench_8b.err" | tail -1 | tee "$OUT/weft_bench_8b.json"
grep -E "weights ->" "$OUT/weft_bench_8b.err" | tail -1
stamp "weft bench done"
timeout 150 python3 bench/hf_decode_bench.py --shape 8b --batch 1 64 --steps 16 2>&1 | tail -3
stamp "transformers done"
# Constrained against unconstrained on the same work: output tok/s, TTFT and ITL per format.
REPS=${CONSTRAINED_REPS:-1} MODEL_DIR=$M OUT=$OUT bash bench/gpu_constrained.sh 2>&1 | tail -12
stamp "constrained done"
