#!/usr/bin/env bash
# Device call on 2 GPUs (session of 2026-11-26, branch tpfuse): issue #20's fused all-reduce +
# residual add + norm over NCCL's device API (docs/parallel.md, "Fused all-reduce and norm"),
# within one 10-minute call.
#   1. bench/gpu_tp.sh --only tests --test-filter '*Fused*': nccl_communicator_test's
#      NcclFusedNorm (the kernel against NCCL's all-reduce + add_norm, bitwise on 2 ranks; in a
#      CUDA graph) and cuda_tensor_parallel_test's FusedNorm* (every fixture fused over 2 GPUs
#      against 1 GPU: logits within the tolerance, greedy tokens), with NCCL's INIT log
#   2. weft generate --tensor-parallel 2 on four fixtures (GENERATE_MODELS), fused against
#      NCCL's all-reduce (the same 16 greedy tokens; GENERATE=0 skips it)
#   3. bench/gpu_tp.sh --only variants: TP=1, TP=2 as by default (NCCL's all-reduce), then
#      WEFT_TP_FUSED_NORM=1; 8b shape, batches 1 and 64 (--profile: device ms per step in the
#      collectives). VARIANTS="A;B" replaces the list, e.g.
#      VARIANTS="WEFT_TP_FUSED_NORM=1;WEFT_TP_FUSED_NORM=1 WEFT_TP_NCCL_BUFFERS=symmetric"
# Input: .devcarry/tp2.tar.xz from bench/gpu_tp_pack.sh (bin/{weft,cuda_forward_bench,
# cuda_tensor_parallel_test,nccl_communicator_test}, lib/).
#   run(kind="nvidia-h100-x2", carry=[".devcarry/tp2.tar.xz"], command="bash bench/device/tp_fused.sh")
# TESTS_S, VAR_S: the phases' time limits (seconds, default 200 and 300: the call's 10 minutes).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
mkdir -p "$O"
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
nvidia-smi topo -m | head -4
st tests
OUT=$O/tests GPU_TP_HYBRID=0 timeout "${TESTS_S:-200}" bash bench/gpu_tp.sh --bin .devcarry/tp2.tar.xz --only tests \
  --test-filter '*Fused*' >"$O/tests.log" 2>&1
echo "tests rc=$?"
grep -E "PASSED|FAILED|OK|rc=|measured|fused|Fused|device window|Failure" "$O/tests.log" | tail -40
# Why a device window was refused, if it was (NCCL's own words).
grep -hiE "DevComm|window|symmetric|cumem|LSA" "$O"/tests/nccl_communicator_test.np2.log 2>/dev/null |
  sed -E 's/^[^ ]+ [^ ]+ //' | sort | uniq -c | sort -rn | head -12
# weft generate over 2 GPUs (the engine, CUDA graphs) with the fused path against NCCL's, on
# every fixture: 16 greedy tokens each (the binaries gpu_tp.sh unpacked; weft must be packed).
if [ "${GENERATE:-1}" = 1 ]; then
  st generate
  bin=$(dirname "$(find /tmp/weft-gpu-tp-bin -maxdepth 3 -type f -name weft | head -1)" 2>/dev/null)
  if [ -x "$bin/weft" ]; then
    export LD_LIBRARY_PATH="$bin/../lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export WEFT_SPEC_DIR=$PWD/config/models OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE
         -x LD_LIBRARY_PATH -x WEFT_SPEC_DIR -x WEFT_TP_FUSED_NORM -x WEFT_LOG)
    for m in ${GENERATE_MODELS:-llama_gqa_f32 llama_linear_headdim_bias_f16 mistral_swa_bf16 qwen2_tied_f32}; do
      m=tests/fixtures/models/$m
      g=(generate --model "$m" --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos
         --device cuda --tensor-parallel 2)
      nccl=$(WEFT_TP_FUSED_NORM=0 timeout 60 "${mpi[@]}" "$bin/weft" "${g[@]}" 2>"$O/gen_nccl.err" |
        grep -v '^NCCL version')
      fused=$(WEFT_TP_FUSED_NORM=1 WEFT_LOG=info timeout 60 "${mpi[@]}" "$bin/weft" "${g[@]}" \
        2>"$O/gen_fused_$(basename "$m").err" | grep -v '^NCCL version')
      if [ -n "$nccl" ] && [ "$nccl" = "$fused" ]; then
        echo "weft generate TP=2 $(basename "$m"): fused gives NCCL's 16 tokens"
      else
        echo "weft generate TP=2 $(basename "$m"): DIFFERENT: nccl [$nccl] fused [$fused]"
        tail -3 "$O/gen_fused_$(basename "$m").err"
      fi
    done
    grep -h "fused norm" "$O"/gen_fused_*.err | sort | uniq -c | head -5
  else
    echo "(weft not packed: generate skipped)"
  fi
fi
st variants
IFS=';' read -ra vs <<<"${VARIANTS:-WEFT_TP_FUSED_NORM=1}"
args=()
for v in "${vs[@]}"; do args+=(--nccl-env "$v"); done
OUT=$O/var timeout "${VAR_S:-300}" bash bench/gpu_tp.sh --bin .devcarry/tp2.tar.xz --only variants \
  "${args[@]}" >"$O/var.log" 2>&1
echo "variants rc=$?"
cat "$O/var/gpu_tp_variants.md" 2>/dev/null || tail -30 "$O/var.log"
grep -h "fused norm" "$O"/var/variant_*.txt 2>/dev/null | sort | uniq -c
cd "$O" && tar czf logs.tgz tests var ./*.log 2>/dev/null
st end
