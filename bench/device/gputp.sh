#!/usr/bin/env bash
# Device call on two GPUs (prepared in the session of 2026-11-27, evening; branch gputp): the
# checks that let GPU ranks take quantized weights and KV-Compress under tensor parallelism
# (both refused on GPU ranks on main until these pass).
#   1. cuda_tensor_parallel_test 'Quantized/*' (each rank's q8_b32 shard against the whole
#      quantized model on one GPU, three fixtures) and 'Fixtures/*llama_gqa*' (unchanged paths);
#   2. weft generate on weft-tiny, one GPU against TP=2: --kv-compress-rate 0.5 (the same text,
#      KV pages freed) and --quantize q8_b32 (the same text), as the CTests
#      weft_generate_tensor_parallel_cuda_{kv_compress,quantized} do.
# TPT_FILTER: the tests of 1. instead (a gtest filter); CARRY: another carry than gtp.
# Input: .devcarry/gtp/gpu.tar.xz (bin/{cuda_tensor_parallel_test,weft}, lib/) built from the
# branch.
#   run(kind="nvidia-h200-x2", carry=[".devcarry/gtp"], command="bash bench/device/gputp.sh")
set -u
. bench/device/carry.sh "${CARRY:-gtp}"
. bench/device/fwdruns.sh
read -ra mpi2 <<<"$(mpi_np 2)"
timeout 300 "${mpi2[@]}" $B/cuda_tensor_parallel_test --gtest_color=no \
  --gtest_filter="${TPT_FILTER:-Quantized/*:Fixtures/*llama_gqa*}" >"$O/tpt.log" 2>&1
echo "tpt rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/tpt.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|measured.*q8|error" "$O/tpt.log" | sort -u | head -12
tiny=models/weft-tiny
kvc=(generate --model $tiny --device cuda --prompt 'The whale, the sea and the ship were all that the men of the Pequod knew for three long years, and the captain' --max-tokens 12 --ignore-eos --kv-compress-rate 0.5 --kv-compress-window 4 --page-size 4)
q=(generate --model $tiny --device cuda --prompt-ids 5,17,42,99,3,201,64 --max-tokens 12 --ignore-eos --quantize q8_b32)
for what in kvc q; do
  declare -n args=$what
  one=$(timeout 120 $B/weft "${args[@]}" 2>"$O/${what}1.err")
  two=$(timeout 120 "${mpi2[@]}" $B/weft "${args[@]}" --tensor-parallel 2 2>"$O/${what}2.err")
  echo "$what one GPU: $one"
  echo "$what TP=2:    $two"
  [ -n "$one" ] && [ "$one" = "$two" ] && echo "$what: same text" || { echo "$what: DIFFERENT"; tail -3 "$O/${what}2.err"; }
  grep -h "KV pages freed" "$O/${what}"*.err | head -2
done
