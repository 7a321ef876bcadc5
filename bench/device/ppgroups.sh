#!/usr/bin/env bash
# Pipeline sequence groups in flight on two GPUs (issue #20 item 3, docs/parallel.md "Sequence
# groups in flight"), in one device call on nvidia-h100-x2, from carried binaries (weft and
# cuda_pipeline_test of a CUDA build with MPI and NCCL):
#   1. checks: cuda_pipeline_test (the GPU stages against one GPU); weft bench on weft-tiny over
#      NCCL with --pp-groups 1 (the output digest of one GPU) and --pp-groups 2 (every request
#      finishes, both groups' steps in flight together: rank 0 defers each step's logits), and
#      --pp-groups 2 with 128-token prompts and Open MPI's single copy off (issue #20's hang).
#   2. the measurement: weft bench on the random 8B folder, one GPU against PP=2 with one step
#      at a time (--pp-groups 1) and with two groups in flight (--pp-groups 2), over NCCL, at
#      batch 1, 8 and 64 (BATCHES; two waves of B requests, 128 input and 64 output tokens),
#      then PP=2 with two groups at twice each batch's concurrency (DOUBLE=0 skips: with a
#      memory-bound decode step a group of B/2 costs about what a step of B does, so the gain
#      at equal concurrency is the idle time hidden; the memory PP frees buys more sequences).
#      TPOT p50, output tok/s and steps_in_flight_peak per run; the table in $OUT/ppgroups.md.
# Usage (here, on a CUDA build of this tree: BUILD=build/cuda bash /work/wt/pack_gpu.sh
#   /work/wt/ppgroups ppg weft cuda_pipeline_test; the Llama-3 tokenizer in .devcarry/l3):
#   run(kind="nvidia-h100-x2", carry=[".devcarry/ppg", ".devcarry/l3"],
#       command="BIN=.devcarry/ppg/gpu.tar.xz bash bench/device/ppgroups.sh")
#   PHASES="checks bench" (default both); RUN_TIMEOUT (seconds per bench run, default 300); BATCHES="1 8 64"; REPS=1 (interleaved repetitions
#   of the bench phase); MODEL (default /tmp/llama8b, made by bench/make_random_model.py);
#   PIECES=4 adds a PP=2 G=2 row with --micro-batches 4 (512-token prefill steps cut in four
#   pieces: the three-piece case of docs/notes/ppgroups_gpu.md). Open MPI settings pass through
#   the environment (e.g. OMPI_MCA_btl_vader_single_copy_mechanism=none, or
#   OMPI_MCA_btl_vader_eager_limit=32768, which sends a step's batch eagerly).
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-.devcarry/ppg/gpu.tar.xz}
OUT=${OUT:-build/ppgroups}
PHASES=${PHASES:-checks bench}
BATCHES=${BATCHES:-1 8 64}
REPS=${REPS:-1}
DOUBLE=${DOUBLE:-1}
PIECES=${PIECES:-}
M=${MODEL:-/tmp/llama8b}
TOK=${TOK:-.devcarry/l3}
mkdir -p "$OUT"
case "$BIN" in
  *.tar.xz|*.tar.gz|*.tgz)
    dir=/tmp/weft-ppgroups-bin
    rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xf "$BIN" || { echo "ppgroups.sh: cannot unpack $BIN" >&2; exit 2; }
    [ -d "$dir/bin" ] || dir=$(dirname "$(find "$dir" -maxdepth 3 -type d -name bin | head -1)")
    BIN=$dir ;;
esac
BIN=$(cd "$BIN" && pwd) || { echo "ppgroups.sh: no $BIN" >&2; exit 2; }
W=$BIN/bin/weft
[ -x "$W" ] || { echo "ppgroups.sh: no $W" >&2; exit 2; }
pylib() { python3 -c "import nvidia.$1, os; print(os.path.join(list(nvidia.$1.__path__)[0], 'lib'))" 2>/dev/null || true; }
cublas_dir=$(pylib cublas)
nccl_dir=
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  nccl_dir=$(pylib nccl)
fi
export LD_LIBRARY_PATH="$BIN/lib:$BIN/openmpi/lib:/usr/local/cuda/lib64${cublas_dir:+:$cublas_dir}${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export WEFT_SPEC_DIR=$PWD/config/models WEFT_TEST_SOURCE_DIR=$PWD
export NCCL_NVLS_ENABLE=0 WEFT_LOG=${WEFT_LOG:-info} WEFT_PP_TRANSPORT=nccl WEFT_PP_GROUPS_GPU=1
if [ -x "$BIN/openmpi/bin/mpirun" ]; then
  export OPAL_PREFIX=$BIN/openmpi/prefix PMIX_PREFIX=$BIN/openmpi/pmix
  export PMIX_MCA_mca_base_component_path=$BIN/openmpi/pmix/lib/pmix
  export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_component_show_load_errors=0
  MPIRUN=$BIN/openmpi/bin/mpirun
