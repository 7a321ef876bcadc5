#!/usr/bin/env bash
# Device call on four GPUs (session of 2026-11-27): issue #20's open runs.
#   PHASE=fwd: cuda_forward_bench, 8B shape, batch 64 at context 512 with and without a 512-token
#     prefill chunk in the step (--mixed 512) and a 512-token prefill alone, at TP=1, TP=2 and
#     TP=4, each TP size with the fp32 all-reduces (default) and with bf16 all-reduces from 128
#     tokens (WEFT_TP_BF16_REDUCE_TOKENS=128): what the all-reduces of the large steps cost.
#   PHASE=eng: weft bench on the random 8B folder, 256 requests 64 at a time, 512 in / 128 out:
#     one GPU, TP=4 with the step trace (main since 2026-11-27: bf16 all-reduces from 128 tokens
#     by default), TP=4 with WEFT_TP_BF16_REDUCE_TOKENS=0 (fp32 as before), then TP=2 x PP=2
#     with sequence groups in flight on four GPUs (one rank per GPU, the stages over NCCL; the
#     run no earlier machine could make), after weft generate's check that the hybrid gives
#     TP=2's tokens and a weft-tiny bench with groups (CHECKS=0 skips those). CONFIGS picks
#     the runs; tp1mN, tp2mN and tp4mN run one GPU, TP=2 and TP=4 with --max-tokens-per-step N.
#     LOAD=sharegpt replays the 1,000 requests of bench/make_sharegpt_workload.py --seed 0
#     offline with --schedule-policy lof instead.
# Input: .devcarry/$CARRY/gpu.tar.xz (CARRY default t4m; bin/{weft,cuda_forward_bench}, lib/)
# and the Llama-3 tokenizer in .devcarry/l3 (PHASE=eng). The engine call ran main's binaries
# after the bf16 default (CARRY=tpc).
#   run(kind="nvidia-h100-x4", carry=[".devcarry/t4m"], command="PHASE=fwd bash bench/device/tp4mixed.sh")
#   run(kind="nvidia-h100-x4", carry=[".devcarry/t4m", ".devcarry/l3"], command="PHASE=eng bash bench/device/tp4mixed.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-t4m}"
W=$B/weft
mpi() {
  echo mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$1" -x LD_LIBRARY_PATH \
    -x WEFT_SPEC_DIR -x NCCL_NVLS_ENABLE -x WEFT_TP_BF16_REDUCE_TOKENS -x WEFT_PP_TRANSPORT
}
field() { echo "$2" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }
case ${PHASE:-fwd} in
fwd)
  args=(--shape 8b --context 512 --batches 64 --prefill 512 --mixed 512 --repeats 6)
  for tp in 1 2 4; do
    for r16 in "" 128; do
      [ $tp = 1 ] && [ -n "$r16" ] && continue
      st "TP=$tp bf16 reduce from: ${r16:-off}"
      launch=()
      [ $tp -gt 1 ] && read -ra launch <<<"$(mpi $tp)"
      WEFT_TP_BF16_REDUCE_TOKENS=$r16 timeout 170 "${launch[@]}" "$B/cuda_forward_bench" "${args[@]}" \
        $([ $tp -gt 1 ] && echo --tensor-parallel $tp) >"$O/fwd_tp${tp}_${r16:-off}.txt" 2>&1
      echo "rc=$?"
      grep -E "^(decode|prefill|mixed)|ms" "$O/fwd_tp${tp}_${r16:-off}.txt" | grep -v "^NCCL" | head -12
    done
  done ;;
