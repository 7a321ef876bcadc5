#!/usr/bin/env bash
# Device call on two GPUs (session of 2026-11-27, evening): which kernels of the decode chain
# should release the next one early (griddepcontrol.launch_dependents after their wait;
# WEFT_PDL_RELEASE, a sum of 1 gemv, 2 the lanes quantized product, 4 the decode attention,
# 8 add_norm, 16 the fused all-reduce + norm; default 14), and the decode segment under TP.
#   1. kernels_test: decode attention, gemv, add_norm (the release's parameter wired through);
#   2. cuda_forward_bench, 8B shape, context 512, graph replay: TP=2 batch 1 per release mask
#      (two rounds of 0 and the default), with 64-key segments; TP=2 batch 256 at 128 (the
#      group's default) and 64 keys; one GPU (two at a time, swapped in round 2): q4_b32 and the
#      small-step kernel, release 0 against the default.
# Input: .devcarry/tlr/gpu.tar.xz (bin/{cuda_forward_bench,kernels_test}, lib/).
#   run(kind="nvidia-h200-x2", carry=[".devcarry/tlr"], command="bash bench/device/tprel.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tlr
. bench/device/fwdruns.sh
MPI_VARS="WEFT_PDL_RELEASE WEFT_DECODE_STREAM_SEGMENT_KEYS"
read -ra mpi2 <<<"$(mpi_np 2)"
st "tests"
timeout 120 $B/kernels_test --gtest_color=no \
  --gtest_filter='*DecodeAttentionStream*:*CudaGemv*:*AddNorm*:*CudaQuantGemvProduct*' >"$O/kt.log" 2>&1
echo "kt: $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt.log" | sort -u | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$O/kt.log" | sort -u | head -8
st "TP=2, batch 1, per WEFT_PDL_RELEASE"
tp2() { fb "$1" "${@:2}" -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches "${BATCHES:-1}"; }
for k in 1 2; do
  tp2 r0_$k WEFT_PDL_RELEASE=0
  tp2 rdef_$k
done
for m in 1 4 16 31; do tp2 r$m WEFT_PDL_RELEASE=$m; done
tp2 s64 WEFT_DECODE_STREAM_SEGMENT_KEYS=64
st "TP=2, batch 256: 128 / 64 keys"
BATCHES=256 tp2 b256_s128
BATCHES=256 tp2 b256_s64 WEFT_DECODE_STREAM_SEGMENT_KEYS=64
st "one GPU, release 0 | default at once (swapped in round 2)"
for k in 1 2; do
  for a in "--quantize q4_b32" "--small-step-kernel-tokens 1"; do
    n=$(echo "$a" | tr -dc 'a-z0-9' | cut -c1-12)
    if [ $k = 1 ]; then g0=0 g1=1; else g0=1 g1=0; fi
    # shellcheck disable=SC2086
    fb one_r0_${n}_$k CUDA_VISIBLE_DEVICES=$g0 WEFT_PDL_RELEASE=0 -- "$F" --batches 1 $a >"$O/l0" &
    # shellcheck disable=SC2086
    fb one_rdef_${n}_$k CUDA_VISIBLE_DEVICES=$g1 -- "$F" --batches 1 $a >"$O/l1"
    wait; cat "$O/l0" "$O/l1"
  done
done
rm -f "$O/l0" "$O/l1"
st end
