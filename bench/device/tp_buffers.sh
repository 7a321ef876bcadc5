#!/usr/bin/env bash
# Device call on 2 GPUs (session of 2026-11-26): issue #20's NCCL buffer variants and the
# hybrid TP x PP check on GPUs, within one 10-minute call.
#   1. bench/gpu_tp.sh --only tests: nccl_communicator_test, cuda_tensor_parallel_test (every
#      fixture over 2 GPUs against 1) and, with weft carried, the hybrid TP=2 x PP=2 (4 ranks on
#      2 GPUs) with plain and symmetric buffers
#   2. bench/gpu_tp.sh --only variants: TP=1, TP=2 plain, WEFT_TP_NCCL_BUFFERS=symmetric and
#      registered, 8b shape, batches 1 and 64
# Input: .devcarry/tp2.tar.xz (bin/{weft,cuda_forward_bench,cuda_tensor_parallel_test,
# nccl_communicator_test}, lib/), packed with /work/wt/pack_gpu.sh-style strip + xz -9e.
#   run(kind="nvidia-h100-x2", carry=[".devcarry/tp2.tar.xz"], command="bash bench/device/tp_buffers.sh")
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; mkdir -p $O
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader; nvidia-smi topo -m | head -4
st tests
OUT=$O/tests timeout ${TESTS_S:-230} bash bench/gpu_tp.sh --bin .devcarry/tp2.tar.xz --only tests > $O/tests.log 2>&1; echo "tests rc=$?"
grep -E "PASSED|FAILED|OK|rc=|hybrid|refus" $O/tests.log | tail -25
st variants
OUT=$O/var timeout ${VAR_S:-330} bash bench/gpu_tp.sh --bin .devcarry/tp2.tar.xz --only variants \
  --nccl-env "WEFT_TP_NCCL_BUFFERS=symmetric" --nccl-env "WEFT_TP_NCCL_BUFFERS=registered" > $O/var.log 2>&1; echo "variants rc=$?"
cat $O/var/gpu_tp_variants.md 2>/dev/null || tail -30 $O/var.log
cd $O && tar czf logs.tgz tests var *.log 2>/dev/null; st end
