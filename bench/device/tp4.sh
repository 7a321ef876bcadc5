#!/usr/bin/env bash
# Device call on 4 GPUs (session of 2026-11-26, morning): issue #20's TP=4.
#   PHASE=a: bench/gpu_tp.sh --only tests (nccl_communicator_test and cuda_tensor_parallel_test
#            over 2 and 4 ranks, weft generate --tensor-parallel 4 on every fixture against one
#            GPU, the hybrid TP=2 x PP=2 with one rank per GPU), then --only forward --shapes 8b
#            at TP=1, 2 and 4
#   PHASE=b: --only forward --shapes 70b --layers-70b ${LAYERS_70B:-20} at TP=1, 2 and 4, then
#            the TP=4 variants (NCCL_PROTO=LL, symmetric buffers) at batches 1 and 64
# Input: .devcarry/tp4/gpu.tar.xz (bin/{weft,cuda_forward_bench,cuda_tensor_parallel_test,
# nccl_communicator_test}, lib/), packed with /work/wt/pack_gpu.sh (strip + xz -9e).
#   run(kind="nvidia-h100-x4", carry=[".devcarry/tp4"], command="PHASE=a bash bench/device/tp4.sh")
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; mkdir -p "$O"
BINTAR=${BINTAR:-.devcarry/tp4/gpu.tar.xz}
BATCHES=${BATCHES:-1,8,64,256}
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader; nvidia-smi topo -m | head -6
case ${PHASE:-a} in
a)
  st tests
  OUT=$O/tests timeout "${TESTS_S:-240}" bash bench/gpu_tp.sh --bin "$BINTAR" --only tests --tp 1,2,4 \
    >"$O/tests.log" 2>&1; echo "tests rc=$?"
  grep -E "PASSED|FAILED|rc=|hybrid|same 16|tp2|refus|== mpirun" "$O/tests.log" | tail -40
  st forward 8b
  OUT=$O/f8 timeout "${FWD_S:-330}" bash bench/gpu_tp.sh --bin "$BINTAR" --only forward --shapes 8b \
    --batches "$BATCHES" --tp 1,2,4 >"$O/f8.log" 2>&1; echo "forward 8b rc=$?"
  grep -E "^\[t|^decode|^prefill|FAILED" "$O/f8.log" | tail -30
  cat "$O/f8/gpu_tp_table.md" 2>/dev/null ;;
b)
  st forward 70b
  OUT=$O/f70 timeout "${FWD_S:-400}" bash bench/gpu_tp.sh --bin "$BINTAR" --only forward --shapes 70b \
    --layers-70b "${LAYERS_70B:-20}" --batches "$BATCHES" --tp 1,2,4 >"$O/f70.log" 2>&1; echo "forward 70b rc=$?"
  grep -E "^\[t|^decode|^prefill|FAILED" "$O/f70.log" | tail -30
  cat "$O/f70/gpu_tp_table.md" 2>/dev/null
  st variants
  OUT=$O/var timeout "${VAR_S:-160}" bash bench/gpu_tp.sh --bin "$BINTAR" --only variants --variant-tp 4 \
    --nccl-env "NCCL_PROTO=LL" --nccl-env "WEFT_TP_NCCL_BUFFERS=symmetric" >"$O/var.log" 2>&1
  echo "variants rc=$?"
  cat "$O/var/gpu_tp_variants.md" 2>/dev/null || tail -20 "$O/var.log" ;;
esac
cd "$O" && tar czf logs.tgz --exclude=logs.tgz . 2>/dev/null; st end
