#!/usr/bin/env bash
# Large-batch decode attention on one H100 (nvidia-h100-x1), issue #19 item 2: the streaming
# kernel (WEFT_DECODE_ATTN=stream, kernels/cuda/decode_attention_stream.cu) against the old
# (per-split) and new (pipelined) ones. Writes $OUT/decattn2.md (the tables) and the logs.
#   tests   kernels_test: the decode attention tests of all three kernels (CPU reference,
#           bitwise cuts and batches, fused rope), the other attention tests;
#   attn    cuda_decode_attention_bench: attention alone, old/new/stream, batches
#           64,128,256,512 x contexts 512,2048 (Llama-3-8B's shape, 32 layers a step): us per
#           layer, ms per step, KV GB/s, % of the copy bandwidth; "read" rows: the same KV
#           read without attention (the ceiling on this pool layout); a batch of mixed
#           lengths; one layer per page (dense) against the model's 32;
#   model   model_cuda_test with WEFT_DECODE_ATTN=stream (every fixture against transformers and
#           the CPU, greedy batch invariance, CUDA graphs bitwise plain launches), if present;
#   sweep   the streaming kernel's knobs (ring stages, segment length) at batch 64 and 256;
#   step    cuda_forward_bench --shape 8b: whole decode steps per attention kernel
#           (--attn-kernels old,new,stream, the same process) at context 512 (batches
#           64,128,256,512) and 2048 (64,128: batch 256 x 2048 does not fit 80 GB beside the
#           weights), with --profile (attention ms per kernel on the same steps).
# STAGES=tests,model,attn,sweep,step picks stages (default all); stages that would start after
# BUDGET_S seconds (default 540) are skipped, so one call stays under 10 minutes.
#
# The three binaries (stripped, over the 64 MiB a call carries, so an xz tarball of bin/ and
# lib/), built here with `cmake --preset release`:
#   cmake --build build/release -j2 --target kernels_test model_cuda_test \
#     cuda_decode_attention_bench cuda_forward_bench
#   mkdir -p .devcarry/da2/bin .devcarry/da2/lib
#   for b in tests/kernels/kernels_test tests/runtime/model_cuda_test \
#     bin/cuda_decode_attention_bench bin/cuda_forward_bench; do
#     strip -o .devcarry/da2/bin/${b##*/} build/release/$b; done
#   for b in .devcarry/da2/bin/*; do ldd $b | awk '/=> \// {print $3}'; done |
#     grep -E 'simdjson|libmpi|open-rte|open-pal|hwloc|libevent' | sort -u |
#     xargs -r -I{} cp -L {} .devcarry/da2/lib/
#   tar -C .devcarry/da2 -cf - bin lib | xz -6 -T2 > .devcarry/decattn2.tar.xz
#   run(kind="nvidia-h100-x1", command="bash bench/device/decattn2.sh .devcarry/decattn2.tar.xz",
#       carry=[".devcarry/decattn2.tar.xz"])
# (A folder with bin/ and lib/ works too.)
set -u
C=${1:-.devcarry/decattn2.tar.xz}
O=${OUT:-/tmp/out}
W=/tmp/decattn2
mkdir -p "$O" "$W"
R=$PWD
if [ -f "$C" ]; then
  mkdir -p "$W/bin" && tar -C "$W" -xJf "$C" && C=$W
elif [ -d "$R/$C" ]; then
  C=$R/$C
fi
B=$C/bin
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models \
  WEFT_TEST_SOURCE_DIR=$R
STAGES=${STAGES:-tests,model,attn,sweep,step}
BUDGET_S=${BUDGET_S:-540}
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
want() { case ",$STAGES," in *",$1,"*) [ "$(el)" -lt "$BUDGET_S" ] ;; *) return 1 ;; esac; }
T=$O/decattn2.md
{
  echo "# decattn2 on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo
} > "$T"

if want tests; then
  timeout 240 "$B/kernels_test" --gtest_color=no \
    --gtest_filter='*CudaDecodeAttention*:DecodeAttentionKernel*:*CudaKernels.*Attention*:*CudaKvQuant*Attention*' \
    > "$O/tests.log" 2>&1
  echo "tests rc=$? [t+$(el)s]"
  {
    echo "## Tests (kernels_test, decode attention)"
    echo '```'
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|tests ran" "$O/tests.log" | sort -u | head -40
    grep -B2 -A6 "Failure" "$O/tests.log" | head -60
    echo '```'
    echo
  } >> "$T"
fi

