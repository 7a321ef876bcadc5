#!/usr/bin/env bash
# Encoder-decoder models through the engine on one GPU (docs/seq2seq.md#on-a-gpu): the GPU
# tests of the CUDA seq2seq pieces, then weft generate, bench and serve with --device cuda.
# Input: the binaries `scripts/gpu-check --stage` puts in .devcarry/gpu (or WEFT_CARRY).
# Device call, from the repository root:
#   run(command="bash bench/device/seq2seq_gpu.sh", carry=[".devcarry"])
# Prints PASS/FAIL per check and "seq2seq_gpu: all passed" at the end; logs in $OUT.
set -u
O=${OUT:-/tmp/seq2seq_gpu}; mkdir -p "$O"
R=$PWD; G=$R/${WEFT_CARRY:-.devcarry/gpu}
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$G/lib:/usr/local/cuda/lib64${cublas_dir:+:$cublas_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export WEFT_SPEC_DIR=$R/config/models WEFT_TEST_SOURCE_DIR=$R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
failed=0
check() {  # name, then the command; passes when it exits 0
  local name=$1; shift
  if "$@" > "$O/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name (log: $O/$name.log)"; failed=1; fi
}

check kernels timeout 200 "$G/bin/kernels_test" --gtest_filter='*CudaSeq2Seq*' --gtest_color=no
check model timeout 300 "$G/bin/model_cuda_test" --gtest_filter='*CudaSeq2Seq*' --gtest_color=no
check engine timeout 400 "$G/bin/executor_cuda_test" --gtest_filter='*CudaSeq2Seq*' --gtest_color=no
grep -h -E '^\[  (PASSED|FAILED|SKIPPED) |^\[ measured \]' "$O"/kernels.log "$O"/model.log "$O"/engine.log

# weft generate on the m2m100 fixture: transformers' greedy ids (margins of 0.57 and more).
fixture=$R/tests/fixtures/seq2seq/m2m100/reference.json
source_ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$fixture'))['encoder_ids'])))")
want=$(python3 -c "import json; print(' '.join(map(str, json.load(open('$fixture'))['greedy_ids'])))")
n=$(echo "$want" | wc -w)
generate() {
  local got
  got=$("$G/bin/weft" generate --model "$R/tests/fixtures/seq2seq/m2m100" --prompt-ids "$source_ids" \
    --max-tokens "$n" --ignore-eos --device cuda) || return 1
  echo "got:  $got"; echo "want: $want"; [ "$got" = "$want" ]
}
check generate generate

# weft bench: six requests of 12 source tokens and 8 output tokens, none failed.
bench() {
  local last
  last=$("$G/bin/weft" bench --model "$R/tests/fixtures/seq2seq_tiny/t5" --num-requests 6 \
    --input-len 12 --output-len 8 --range-ratio 0 --device cuda 2>/dev/null | tail -1) || return 1
  echo "$last"; echo "$last" | grep -q '"failed":0,.*"output_tokens":48,'
}
check bench bench

# weft serve: completions, SSE and WebSocket ids as weft generate --device cuda gives them.
serve() {
  local expected
  expected=$("$G/bin/weft" generate --model "$R/tests/fixtures/seq2seq_tiny/t5" \
    --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 10 --ignore-eos --device cuda) || return 1
  EXPECTED=$expected WEFT_SERVE_ARGS='--device cuda' bash "$R/tests/tools/gateway/run_with_server.sh" \
    "$G/bin/weft" "$R/tests/fixtures/seq2seq_tiny/t5" python3 "$R/tests/tools/gateway/seq2seq_client.py"
}
check serve serve
grep -h -E 'FAIL|failure' "$O/serve.log" | head -5

[ "$failed" = 0 ] && echo "seq2seq_gpu: all passed" || echo "seq2seq_gpu: FAILURES (logs in $O)"
exit "$failed"