eng)
  . bench/device/model8b.sh
  st "model made"
  export WEFT_PP_TRANSPORT=nccl
  read -ra m2 <<<"$(mpi 2)"
  read -ra m4 <<<"$(mpi 4)"
  if [ "${CHECKS:-1}" = 1 ]; then
  g=(generate --model tests/fixtures/models/llama_gqa_f32 --prompt-ids 5,17,42,99,3,201,64 --max-tokens 8 --ignore-eos --device cuda)
  tp2=$(timeout 90 "${m2[@]}" $W "${g[@]}" --tensor-parallel 2 2>/dev/null | grep -v '^NCCL')
  hy=$(timeout 120 "${m4[@]}" $W "${g[@]}" --tensor-parallel 2 --pipeline-parallel 2 2>/dev/null | grep -v '^NCCL')
  echo "generate TP=2: $tp2"; echo "generate TP=2 x PP=2: $hy"
  [ -n "$tp2" ] && [ "$tp2" = "$hy" ] && echo "ok   hybrid generate gives TP=2's tokens" || echo "FAIL hybrid generate"
  out=$(timeout 120 "${m4[@]}" $W bench --model models/weft-tiny --device cuda --num-requests 64 \
    --input-len 128 --output-len 16 --gpu-memory-fraction 0.2 --tensor-parallel 2 --pipeline-parallel 2 2>"$O/tiny.err" | tail -1)
  echo "weft-tiny TP=2 x PP=2 groups: requests $(field requests "$out") failed $(field failed "$out") steps_in_flight_peak $(field steps_in_flight_peak "$out")"
  fi
  w=(--model $M --device cuda --gpu-memory-fraction 0.85 --seed 1 --num-requests 256 --max-concurrency 64 --input-len 512 --output-len 128)
  if [ "${LOAD:-b64}" = sharegpt ]; then
    python3 bench/make_sharegpt_workload.py --seed 0 --out /tmp/sg.jsonl >/dev/null
    w=(--model $M --device cuda --gpu-memory-fraction 0.85 --dataset /tmp/sg.jsonl --schedule-policy lof)
  fi
  for c in ${CONFIGS:-tp1 tp4 tp4old tp2pp2g2 tp2pp2g1}; do
    unset WEFT_TP_BF16_REDUCE_TOKENS; extra=()
    case $c in
      tp1) l=(); a=() ;;
      tp1m*) l=(); a=(--max-tokens-per-step "${c#tp1m}") ;;
      tp2m*) l=("${m2[@]}"); a=(--tensor-parallel 2 --max-tokens-per-step "${c#tp2m}") ;;
      tp2) l=("${m2[@]}"); a=(--tensor-parallel 2) ;;
      tp4m*) l=("${m4[@]}"); a=(--tensor-parallel 4 --max-tokens-per-step "${c#tp4m}") ;;
      tp4) l=("${m4[@]}"); a=(--tensor-parallel 4); extra=(--step-trace "$O/trace_tp4.jsonl") ;;
      tp4old) l=("${m4[@]}"); a=(--tensor-parallel 4); export WEFT_TP_BF16_REDUCE_TOKENS=0 ;;
      tp2pp2g2) l=("${m4[@]}"); a=(--tensor-parallel 2 --pipeline-parallel 2 --pp-groups 2) ;;
      tp2pp2g1) l=("${m4[@]}"); a=(--tensor-parallel 2 --pipeline-parallel 2 --pp-groups 1) ;;
    esac
    st "$c"
    line=$(timeout 150 "${l[@]}" $W bench "${w[@]}" "${a[@]}" "${extra[@]}" 2>"$O/$c.err" | grep -v '^NCCL' | tail -1)
    echo "$c: tok/s $(field output_tokens_per_s "$line"), TPOT p50 $(field tpot_ms_p50 "$line") p99 $(field tpot_ms_p99 "$line"), TTFT p50 $(field ttft_ms_p50 "$line") p99 $(field ttft_ms_p99 "$line"), failed $(field failed "$line"), steps $(field steps "$line"), in flight peak $(field steps_in_flight_peak "$line")"
    echo "$line" >"$O/$c.json"
    [ -n "$line" ] || tail -3 "$O/$c.err"
  done
  [ -f "$O/trace_tp4.jsonl" ] && python3 bench/step_trace_summary.py "$O/trace_tp4.jsonl" | head -40
  for c in tp4 tp4old; do
    [ -f "$O/$c.json" ] && echo "$c step phases: $(grep -o '"per_step_us":{[^}]*}' "$O/$c.json")"
  done
  ;;
esac
st end
