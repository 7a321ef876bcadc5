#!/usr/bin/env bash
# Device calls on two or four GPUs (session of 2026-11-27): large tensor-parallel steps.
#   PHASE=fwd: cuda_tensor_parallel_test over TP ranks (TEST_FILTER), then cuda_forward_bench,
#     8B shape, a 512-token prefill, decode batches BATCHES at context 512 and the same with a
#     512-token chunk in the step (--mixed 512): TP=1, then TP ranks under VARIANTS (";"-separated
#     environment settings; "default" for none), and the default again with --profile. Its first
#     run used the binaries of branch tpchunks (666d52d, not kept; its change is in
#     docs/notes/tpchunks.md: o's and down's products in row chunks overlapped with their
#     all-reduces, WEFT_TP_REDUCE_CHUNKS, measured slower and not merged); main's binaries
#     ignore that variable.
#   PHASE=ref: PyTorch's NCCL all-reduce at 32 KB-64 MB over TP ranks (bench/device/nccl_ref.py,
#     the reference), then cuda_forward_bench --profile at TP ranks with NCCL_DEBUG=INFO (which
#     transport NCCL chose).
#   PHASE=eng: weft bench on the random 8B folder, 256 requests 64 at a time, 512 in / 128 out:
#     CONFIGS of tp1 (one GPU), new (TP ranks, defaults: bf16 all-reduces from 128 tokens),
#     old (TP ranks, WEFT_TP_BF16_REDUCE_TOKENS=0: fp32 all-reduces as before).
# Input: .devcarry/tpc/gpu.tar.xz (bin/{weft,cuda_forward_bench,cuda_tensor_parallel_test}, lib/)
# and for PHASE=eng the Llama-3 tokenizer in .devcarry/l3.
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tpc"], command="PHASE=fwd bash bench/device/tpchunks.sh")
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tpc", ".devcarry/l3"], command="PHASE=ref bash bench/device/tpchunks.sh; PHASE=eng bash bench/device/tpchunks.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tpc
TP=${TP:-2}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$TP" -x LD_LIBRARY_PATH
  -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR -x NCCL_NVLS_ENABLE -x WEFT_TP_BF16_REDUCE_TOKENS
  -x WEFT_TP_REDUCE_CHUNKS -x WEFT_TP_REDUCE_CHUNK_TOKENS)
field() { echo "$2" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }
case ${PHASE:-fwd} in
fwd)
  st "cuda_tensor_parallel_test over $TP ranks"
  timeout "${TESTS_S:-200}" "${mpi[@]}" "$B/cuda_tensor_parallel_test" \
    --gtest_filter="${TEST_FILTER:-ChunkedReduce*:Fixtures*:CudaTensorParallelSwitches*}" >"$O/tests.txt" 2>&1
  echo "tests rc=$?"
  grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED|tests ran|Failure" "$O/tests.txt" | head -20
  grep -E "chunks" "$O/tests.txt" | head -3
  args=(--shape 8b --context 512 --batches "${BATCHES:-64,384}" --prefill 512 --mixed 512 --repeats 5)
  st "TP=1"
  timeout 150 "$B/cuda_forward_bench" "${args[@]}" >"$O/fwd_tp1.txt" 2>&1
  grep -E "^(prefill|decode|mixed) " "$O/fwd_tp1.txt"
  IFS=';' read -ra variants <<<"${VARIANTS:-default;WEFT_TP_REDUCE_CHUNKS=0;WEFT_TP_REDUCE_CHUNKS=0 WEFT_TP_BF16_REDUCE_TOKENS=0;WEFT_TP_REDUCE_CHUNKS=4}"
  n=0
  for v in "${variants[@]}" "default --profile"; do
    n=$((n + 1))
    envs=(); extra=()
    case $v in default) ;; "default --profile") extra=(--profile) ;; *) read -ra envs <<<"$v" ;; esac
    st "TP=$TP $v"
    env "${envs[@]}" timeout 170 "${mpi[@]}" "$B/cuda_forward_bench" "${args[@]}" --tensor-parallel "$TP" \
      "${extra[@]}" >"$O/fwd_tp${TP}_$n.txt" 2>&1
    echo "rc=$?"
    grep -E "^(prefill|decode|mixed) |overlapped|profile, prefill" "$O/fwd_tp${TP}_$n.txt"
  done ;;
ref)
  st "PyTorch NCCL all-reduce over $TP ranks"
  timeout 150 torchrun --nproc_per_node="$TP" bench/device/nccl_ref.py 2>"$O/nccl_ref.err" | tee "$O/nccl_ref.md"
  st "cuda_forward_bench --profile, NCCL_DEBUG=INFO"
  NCCL_DEBUG=INFO timeout 150 "${mpi[@]}" -x NCCL_DEBUG "$B/cuda_forward_bench" --shape 8b --context 512 \
    --batches 64 --prefill 512 --repeats 4 --profile --tensor-parallel "$TP" >"$O/fwd_debug.txt" 2>&1
  grep -E "^(prefill|decode) |profile, prefill|bf16 all-reduces" "$O/fwd_debug.txt"
  grep -E "via (P2P|SHM|NET)|NVLS|nChannels|Channel 0" "$O/fwd_debug.txt" | sort | uniq -c | sort -rn | head -8 ;;
eng)
  . bench/device/model8b.sh
  st "model made"
  w=(--model $M --device cuda --gpu-memory-fraction 0.85 --seed 1 --num-requests 256 --max-concurrency 64 --input-len 512 --output-len 128)
  for c in ${CONFIGS:-tp1 new old}; do
    unset WEFT_TP_BF16_REDUCE_TOKENS WEFT_TP_REDUCE_CHUNKS
    l=("${mpi[@]}"); a=(--tensor-parallel "$TP")
    case $c in
      tp1) l=(); a=() ;;
      old) export WEFT_TP_BF16_REDUCE_TOKENS=0 WEFT_TP_REDUCE_CHUNKS=0 ;;
    esac
    st "$c"
    line=$(timeout 150 "${l[@]}" "$B/weft" bench "${w[@]}" "${a[@]}" 2>"$O/$c.err" | grep -v '^NCCL' | tail -1)
    echo "$c: tok/s $(field output_tokens_per_s "$line"), TPOT p50 $(field tpot_ms_p50 "$line"), TTFT p50 $(field ttft_ms_p50 "$line"), failed $(field failed "$line")"
    echo "$line" >"$O/$c.json"
    [ -n "$line" ] || tail -3 "$O/$c.err"
  done ;;
esac
st end
