#!/usr/bin/env bash
# Layer-cut runs on GPUs (docs/parallel.md), from prebuilt binaries:
#   --mode hybrid (one GPU): a Llama-3-8B-shaped model (16 GB of bf16 weights) under a GPU
#       memory budget smaller than it (--gpu-memory-budget-mb, default 12000), so the last
#       layers and the lm head run on the CPU; then --cpu-layers K for each K of --cpu-layers-list;
#       against the same requests all on the GPU. Decode tok/s (batch 1) and output tok/s
#       (batch 8).
#   --mode pp (two GPUs): mpirun -np 2 weft bench --pipeline-parallel 2 (one stage per GPU,
#       the residual stream through host memory over MPI, two micro-batches) against one GPU.
#   --mode all: both (pp is skipped, with a message, where fewer than two GPUs are visible).
# Usage: bash bench/gpu_pipeline.sh --bin DIR [--mode hybrid|pp|all] [--model DIR]
#          [--tokenizer DIR] [--gpu-memory-budget-mb MB] [--cpu-layers-list "4 8 16"]
#          [--threads N] [--out DIR]
#   --bin: the folder holding weft (and lib/ beside it, if the build has one);
#   --model: default /tmp/llama8b, made by bench/make_random_model.py --shape 8b with the
#     tokenizer folder of --tokenizer (default .devcarry/l3) when absent.
# Results: one JSON line per run in $OUT/pipeline_runs.jsonl and a table in $OUT/pipeline_table.md.
set -u
cd "$(dirname "$0")/.."
BIN="" MODE=all M=/tmp/llama8b TOK=.devcarry/l3 BUDGET=12000 KS="4 8 16" THREADS=16
OUT=${OUT:-build/gpu-pipeline}
while [ $# -gt 0 ]; do
  case $1 in
    --bin) BIN=$2; shift 2 ;;
    --mode) MODE=$2; shift 2 ;;
    --model) M=$2; shift 2 ;;
    --tokenizer) TOK=$2; shift 2 ;;
    --gpu-memory-budget-mb) BUDGET=$2; shift 2 ;;
    --cpu-layers-list) KS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "gpu_pipeline.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$BIN" ] && [ -x "$BIN/weft" ] || { echo "gpu_pipeline.sh: --bin DIR must hold the weft binary" >&2; exit 2; }
case $MODE in hybrid|pp|all) ;; *) echo "gpu_pipeline.sh: --mode is hybrid, pp or all" >&2; exit 2 ;; esac
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$BIN/../lib:$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WEFT_SPEC_DIR=$PWD/config/models
export NCCL_NVLS_ENABLE=0  # NVLink multicast off on the shared machines
if [ ! -f "$M/config.json" ]; then
  [ -f "$TOK/tokenizer.json" ] || gunzip -k "$TOK/tokenizer.json.gz"
  python3 bench/make_random_model.py --shape 8b --tokenizer "$TOK" --out "$M" 2>&1 | tail -1
fi
RUNS=$OUT/pipeline_runs.jsonl
: > "$RUNS"
run() {  # TAG LAUNCH... -- ARGS...: one weft bench run, its JSON line tagged into $RUNS
  local tag=$1; shift
  local launch=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done
  shift
  local line
  line=$(timeout 300 "${launch[@]}" "$BIN/weft" bench --model "$M" --device cuda --threads "$THREADS" \
    --kv-budget-mb 2048 "$@" 2>>"$OUT/pipeline.err" | tail -1)
  echo "$tag: $(echo "$line" | cut -c1-160)"
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["tag"]=sys.argv[1]; print(json.dumps(d))' \
    "$tag" "$line" >> "$RUNS" || echo "run $tag gave no JSON (see $OUT/pipeline.err)"
}
B1=(--num-requests 8 --max-concurrency 1 --input-len 128 --output-len 64)
B8=(--num-requests 32 --max-concurrency 8 --input-len 128 --output-len 64)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$MODE" != pp ]; then
  run "gpu b1" -- "${B1[@]}"
  run "gpu b8" -- "${B8[@]}"
  run "budget ${BUDGET}MiB b1" -- "${B1[@]}" --gpu-memory-budget-mb "$BUDGET"
  run "budget ${BUDGET}MiB b8" -- "${B8[@]}" --gpu-memory-budget-mb "$BUDGET"
  grep -h "cpu layers\|KV pool" "$OUT/pipeline.err" | tail -2
  for k in $KS; do
    run "cpu-layers $k b1" -- "${B1[@]}" --cpu-layers "$k"
    run "cpu-layers $k b8" -- "${B8[@]}" --cpu-layers "$k"
  done
fi
if [ "$MODE" != hybrid ]; then
  if [ "$gpus" -lt 2 ]; then
    echo "gpu_pipeline.sh: --mode pp needs two GPUs, $gpus visible: skipped"
  elif ! command -v mpirun >/dev/null; then
    echo "gpu_pipeline.sh: --mode pp needs mpirun (openmpi-bin; scripts/setup installs it): skipped"
  else
    MPI=(mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE)
    run "1 gpu b1" -- "${B1[@]}"
    run "1 gpu b8" -- "${B8[@]}"
    run "pp2 b1" "${MPI[@]}" -- "${B1[@]}" --pipeline-parallel 2
    run "pp2 b8" "${MPI[@]}" -- "${B8[@]}" --pipeline-parallel 2 --micro-batches 2
    run "pp2 b8 mb1" "${MPI[@]}" -- "${B8[@]}" --pipeline-parallel 2 --micro-batches 1
  fi
fi
python3 - "$RUNS" > "$OUT/pipeline_table.md" <<'PY'
import json, sys
print("| run | output tok/s | TPOT p50 ms | TTFT p50 ms | requests (failed) |")
print("| --- | ---: | ---: | ---: | ---: |")
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(f"| {d['tag']} | {d['output_tokens_per_s']:.1f} | {d['tpot_ms_p50']:.2f} | "
          f"{d['ttft_ms_p50']:.1f} | {d['requests']} ({d['failed']}) |")
PY
cat "$OUT/pipeline_table.md"
