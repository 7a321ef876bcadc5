# Sourced by the device scripts of 2026-11-27 after carry.sh (which sets B and O):
#   fb NAME ENV... -- COMMAND ARGS...  one cuda_forward_bench (COMMAND ends in it, perhaps behind
#     mpirun) on the 8B shape at context 512 without prefill rows, best of 20 decode steps, with
#     ARGS after those (FB_TIMEOUT: its limit, 150 s); output in $O/NAME.txt, decode rows printed.
#   pair NAME0 ENV0 ARGS0 NAME1 ENV1 ARGS1  two of them at once, on GPU 0 and GPU 1 (one-GPU runs).
#   mpi_np N  the mpirun command for N ranks, passing on the environment the runs read
#     (MPI_VARS: more variable names).
#   engine_b1 CONFIG...  weft bench one request at a time (8 of 128 + 128 tokens) on the random 8B
#     folder of model8b.sh, per CONFIG tp1, tp2 or tp4: tok/s, TPOT and TTFT.
F=$B/cuda_forward_bench
fb() {
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout "${FB_TIMEOUT:-150}" "$@" --shape 8b --context 512 --prefill "" \
    --repeats 20 >"$O/$name.txt" 2>&1
  echo "$name rc=$?: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ' | head -4 | tr '\n' ';')"
}
pair() {
  # shellcheck disable=SC2086  # ENV and ARGS are word lists
  fb "$1" CUDA_VISIBLE_DEVICES=0 $2 -- "$F" $3 >"$O/$1.line" &
  # shellcheck disable=SC2086
  fb "$4" CUDA_VISIBLE_DEVICES=1 $5 -- "$F" $6 >"$O/$4.line"
  wait
  cat "$O/$1.line" "$O/$4.line"
  rm -f "$O/$1.line" "$O/$4.line"
}
mpi_np() {
  local vars=(LD_LIBRARY_PATH WEFT_SPEC_DIR WEFT_TEST_SOURCE_DIR NCCL_NVLS_ENABLE ${MPI_VARS:-})
  echo mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$1" "${vars[@]/#/-x }"
}
engine_b1() {
  . bench/device/model8b.sh
  local field c line l=() a=()
  field() { echo "$2" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }
  for c in "$@"; do
    case $c in
      tp1) l=(); a=() ;;
      tp2) read -ra l <<<"$(mpi_np 2)"; a=(--tensor-parallel 2) ;;
      tp4) read -ra l <<<"$(mpi_np 4)"; a=(--tensor-parallel 4) ;;
    esac
    line=$(timeout 150 "${l[@]}" "$B/weft" bench --model "$M" --device cuda --gpu-memory-fraction 0.85 \
      --seed 1 --num-requests 8 --max-concurrency 1 --input-len 128 --output-len 128 "${a[@]}" \
      2>"$O/$c.err" | grep -v '^NCCL' | tail -1)
    echo "$c: tok/s $(field output_tokens_per_s "$line"), TPOT p50 $(field tpot_ms_p50 "$line") p99 $(field tpot_ms_p99 "$line"), TTFT p50 $(field ttft_ms_p50 "$line"), failed $(field failed "$line")"
    [ -n "$line" ] || tail -3 "$O/$c.err"
  done
}
