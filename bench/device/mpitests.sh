#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-26, evening): the GPU tests run over MPI ranks,
# after they moved to one shared main (tests/runtime/parallel/mpi/mpi_gtest_main.hpp) and the
# fused-norm graph test's dedupe of the session before: nccl_communicator_test,
# nccl_point_to_point_test, cuda_tensor_parallel_test and cuda_pipeline_test under
# mpirun -np 2. Input: .devcarry/mpit/gpu.tar.xz (the four binaries, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/mpit"], command="bash bench/device/mpitests.sh")
set -u
. bench/device/carry.sh mpit
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
for t in nccl_communicator_test nccl_point_to_point_test cuda_tensor_parallel_test cuda_pipeline_test; do
  s=$(date +%s)
  timeout 240 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH \
    -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR -x NCCL_NVLS_ENABLE $d/bin/$t --gtest_color=no > /tmp/$t.log 2>&1
  echo "$t rc=$? ($(( $(date +%s) - s )) s): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' /tmp/$t.log | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" /tmp/$t.log | sort -u | head -5
  grep -E "RunsInsideCudaGraphs|us per pair|fused .* us" /tmp/$t.log | head -4
done
