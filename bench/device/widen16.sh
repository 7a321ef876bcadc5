#!/usr/bin/env bash
# Device call on two or four GPUs (session of 2026-11-27): the add_norm that reads a bf16
# all-reduce's sums itself (AddNormArgs::delta16) instead of a widening pass before it.
#   1. kernels_test --gtest_filter='*AddNorm*' on GPU 0 (the 16-bit delta bitwise equal to its
#      widened fp32 values on every add_norm kernel)
#   2. cuda_tensor_parallel_test over TP ranks (TEST_FILTER; the bf16 modes all-reduce from one
#      token, so every step takes the new path)
#   3. cuda_forward_bench, 8B shape, a 512-token prefill and 64 decode rows + a 512-token chunk,
#      TP ranks, alternating the binary before (cuda_forward_bench_old, main at 821947e) and
#      after, ROUNDS times
# Input: .devcarry/nw/gpu.tar.xz (bin/{kernels_test,cuda_tensor_parallel_test,
# cuda_forward_bench,cuda_forward_bench_old}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/nw"], command="bash bench/device/widen16.sh")
set -u
. bench/device/carry.sh nw
TP=${TP:-2}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$TP" -x LD_LIBRARY_PATH
  -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR -x NCCL_NVLS_ENABLE)
CUDA_VISIBLE_DEVICES=0 timeout 120 "$B/kernels_test" --gtest_filter='*AddNorm*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | head
timeout 200 "${mpi[@]}" "$B/cuda_tensor_parallel_test" \
  --gtest_filter="${TEST_FILTER:-Fixtures*:SymmetricBuffers*:FusedNormDecodeOnly*}" >"$O/tp_tests.txt" 2>&1
echo "cuda_tensor_parallel_test rc=$?"
sed 's/\x1b\[[0-9;]*m//g' "$O/tp_tests.txt" | grep -E "^\[  (PASSED|FAILED)|Failure" | sort | uniq -c | head
args=(--shape 8b --context 512 --batches 64 --prefill 512 --mixed 512 --repeats 5 --tensor-parallel "$TP")
for r in $(seq "${ROUNDS:-2}"); do
  for bin in cuda_forward_bench_old cuda_forward_bench; do
    line=$(timeout 120 "${mpi[@]}" "$B/$bin" "${args[@]}" 2>&1 | grep -E "^(prefill|mixed) ")
    echo "round $r $bin: $(echo "$line" | awk '{printf "%s %s ms; ", $1, $4}')"
  done
done