if want model && [ -x "$B/model_cuda_test" ]; then
  WEFT_DECODE_ATTN=stream timeout 240 "$B/model_cuda_test" --gtest_color=no > "$O/model.log" 2>&1
  echo "model_cuda_test (stream) rc=$? [t+$(el)s]"
  {
    echo "## model_cuda_test with WEFT_DECODE_ATTN=stream"
    echo '```'
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$O/model.log" | sort -u | head -30
    grep -B2 -A6 "Failure" "$O/model.log" | head -40
    echo '```'
    echo
  } >> "$T"
fi

if want attn; then
  timeout 200 "$B/cuda_decode_attention_bench" --batches 64,128,256,512 --contexts 512,2048 \
    --kernels old,new,stream,read --json "$O/attn.json" > "$O/attn.log" 2>&1
  echo "attn rc=$? [t+$(el)s]"
  # Batch 512 x 2048 does not fit with 32 layers per page (137 GB): 16 layers per page.
  timeout 100 "$B/cuda_decode_attention_bench" --batches 512 --contexts 2048 --layers 16 \
    --kernels old,new,stream,read --json "$O/attn_512x2048.json" > "$O/attn_512x2048.log" 2>&1
  echo "attn 512x2048 rc=$? [t+$(el)s]"
  timeout 100 "$B/cuda_decode_attention_bench" --batches 64,256 --contexts 1024 --spread 0.9 \
    --kernels old,new,stream --json "$O/attn_mixed.json" > "$O/attn_mixed.log" 2>&1
  echo "attn mixed rc=$? [t+$(el)s]"
  # What the pool's layout costs: one layer per page (each launch reads its KV densely)
  # against the model's 32 (a launch reads 64 KB of each 2 MB page).
  timeout 100 "$B/cuda_decode_attention_bench" --batches 64,256 --contexts 512 --layers 1 \
    --kernels old,new,stream,read > "$O/attn_dense.log" 2>&1
  echo "attn dense rc=$? [t+$(el)s]"
  {
    echo "## Decode attention alone (cuda_decode_attention_bench, 8b shape, rope in kernel)"
    echo '```'
    cat "$O/attn.log"
    echo '```'
    echo "Batch 512 x 2048 with 16 layers per page:"
    echo '```'
    grep -E "^ +512 " "$O/attn_512x2048.log"
    echo '```'
    echo "Mixed lengths (contexts uniform in [102, 1945]):"
    echo '```'
    grep -E "^ +[0-9]+ +[0-9]+ " "$O/attn_mixed.log"
    echo '```'
    echo "One layer per page (dense KV per launch; compare with the 32-layer rows above):"
    echo '```'
    grep -E "^ +[0-9]+ +[0-9]+ " "$O/attn_dense.log"
    echo '```'
    echo
  } >> "$T"
fi

if want sweep; then
  echo "## Streaming kernel knobs (batch 64 and 256; contexts 512 and 2048)" >> "$T"
  echo '```' >> "$T"
  for st in 2 3 4; do
    for sg in 128 256 512; do
      [ "$(el)" -lt "$BUDGET_S" ] || break
      WEFT_DECODE_STREAM_STAGES=$st WEFT_DECODE_STREAM_SEGMENT_KEYS=$sg timeout 60 \
        "$B/cuda_decode_attention_bench" --batches 64,256 --contexts 512,2048 --kernels stream \
        --repeats 5 > "$O/sweep_${st}_${sg}.log" 2>&1
      echo "stages $st segment $sg:" >> "$T"
      grep -E "^ +[0-9]+ +[0-9]+ stream" "$O/sweep_${st}_${sg}.log" >> "$T"
    done
  done
  echo '```' >> "$T"
  echo >> "$T"
  echo "sweep done [t+$(el)s]"
fi

if want step; then
  for ctx in 512 2048; do
    [ "$(el)" -lt "$BUDGET_S" ] || break
    if [ $ctx = 512 ]; then bs=64,128,256,512; else bs=64,128; fi
    timeout 280 "$B/cuda_forward_bench" --shape 8b --context $ctx --batches $bs --prefill "" \
      --repeats 12 --attn-kernels old,new,stream --profile --json "$O/step_$ctx.json" \
      > "$O/step_$ctx.log" 2>&1
    echo "step $ctx rc=$? [t+$(el)s]"
    {
      echo "## Whole 8b decode steps, context $ctx (cuda_forward_bench --attn-kernels old,new,stream --profile)"
      echo '```'
      grep -E "copy bandwidth|^decode|decode attention, batch|^kind" "$O/step_$ctx.log"
      echo '```'
      echo
    } >> "$T"
  done
fi
echo "end [t+$(el)s]"
cat "$T"
