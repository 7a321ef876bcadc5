#!/usr/bin/env bash
# GPU pipeline stages over NCCL (issue #20 item 3, docs/parallel.md "On GPUs"), in one device
# call on nvidia-h100-x2, from the binaries scripts/gpu-check --stage carried in .devcarry/gpu
# (weft, cuda_pipeline_test; Open MPI in .devcarry/gpu/openmpi):
#   1. cuda_pipeline_test under mpirun -np 2: the fixture models in two GPU stages over NCCL
#      (two micro-batches in flight) and two ranks on one GPU (host path) against one GPU;
#      then again with one GPU visible (CUDA_VISIBLE_DEVICES=0: the one-GPU cases only).
#   2. weft generate --pipeline-parallel 2 --device cuda on two fixture models: the same greedy
#      tokens as one GPU, over NCCL (WEFT_PP_TRANSPORT=nccl) and on one GPU.
#   3. bench/gpu_pipeline.sh --mode pp: PP=2 against one GPU at batch 1, 8 and 64 (TPOT, tok/s)
#      on the random 8B folder, over NCCL and through host memory; the table in
#      $OUT/pipeline_table.md.
# Usage (here: scripts/gpu-check --stage; the Llama-3 tokenizer in .devcarry/l3, bench/gpu_8b.sh):
#   run(kind="nvidia-h100-x2", carry=[".devcarry/gpu", ".devcarry/l3"],
#       command="bash bench/device/ppnccl.sh")
#   PHASES="tests generate bench" (default: all three) picks phases; BIN a folder or a tarball
#   of one (default .devcarry/gpu). On one GPU (nvidia-h100-x1) the tests and generate phases
#   run the one-GPU cases (two ranks on GPU 0, host path) and skip the rest, saying so.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-.devcarry/gpu}
OUT=${OUT:-build/ppnccl}
PHASES=${PHASES:-tests generate bench}
mkdir -p "$OUT"
case "$BIN" in
  *.tar.xz|*.tar.gz|*.tgz)  # a tarball of the folder (bin/, lib/, openmpi/), as gpu_tp.sh takes
    dir=/tmp/weft-ppnccl-bin
    rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xf "$BIN" || { echo "ppnccl.sh: cannot unpack $BIN" >&2; exit 2; }
    [ -d "$dir/bin" ] || dir=$(dirname "$(find "$dir" -maxdepth 3 -type d -name bin | head -1)")
    BIN=$dir ;;
esac
BIN=$(cd "$BIN" && pwd) || { echo "ppnccl.sh: no $BIN (scripts/gpu-check --stage)" >&2; exit 2; }
pylib() { python3 -c "import nvidia.$1, os; print(os.path.join(list(nvidia.$1.__path__)[0], 'lib'))" 2>/dev/null || true; }
cublas_dir=$(pylib cublas)
nccl_dir=
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  nccl_dir=$(pylib nccl)
fi
export LD_LIBRARY_PATH="$BIN/lib:$BIN/openmpi/lib:/usr/local/cuda/lib64${cublas_dir:+:$cublas_dir}${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export WEFT_SPEC_DIR=$PWD/config/models WEFT_TEST_SOURCE_DIR=$PWD
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-VERSION}
if [ -x "$BIN/openmpi/bin/mpirun" ]; then
  export OPAL_PREFIX=$BIN/openmpi/prefix PMIX_PREFIX=$BIN/openmpi/pmix
  export PMIX_MCA_mca_base_component_path=$BIN/openmpi/pmix/lib/pmix
  export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_component_show_load_errors=0
  MPIRUN=$BIN/openmpi/bin/mpirun
else
  MPIRUN=$(command -v mpirun || true)
fi
[ -n "$MPIRUN" ] || { echo "ppnccl.sh: no mpirun (scripts/stage-openmpi)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export WEFT_LOG=${WEFT_LOG:-info}  # the pipeline says which path its stages took
MPI2=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH
  -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x WEFT_LOG)
W=$BIN/bin/weft
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
gpus=$(grep -c . "$OUT/gpus.txt" || true)
failed=0
want() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

if want tests; then
  for visible in all one; do
    echo "== cuda_pipeline_test (GPUs visible: $visible)"
    log=$OUT/cuda_pipeline_test_$visible.log
    if [ $visible = one ]; then
      env CUDA_VISIBLE_DEVICES=0 timeout 300 "${MPI2[@]}" -x CUDA_VISIBLE_DEVICES \
        "$BIN/bin/cuda_pipeline_test" --gtest_color=no >"$log" 2>&1 || failed=1
    else
      timeout 300 "${MPI2[@]}" "$BIN/bin/cuda_pipeline_test" --gtest_color=no >"$log" 2>&1 || failed=1
    fi
    grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|error|pipeline: stages' "$log" | sort -u | head -40
  done
fi

if want generate; then
  # (NCCL_DEBUG=VERSION prints NCCL's version on stdout: not part of the tokens.)
  for m in llama_gqa_f32 qwen2_tied_f32; do
    args=(generate --model "tests/fixtures/models/$m" --prompt-ids 5,17,42,99,3,201,64
      --max-tokens 16 --ignore-eos --device cuda)
    one=$("$W" "${args[@]}" 2>/dev/null)
    nccl=$one
    if [ "${gpus:-0}" -ge 2 ]; then
      nccl=$(env WEFT_PP_TRANSPORT=nccl timeout 120 "${MPI2[@]}" -x WEFT_PP_TRANSPORT "$W" "${args[@]}" \
        --pipeline-parallel 2 2>"$OUT/generate_$m.err" | grep -v '^NCCL version')
    else
      echo "(fewer than two GPUs: the NCCL run is skipped)"
    fi
    same=$(env CUDA_VISIBLE_DEVICES=0 timeout 120 "${MPI2[@]}" -x CUDA_VISIBLE_DEVICES "$W" "${args[@]}" \
      --pipeline-parallel 2 2>>"$OUT/generate_$m.err" | grep -v '^NCCL version')
    echo "$m one GPU:          $one"
    echo "$m PP=2 over NCCL:   $nccl"
    echo "$m PP=2 on one GPU:  $same"
    if [ -z "$one" ] || [ "$one" != "$nccl" ] || [ "$one" != "$same" ]; then
      echo "FAILED: $m tokens differ (stderr: $OUT/generate_$m.err)"
      failed=1
    fi
  done
  grep -h "pipeline: stages" "$OUT"/generate_*.err | sort -u
fi

if want bench; then
  OUT=$OUT bash bench/gpu_pipeline.sh --bin "$BIN" --mode pp || failed=1
fi
[ $failed = 0 ] && echo "ppnccl.sh: all passed" || echo "ppnccl.sh: FAILURES (logs in $OUT)"
exit $failed
