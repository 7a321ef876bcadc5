#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26): the CUDA tests after code moves (the split of
# paged_attention.cu and cuda_model.cpp): kernels_test's CUDA suites and model_cuda_test, from
# .devcarry/split1/gpu.tar.xz (bin/{kernels_test,model_cuda_test}, lib/; /work/wt/pack_gpu.sh).
#   run(carry=[".devcarry/split1"], command="bash bench/device/split_check.sh")
set -u
. bench/device/carry.sh split1
for t in kernels_test model_cuda_test; do
  s=$(date +%s)
  f=(); [ $t = kernels_test ] && f=(--gtest_filter='*Cuda*:DeviceInfo*')
  timeout 280 $d/bin/$t "${f[@]}" --gtest_color=no > "$O/$t.log" 2>&1; echo "$t rc=$? ($(( $(date +%s) - s )) s)"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|tests ran" "$O/$t.log" | sort | uniq -c | head -20
done
