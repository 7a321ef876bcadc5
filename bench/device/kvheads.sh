#!/usr/bin/env bash
# The GPU's KV-Compress tests after the variable per-head split (CPU backend) landed: the CUDA
# model's and kernels' KV-Compress cases (their CPU references use cpu::PagedKv, which gained
# per-head cells) and the quantized KV paths, on whatever GPU the call gets.
# run(carry=[".devcarry/vh"], command="bash bench/device/kvheads.sh")
. bench/device/carry.sh vh
"$B/kernels_test" --gtest_filter='*KvCompress*:*KvQuant*:*PagedAttention*' 2>&1 | tail -4 | tee "$O/kernels.txt"
"$B/model_cuda_test" --gtest_filter='*KvCompress*:*KvQuant*' 2>&1 | tail -4 | tee "$O/model.txt"
