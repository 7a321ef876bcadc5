#!/usr/bin/env bash
# Device call on one GPU (issue #16's batch-1 goal, after "One buffer in the lanes product"):
# three switches of an experiment build of main at e19e4b8 on the 8B q4_b32 decode step, all
# keeping every row's sums:
#   - WEFT_DECODE_STREAM_SEGMENT_KEYS=128|64 (main's switch): the decode attention's segment, at
#     one token more blocks over a head's keys (256 by default on one GPU);
#   - WEFT_EXP_QUANT_ROWS=2|8 (experiment build only): rows per block of the one-token q4 lanes
#     product (4 on main);
#   - WEFT_EXP_QUANT_HEAD_STREAM=1 (experiment build only): the lm head through the stream
#     kernel at one token (lanes on main).
# cuda_forward_bench --shape 8b --context 512 --prefill "" --repeats 20 --quantize q4_b32.
#   run(kind="nvidia-h100-x1", carry=[".devcarry/qexp"], command="bash bench/device/q4exp.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh qexp
fbq() {
  local name=$1 batches=$2; shift 2
  env "$@" timeout 100 $B/cuda_forward_bench --shape 8b --context 512 --prefill "" --repeats 20 \
    --quantize q4_b32 --batches "$batches" >"$O/$name.txt" 2>&1
  echo "$name: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ' | tr '\n' ';')"
}
fbq base 1,64
fbq seg128 1,64 WEFT_DECODE_STREAM_SEGMENT_KEYS=128
fbq seg64 1 WEFT_DECODE_STREAM_SEGMENT_KEYS=64
fbq rows2 1 WEFT_EXP_QUANT_ROWS=2
fbq rows8 1 WEFT_EXP_QUANT_ROWS=8
fbq head 1 WEFT_EXP_QUANT_HEAD_STREAM=1
fbq base2 1
st end
