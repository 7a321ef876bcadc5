#!/usr/bin/env bash
# Layer-cut runs on GPUs (docs/parallel.md), from prebuilt binaries:
#   --mode hybrid (one GPU): a Llama-3-8B-shaped model (16 GB of bf16 weights) under a GPU
#       memory budget smaller than it (--gpu-memory-budget-mb, default 12000), so the last
#       layers and the lm head run on the CPU; then --cpu-layers K for each K of
#       --cpu-layers-list; against the same requests all on the GPU. Decode (batch 1, TPOT) and
#       output tok/s (batch 8).
#   --mode pp (two GPUs): mpirun -np 2 weft bench --pipeline-parallel 2 (one stage per GPU)
#       against one GPU at batch 1, 8 and 64 (--batches): the stages joined over NCCL, one step
#       at a time (--pp-groups 1) and with two sequence groups in flight (--pp-groups 2)
#       (WEFT_PP_TRANSPORT=nccl, device to device, docs/parallel.md), then as before NCCL
#       (WEFT_PP_TRANSPORT=host: host memory over MPI, host sampler, two micro-batches) at
#       batch 1 and 8, and at the
#       largest batch two micro-batches per decode step forced (WEFT_PP_MICRO_TOKENS=16) and
#       rank 0 sampling on the host (WEFT_PP_DEVICE_SAMPLING=0).
#   --mode all: both (pp is skipped, with a message, where fewer than two GPUs are visible).
# Usage: bash bench/gpu_pipeline.sh [--bin DIR] [--mode hybrid|pp|all] [--model DIR]
#          [--tokenizer DIR] [--gpu-memory-budget-mb MB] [--cpu-layers-list "8 16"]
#          [--threads N] [--batches "1 8 64"] [--out DIR]
#   --bin: the prebuilt binaries as scripts/gpu-check --stage lays them out (the default
#     .devcarry/gpu): DIR/bin/weft, DIR/lib (shared libraries), DIR/openmpi (Open MPI for a
#     machine without it, scripts/stage-openmpi; else the mpirun on PATH). A folder holding
#     weft itself works too.
#   --model: default /tmp/llama8b, made by bench/make_random_model.py --shape 8b (torch) with
#     the tokenizer folder of --tokenizer (default .devcarry/l3, see bench/gpu_8b.sh) if absent.
# With the device tool:
#   here:  scripts/gpu-check --stage; the Llama-3 tokenizer into .devcarry/l3 (bench/gpu_8b.sh)
#   there: run(carry=[".devcarry/gpu", ".devcarry/l3"], command="bash bench/gpu_pipeline.sh --mode hybrid")
#          run(kind="nvidia-h100-x2", carry=[...], command="bash bench/gpu_pipeline.sh --mode pp")
# Results: one JSON line per run in $OUT/pipeline_runs.jsonl and a table in $OUT/pipeline_table.md.
set -u
cd "$(dirname "$0")/.."
BIN=.devcarry/gpu MODE=all M=/tmp/llama8b TOK=.devcarry/l3 BUDGET=12000 KS="8 16" THREADS=16
BATCHES="1 8 64"
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
    --batches) BATCHES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "gpu_pipeline.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "gpu_pipeline.sh: no folder $BIN (--bin)" >&2; exit 2; }
W=$BIN/bin/weft
[ -x "$W" ] || W=$BIN/weft
[ -x "$W" ] || { echo "gpu_pipeline.sh: no weft in $BIN/bin or $BIN (--bin)" >&2; exit 2; }
case $MODE in hybrid|pp|all) ;; *) echo "gpu_pipeline.sh: --mode is hybrid, pp or all" >&2; exit 2 ;; esac
mkdir -p "$OUT"
pylib() { python3 -c "import nvidia.$1, os; print(os.path.join(list(nvidia.$1.__path__)[0], 'lib'))" 2>/dev/null || true; }
cublas_dir=$(pylib cublas)
export LD_LIBRARY_PATH="$BIN/lib:$BIN/openmpi/lib:/usr/local/cuda/lib64${cublas_dir:+:$cublas_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export WEFT_SPEC_DIR=$PWD/config/models
export NCCL_NVLS_ENABLE=0  # NVLink multicast off on the shared machines
if [ -x "$BIN/openmpi/bin/mpirun" ]; then
  # The carried Open MPI, rebased (scripts/stage-openmpi), as bench/gpu_tp.sh sets it up.
  export OPAL_PREFIX=$BIN/openmpi/prefix PMIX_PREFIX=$BIN/openmpi/pmix
  export PMIX_MCA_mca_base_component_path=$BIN/openmpi/pmix/lib/pmix
  export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_component_show_load_errors=0
  MPIRUN=$BIN/openmpi/bin/mpirun
