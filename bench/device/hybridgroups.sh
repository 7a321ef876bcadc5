#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-26, evening): TP=2 x PP=2 with sequence groups in
# flight (now the default) where no four-GPU machine is lent: four ranks on two GPUs (each
# stage's tensor-parallel pair over GPUs 0 and 1, the stages through host memory since their
# ranks share GPUs), weft-tiny and the 8B folder's shape at small scale: every request must
# finish with two steps in flight; weft generate (no groups) gives TP=2's tokens.
# Input: .devcarry/ppc/gpu.tar.xz (bin/weft).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/ppc"], command="bash bench/device/hybridgroups.sh")
set -u
. bench/device/carry.sh ppc
W=$d/bin/weft
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE)
g=(generate --model tests/fixtures/models/llama_gqa_f32 --prompt-ids 5,17,42,99,3,201,64 --max-tokens 8 --ignore-eos --device cuda)
tp2=$(timeout 90 "${MPI[@]}" -np 2 $W "${g[@]}" --tensor-parallel 2 2>/dev/null)
hy=$(timeout 120 "${MPI[@]}" -np 4 $W "${g[@]}" --tensor-parallel 2 --pipeline-parallel 2 2>/dev/null)
echo "generate TP=2: $tp2"; echo "generate TP=2 x PP=2: $hy"
[ -n "$tp2" ] && [ "$tp2" = "$hy" ] && echo "ok   hybrid generate gives TP=2's tokens" || echo "FAIL hybrid generate"
for reqs in 16 64; do
  out=$(timeout 150 "${MPI[@]}" -np 4 $W bench --model models/weft-tiny --device cuda --num-requests $reqs \
    --input-len 128 --output-len 16 --gpu-memory-fraction 0.2 --tensor-parallel 2 --pipeline-parallel 2 2>/tmp/hy.err)
  echo "bench TP=2 x PP=2, $reqs requests: $(grep -o 'requests [0-9]* ([0-9]* failed)' <<<"$out" | head -1), $(grep -o 'steps_in_flight_peak":[0-9]*' <<<"$out")"
done
grep -h "sequence groups\|stages exchange" /tmp/hy.err | sort -u | head -3
