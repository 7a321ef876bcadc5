#!/usr/bin/env bash
# Device call on 4 GPUs (session of 2026-11-26, late morning): issue #20's fused all-reduce +
# norm over four ranks, and issue #18's last fuzz executions on the host's spare cores.
#   1. (background, niced) bench/device/fuzz_long.sh FUZZ_S --targets "gguf:N json_schema:M"
#      on .devcarry/fuzz, when FUZZ=1 (off by default: with weft packed too the carry passes 64 MiB)
#   2. bench/gpu_tp.sh --only tests --tp 4 --test-filter 'Nccl*:*Fused*': nccl_communicator_test
#      (whole, over 2 and 4 ranks: the bf16 expectations fixed after the last four-rank run) and
#      cuda_tensor_parallel_test's FusedNorm* (every fixture fused over 2 and 4 GPUs against 1)
#   3. weft generate --tensor-parallel 4 on every fixture with WEFT_TP_FUSED_NORM=1 against one
#      GPU (the engine, CUDA graphs: 16 greedy tokens)
#   4. bench/gpu_tp.sh --only variants --variant-tp 4: TP=1, TP=4 by default (NCCL on symmetric
#      windows), then each of VARIANTS (default: the fused path, and the fused path up to 64
#      rows); 8b shape, batches 1 and 64, --profile
# Input: .devcarry/tp4f/gpu.tar.xz (bin/{weft,cuda_forward_bench,cuda_tensor_parallel_test,
# nccl_communicator_test}, lib/), .devcarry/fuzz/{fuzz,corpus}.tar.xz.
#   run(kind="nvidia-h100-x4", carry=[".devcarry/tp4f", ".devcarry/fuzz"],
#       command="bash bench/device/tp4_fused.sh")
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
mkdir -p "$O"
BINTAR=${BINTAR:-.devcarry/tp4f/gpu.tar.xz}
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
nproc
fz=
if [ "${FUZZ:-0}" = 1 ]; then
  st "fuzz (background, nice 19)"
  OUT=$O/fuzz nice -n 19 bash bench/device/fuzz_long.sh "${FUZZ_S:-240}" \
    --targets "${FUZZ_TARGETS:-gguf:32}" >"$O/fuzz.log" 2>&1 &
  fz=$!
fi
st tests
OUT=$O/tests GPU_TP_HYBRID=0 timeout "${TESTS_S:-200}" bash bench/gpu_tp.sh --bin "$BINTAR" --only tests \
  --tp 4 --test-filter 'Nccl*:*Fused*' >"$O/tests.log" 2>&1
echo "tests rc=$?"
grep -E "PASSED|FAILED|rc=|Failure|weft generate|== mpirun" "$O/tests.log" | tail -40
st "generate, fused, TP=4"
bin=$(dirname "$(find /tmp/weft-gpu-tp-bin -maxdepth 3 -type f -name weft | head -1)" 2>/dev/null)
if [ -x "$bin/weft" ]; then
  export LD_LIBRARY_PATH="$bin/../lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export WEFT_SPEC_DIR=$PWD/config/models OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 4 -x NCCL_NVLS_ENABLE
       -x LD_LIBRARY_PATH -x WEFT_SPEC_DIR -x WEFT_TP_FUSED_NORM -x WEFT_LOG)
  for m in tests/fixtures/models/*/; do
    m=${m%/}
    g=(generate --model "$m" --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos --device cuda)
    one=$(timeout 60 "$bin/weft" "${g[@]}" 2>/dev/null)
    fused=$(WEFT_TP_FUSED_NORM=1 WEFT_LOG=info timeout 90 "${mpi[@]}" "$bin/weft" "${g[@]}" \
      --tensor-parallel 4 2>"$O/gen_fused_$(basename "$m").err" | grep -v '^NCCL version')
    if [ -n "$one" ] && [ "$one" = "$fused" ]; then
      echo "weft generate TP=4 fused $(basename "$m"): one GPU's 16 tokens"
    else
      echo "weft generate TP=4 fused $(basename "$m"): DIFFERENT: one [$one] fused [$fused]"
      tail -3 "$O/gen_fused_$(basename "$m").err"
    fi
  done
  grep -h "fused norm" "$O"/gen_fused_*.err | sed -E 's/^[^ ]+ //' | sort | uniq -c | head -5
else
  echo "(weft not unpacked: generate skipped)"
fi
if [ -n "$fz" ]; then
  st "waiting for the fuzz run"
  wait "$fz"
  cat "$O/fuzz/fuzz_summary.md" 2>/dev/null || tail -20 "$O/fuzz.log"
fi
st variants
IFS=';' read -ra vs <<<"${VARIANTS:-WEFT_TP_FUSED_NORM=1;WEFT_TP_FUSED_NORM=1 WEFT_TP_FUSED_ROWS=64}"
args=()
for v in "${vs[@]}"; do args+=(--nccl-env "$v"); done
OUT=$O/var timeout "${VAR_S:-290}" bash bench/gpu_tp.sh --bin "$BINTAR" --only variants --variant-tp 4 \
  "${args[@]}" >"$O/var.log" 2>&1
echo "variants rc=$?"
cat "$O/var/gpu_tp_variants.md" 2>/dev/null || tail -30 "$O/var.log"
grep -h "fused norm" "$O"/var/variant_*.txt 2>/dev/null | sort | uniq -c
cd "$O" && tar czf logs.tgz tests var ./*.log 2>/dev/null
st end
