#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-26, evening): the GPU pipeline checks that
# tests/tools/parallel.cmake defines as ctest entries (they need GPUs, so CI skips them), run
# here with the carried weft by the same commands: every fixture model's greedy tokens with
# --pipeline-parallel 2 over NCCL and with both ranks on one GPU against one GPU; weft bench on
# weft-tiny: PP=2 (one step at a time) gives one GPU's digest, two micro-batches in each decode
# step finish every request, and the default (now two sequence groups) finishes every request
# with two steps in flight. Input: .devcarry/ppc/gpu.tar.xz (bin/weft).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/ppc"], command="bash bench/device/ppctest.sh")
set -u
. bench/device/carry.sh ppc
W=$d/bin/weft
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE)
pass=0; fail=0
check() { if [ "$2" = ok ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1: $3"; fi; }
for dir in tests/fixtures/models/*/; do
  [ -f "$dir/config.json" ] || continue
  name=$(basename "$dir")
  a=(generate --model "$dir" --prompt-ids 5,17,42,99,3,201,64 --max-tokens 8 --ignore-eos --device cuda)
  one=$(timeout 60 $W "${a[@]}" 2>/dev/null)
  two=$(WEFT_PP_TRANSPORT=nccl timeout 90 "${MPI[@]}" -x WEFT_PP_TRANSPORT $W "${a[@]}" --pipeline-parallel 2 2>/dev/null)
  [ -n "$one" ] && [ "$one" = "$two" ] && r=ok || r=no
  check "pipeline_parallel_cuda_$name" $r "one GPU '$one', PP=2 '$two'"
  two1=$(CUDA_VISIBLE_DEVICES=0 timeout 90 "${MPI[@]}" -x CUDA_VISIBLE_DEVICES $W "${a[@]}" --pipeline-parallel 2 2>/dev/null)
  [ -n "$one" ] && [ "$one" = "$two1" ] && r=ok || r=no
  check "pipeline_parallel_one_gpu_$name" $r "one GPU '$one', PP=2 on one GPU '$two1'"
done
b=(bench --model models/weft-tiny --device cuda --num-requests 8 --input-len 16 --output-len 8 --gpu-memory-fraction 0.3)
one=$(timeout 60 $W "${b[@]}" 2>/dev/null | grep -o 'output_digest":"[0-9a-f]*')
two=$(WEFT_PP_TRANSPORT=nccl timeout 90 "${MPI[@]}" -x WEFT_PP_TRANSPORT $W "${b[@]}" --pipeline-parallel 2 --pp-groups 1 2>/dev/null | grep -o 'output_digest":"[0-9a-f]*')
[ -n "$one" ] && [ "$one" = "$two" ] && r=ok || r=no
check bench_pipeline_parallel_cuda $r "one GPU $one, PP=2 $two"
out=$(WEFT_PP_TRANSPORT=nccl WEFT_PP_MICRO_TOKENS=1 timeout 90 "${MPI[@]}" -x WEFT_PP_TRANSPORT -x WEFT_PP_MICRO_TOKENS $W "${b[@]}" --pipeline-parallel 2 --micro-batches 2 2>&1)
grep -q "requests 8 (0 failed)" <<<"$out" && r=ok || r=no
check bench_pipeline_parallel_cuda_micro_batches $r "$(tail -c 300 <<<"$out")"
out=$(WEFT_PP_TRANSPORT=nccl timeout 90 "${MPI[@]}" -x WEFT_PP_TRANSPORT $W "${b[@]}" --pipeline-parallel 2 2>&1)
grep -q "requests 8 (0 failed)" <<<"$out" && grep -q 'steps_in_flight_peak":2' <<<"$out" && r=ok || r=no
check "bench_pipeline_parallel_cuda_groups (the default)" $r "$(tail -c 300 <<<"$out")"
echo "passed $pass, failed $fail"