else
  MPIRUN=$(command -v mpirun || true)
fi
[ -n "$MPIRUN" ] || { echo "ppgroups.sh: no mpirun" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI2=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH
  -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR -x NCCL_NVLS_ENABLE -x WEFT_LOG -x WEFT_PP_TRANSPORT -x WEFT_PP_GROUPS_GPU)
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
gpus=$(grep -c . "$OUT/gpus.txt" || true)
[ "${gpus:-0}" -ge 2 ] || { echo "ppgroups.sh: needs two GPUs, $gpus visible" >&2; exit 2; }
failed=0
want() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
field() { echo "$2" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }

if want checks; then
  if [ -x "$BIN/bin/cuda_pipeline_test" ]; then
    echo "== cuda_pipeline_test"
    # With WEFT_PP_TRANSPORT=auto: the test chooses each path itself (NCCL, and host memory with
    # both ranks on one GPU, which a forced nccl refuses).
    WEFT_PP_TRANSPORT=auto timeout 300 "${MPI2[@]}" "$BIN/bin/cuda_pipeline_test" --gtest_color=no \
      >"$OUT/cuda_pipeline_test.log" 2>&1 || failed=1
    grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' "$OUT/cuda_pipeline_test.log" | sort -u | head -20
  fi
  echo "== weft bench on weft-tiny: one GPU, PP=2 (G=1), PP=2 (G=2)"
  tiny=(bench --model models/weft-tiny --device cuda --num-requests 8 --input-len 16 --output-len 8
    --gpu-memory-fraction 0.3)
  one=$(timeout 120 "$W" "${tiny[@]}" 2>>"$OUT/checks.err" | tail -1)
  g1=$(timeout 120 "${MPI2[@]}" "$W" "${tiny[@]}" --pipeline-parallel 2 --pp-groups 1 2>>"$OUT/checks.err" | tail -1)
  g2=$(timeout 120 "${MPI2[@]}" "$W" "${tiny[@]}" --pipeline-parallel 2 --pp-groups 2 2>>"$OUT/checks.err" | tail -1)
  echo "one GPU: digest $(field output_digest "$one")"
  echo "PP=2 G=1: digest $(field output_digest "$g1") (must equal one GPU's)"
  echo "PP=2 G=2: digest $(field output_digest "$g2"), failed $(field failed "$g2"), steps in flight at most $(field steps_in_flight_peak "$g2")"
  if [ -z "$(field output_digest "$one")" ] || [ "$(field output_digest "$one")" != "$(field output_digest "$g1")" ]; then
    echo "FAILED: PP=2 G=1 digest differs from one GPU's (stderr: $OUT/checks.err)"; failed=1
  fi
  if [ "$(field failed "$g2")" != 0 ] || [ "$(field steps_in_flight_peak "$g2")" != 2 ]; then
    echo "FAILED: PP=2 G=2 (stderr: $OUT/checks.err)"; failed=1
  fi
  # Issue #20 (docs/notes/ppgroups_gpu.md): 512-token prefill steps, whose batches (about 4.3
  # KB) pass Open MPI's 4 KiB eager limit, with its single-copy path off so that an undelivered
  # batch needs rank 0 inside MPI. Before the fix rank 0 could wait in CUDA for a rank still
  # waiting for its batch (the 8B folder hung; weft-tiny's small messages may fit NCCL's
  # buffers and hide it, so this row passing on an old build proves nothing). Every request
  # must finish.
  echo "== weft bench on weft-tiny, 512-token prefill steps, PP=2 (G=2), Open MPI's single copy off"
  long=(bench --model models/weft-tiny --device cuda --num-requests 16 --input-len 128 --output-len 8
    --gpu-memory-fraction 0.3)
  g2l=$(OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 120 "${MPI2[@]}" "$W" "${long[@]}" \
    --pipeline-parallel 2 --pp-groups 2 2>>"$OUT/checks.err" | tail -1)
  echo "PP=2 G=2, long prompts: failed $(field failed "$g2l"), steps in flight at most $(field steps_in_flight_peak "$g2l")"
  if [ "$(field failed "$g2l")" != 0 ] || [ "$(field steps_in_flight_peak "$g2l")" != 2 ]; then
    echo "FAILED: PP=2 G=2 with long prompts (no JSON: it hung; stderr: $OUT/checks.err)"; failed=1
  fi
  grep -h "pipeline: stages exchange\|sequence groups" "$OUT/checks.err" | sort -u