else
  MPIRUN=$(command -v mpirun || true)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
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
  line=$(timeout 300 "${launch[@]}" "$W" bench --model "$M" --device cuda --threads "$THREADS" \
    --kv-budget-mb 2048 "$@" 2>>"$OUT/pipeline.err" | tail -1)
  echo "$tag: $(echo "$line" | cut -c1-160)"
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["tag"]=sys.argv[1]; print(json.dumps(d))' \
    "$tag" "$line" >> "$RUNS" || echo "run $tag gave no JSON (see $OUT/pipeline.err)"
}
B1=(--num-requests 4 --max-concurrency 1 --input-len 128 --output-len 32)
B8=(--num-requests 16 --max-concurrency 8 --input-len 128 --output-len 32)
batch() {  # the requests of a run at batch B: two waves of B (one more for batch 1)
  if [ "$1" = 1 ]; then echo "--num-requests 4 --max-concurrency 1 --input-len 128 --output-len 32"
  else echo "--num-requests $(( 2 * $1 )) --max-concurrency $1 --input-len 128 --output-len 32"; fi
}
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
  elif [ -z "$MPIRUN" ]; then
    echo "gpu_pipeline.sh: --mode pp needs mpirun: stage Open MPI with scripts/stage-openmpi $BIN/openmpi: skipped"
  else
    MPI=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH
      -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE -x WEFT_PP_TRANSPORT -x WEFT_PP_MICRO_TOKENS -x WEFT_LOG
      -x WEFT_PP_DEVICE_SAMPLING -x WEFT_PP_GROUPS_GPU)
    export WEFT_PP_DEVICE_SAMPLING=1
    export WEFT_PP_GROUPS_GPU=1  # the --pp-groups 2 rows (the default since the GPU hang's fix; 0 turns them off)
    export WEFT_LOG=info  # rank 0 logs which path the stages took (into pipeline.err)
    export WEFT_PP_MICRO_TOKENS=128  # the default: micro-batches of 128 tokens or more
    largest=
    for b in $BATCHES; do
      # shellcheck disable=SC2046  # batch prints words
      run "1 gpu b$b" -- $(batch "$b")
      largest=$b
    done
    export WEFT_PP_TRANSPORT=nccl
    for b in $BATCHES; do
      # One step at a time (--pp-groups 1), then two sequence groups in flight (the default
      # since 2026-11-26; bench/device/ppgroups.sh measures them at more concurrencies).
      # shellcheck disable=SC2046
      run "pp2 nccl b$b" "${MPI[@]}" -- $(batch "$b") --pipeline-parallel 2 --pp-groups 1
      # shellcheck disable=SC2046
      run "pp2 nccl b$b, 2 groups in flight" "${MPI[@]}" -- $(batch "$b") --pipeline-parallel 2 --pp-groups 2
    done
    grep -h "pipeline: stages exchange" "$OUT/pipeline.err" | tail -1
    if [ -n "$largest" ] && [ "$largest" -gt 1 ]; then
      # shellcheck disable=SC2046
      WEFT_PP_MICRO_TOKENS=16 run "pp2 nccl b$largest, 2 micro-batches" "${MPI[@]}" -- \
        $(batch "$largest") --pipeline-parallel 2 --pp-groups 1 --micro-batches 2
      # shellcheck disable=SC2046
      WEFT_PP_DEVICE_SAMPLING=0 run "pp2 nccl b$largest, host sampler" "${MPI[@]}" -- \
        $(batch "$largest") --pipeline-parallel 2 --pp-groups 1
    fi
    # The path before NCCL: host memory over MPI, the host sampler, two micro-batches a step.
    export WEFT_PP_TRANSPORT=host WEFT_PP_DEVICE_SAMPLING=0 WEFT_PP_MICRO_TOKENS=1
    for b in $BATCHES; do
      [ "$b" -gt 8 ] && continue
      # shellcheck disable=SC2046
      run "pp2 host (before) b$b" "${MPI[@]}" -- $(batch "$b") --pipeline-parallel 2 --pp-groups 1
    done
    unset WEFT_PP_TRANSPORT WEFT_PP_DEVICE_SAMPLING WEFT_PP_MICRO_TOKENS
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
