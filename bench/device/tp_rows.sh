#!/usr/bin/env bash
# Device call on 4 GPUs (session of 2026-11-26, late morning): how many rows the fused
# all-reduce + norm should take (WEFT_TP_FUSED_ROWS), at TP=2 and TP=4, 8B shape and 70B widths.
#   1. bench/gpu_tp.sh --only tests --tp 4 --test-filter 'CudaTensorParallelSwitches*': the
#      switches test over 2 and 4 ranks (the fused path is now on by default for both)
#   2. --only variants --variant-tp 2, 8b, batches 1,64,256: default (fused up to 16 rows),
#      WEFT_TP_FUSED_NORM=0 (NCCL's all-reduce), WEFT_TP_FUSED_ROWS=64 and 256
#   3. the same at --variant-tp 4 (default: fused up to 16 rows since this session)
#   4. --variant-tp 4 --variant-shape 70b (LAYERS_70B layers, default 20): default, NCCL,
#      ROWS=64, ROWS=256
# RUNS ("TP SHAPE BATCHES;..."), VARIANTS ("ENV;ENV...") and TEST_FILTER replace the lists
# above, e.g. the second call (after the generic kernel's fix and the new row defaults):
#   RUNS="4 70b 1,64,256;2 70b 1,64,256;2 8b 1,64,256;4 8b 1,64,256"
#   VARIANTS="WEFT_TP_FUSED_NORM=0;WEFT_TP_FUSED_ROWS=256" TEST_FILTER='Nccl*:*Fused*'
# LIMITS ("S S ...", seconds per run of RUNS) bound each run.
# Input: .devcarry/tp4f/gpu.tar.xz (bin/{cuda_forward_bench,cuda_tensor_parallel_test,
# nccl_communicator_test}, lib/).
#   run(kind="nvidia-h100-x4", carry=[".devcarry/tp4f"], command="bash bench/device/tp_rows.sh")
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
mkdir -p "$O"
BINTAR=${BINTAR:-.devcarry/tp4f/gpu.tar.xz}
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
nvidia-smi --query-gpu=index,name --format=csv,noheader
st tests
OUT=$O/tests GPU_TP_HYBRID=0 timeout "${TESTS_S:-100}" bash bench/gpu_tp.sh --bin "$BINTAR" --only tests --tp 4 \
  --test-filter "${TEST_FILTER:-CudaTensorParallelSwitches*}" >"$O/tests.log" 2>&1
echo "tests rc=$?"
grep -E "PASSED|FAILED|Failure|== mpirun" "$O/tests.log" | tail -12
IFS=';' read -ra vlist <<<"${VARIANTS:-WEFT_TP_FUSED_NORM=0;WEFT_TP_FUSED_ROWS=64;WEFT_TP_FUSED_ROWS=256}"
vs=()
for v in "${vlist[@]}"; do vs+=(--nccl-env "$v"); done
IFS=';' read -ra runs <<<"${RUNS:-2 8b 1,64,256;4 8b 1,64,256;4 70b 1,64,256}"
read -ra limits <<<"${LIMITS:-}"
n=0
for run in "${runs[@]}"; do
  read -r tp shape batches <<<"$run"
  st "variants TP=$tp $shape"
  lim=150; [ "$shape" = 70b ] && lim=190
  [ -n "${limits[$n]:-}" ] && lim=${limits[$n]}
  n=$((n + 1))
  OUT=$O/v$n timeout "$lim" bash bench/gpu_tp.sh --bin "$BINTAR" --only variants --variant-tp "$tp" \
    --variant-shape "$shape" --layers-70b "${LAYERS_70B:-20}" --variant-batches "$batches" "${vs[@]}" \
    >"$O/v$n.log" 2>&1
  echo "variants rc=$?"
  cp "$O/v$n/gpu_tp_variants.md" "$O/table_$n.md" 2>/dev/null
  sed -n '1,12p' "$O/v$n/gpu_tp_variants.md" 2>/dev/null || tail -20 "$O/v$n.log"
  grep -h "fused norm" "$O"/v$n/variant_*.txt 2>/dev/null | sort | uniq -c | cut -c1-160
done
cd "$O" && tar czf logs.tgz tests v[0-9]* ./*.log 2>/dev/null
st end