fi

if want bench; then
  if [ ! -f "$M/config.json" ]; then
    [ -f "$TOK/tokenizer.json" ] || { [ -f "$TOK/tokenizer.json.xz" ] && xz -dk "$TOK/tokenizer.json.xz"; } ||
      gunzip -k "$TOK/tokenizer.json.gz"
    python3 bench/make_random_model.py --shape 8b --tokenizer "$TOK" --out "$M" 2>&1 | tail -1
  fi
  RUNS=$OUT/ppgroups_runs.jsonl
  : > "$RUNS"
  run() {  # TAG BATCH CONCURRENCY LAUNCH... -- ARGS...
    local tag=$1 b=$2 c=$3; shift 3
    local launch=()
    while [ "$1" != "--" ]; do launch+=("$1"); shift; done
    shift
    local n=$(( 2 * c )); [ "$c" = 1 ] && n=4
    local line
    line=$(timeout "${RUN_TIMEOUT:-300}" "${launch[@]}" "$W" bench --model "$M" --device cuda --threads 16 \
      --gpu-memory-fraction 0.85 --num-requests "$n" --max-concurrency "$c" --input-len 128 \
      --output-len 64 "$@" 2>>"$OUT/bench.err" | tail -1)
    echo "$tag (batch $b, concurrency $c): tok/s $(field output_tokens_per_s "$line"), TPOT p50 $(field tpot_ms_p50 "$line") ms, in flight $(field steps_in_flight_peak "$line"), failed $(field failed "$line")"
    python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d.update(tag=sys.argv[1], batch=int(sys.argv[3]), conc=int(sys.argv[4])); print(json.dumps(d))' \
      "$tag" "$line" "$b" "$c" >> "$RUNS" || { echo "run $tag gave no JSON (see $OUT/bench.err)"; failed=1; }
  }
  for rep in $(seq 1 "$REPS"); do
    for b in $BATCHES; do
      run "one GPU" "$b" "$b" --
      run "PP=2 G=1" "$b" "$b" "${MPI2[@]}" -- --pipeline-parallel 2 --pp-groups 1
      run "PP=2 G=2" "$b" "$b" "${MPI2[@]}" -- --pipeline-parallel 2 --pp-groups 2
      if [ -n "$PIECES" ]; then
        run "PP=2 G=2, $PIECES pieces" "$b" "$b" "${MPI2[@]}" -- --pipeline-parallel 2 --pp-groups 2 --micro-batches "$PIECES"
      fi
      if [ "$DOUBLE" = 1 ] && [ "$b" -gt 1 ]; then
        run "PP=2 G=2, 2x concurrency" "$b" $(( 2 * b )) "${MPI2[@]}" -- --pipeline-parallel 2 --pp-groups 2
      fi
    done
  done
  python3 - "$RUNS" > "$OUT/ppgroups.md" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    runs.setdefault((d["batch"], d["tag"], d["conc"]), []).append(d)
print("| batch | run | concurrency | output tok/s | TPOT p50 ms | steps in flight | vs one GPU tok/s |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
base = {}
for (b, tag, c), ds in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1] != "one GPU", kv[0][1])):
    tok = statistics.median(d["output_tokens_per_s"] for d in ds)
    tpot = statistics.median(d["tpot_ms_p50"] for d in ds)
    if tag == "one GPU":
        base[b] = tok
    rel = f"{tok / base[b]:.2f}x" if b in base and base[b] > 0 else ""
    print(f"| {b} | {tag} | {c} | {tok:.1f} | {tpot:.2f} | {ds[0].get('steps_in_flight_peak', 0)} | {rel} |")
PY
  cat "$OUT/ppgroups.md"
  grep -h "pipeline: stages exchange" "$OUT/bench.err" | sort -u | head -2
fi
[ $failed = 0 ] && echo "ppgroups.sh: all passed" || echo "ppgroups.sh: FAILURES (logs in $OUT)"
exit $failed
