#!/usr/bin/env bash
# Device call on 2 GPUs (session of 2026-11-26, branch tpfuse): issue #20's fused all-reduce +
# residual add + norm over NCCL's device API (docs/parallel.md, "Fused all-reduce and norm"),
# within one 10-minute call.
#   1. bench/gpu_tp.sh --only tests --test-filter '*Fused*': nccl_communicator_test's
#      NcclFusedNorm (the kernel against NCCL's all-reduce + add_norm, bitwise on 2 ranks; in a
#      CUDA graph) and cuda_tensor_parallel_test's FusedNorm* (every fixture fused over 2 GPUs
#      against 1 GPU: logits within the tolerance, greedy tokens), with NCCL's INIT log
#   2. bench/gpu_tp.sh --only variants: TP=1, TP=2 as by default (NCCL's all-reduce), then
#      WEFT_TP_FUSED_NORM=1, and fused with the head's all-gather in a symmetric window;
#      8b shape, batches 1 and 64 (--profile: device ms per step in the collectives)
# Input: .devcarry/tp2.tar.xz from bench/gpu_tp_pack.sh (bin/{weft,cuda_forward_bench,
# cuda_tensor_parallel_test,nccl_communicator_test}, lib/).
#   run(kind="nvidia-h100-x2", carry=[".devcarry/tp2.tar.xz"], command="bash bench/device/tp_fused.sh")
# TESTS_S, VAR_S: the phases' time limits (seconds); VARIANTS="..." replaces the variant list
# (words separated by ';').
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
mkdir -p "$O"
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
nvidia-smi topo -m | head -4
st tests
OUT=$O/tests timeout "${TESTS_S:-200}" bash bench/gpu_tp.sh --bin .devcarry/tp2.tar.xz --only tests \
  --test-filter '*Fused*' >"$O/tests.log" 2>&1
echo "tests rc=$?"
grep -E "PASSED|FAILED|OK|rc=|measured|fused|Fused|device window|Failure" "$O/tests.log" | tail -40
# Why a device window was refused, if it was (NCCL's own words).
grep -hiE "DevComm|window|symmetric|cumem|LSA" "$O"/tests/nccl_communicator_test.np2.log 2>/dev/null |
  sed -E 's/^[^ ]+ [^ ]+ //' | sort | uniq -c | sort -rn | head -12
st variants
IFS=';' read -ra vs <<<"${VARIANTS:-WEFT_TP_FUSED_NORM=1;WEFT_TP_FUSED_NORM=1 WEFT_TP_NCCL_BUFFERS=symmetric}"
args=()
for v in "${vs[@]}"; do args+=(--nccl-env "$v"); done
OUT=$O/var timeout "${VAR_S:-370}" bash bench/gpu_tp.sh --bin .devcarry/tp2.tar.xz --only variants \
  "${args[@]}" >"$O/var.log" 2>&1
echo "variants rc=$?"
cat "$O/var/gpu_tp_variants.md" 2>/dev/null || tail -30 "$O/var.log"
grep -h "fused norm" "$O"/var/variant_*.txt 2>/dev/null | sort | uniq -c
cd "$O" && tar czf logs.tgz tests var ./*.log 2>/dev/null
st end
