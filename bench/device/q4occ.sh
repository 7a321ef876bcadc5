#!/usr/bin/env bash
# Device call on one GPU (branch q4occ, issue #16's batch-1 goal): the lanes quantized product
# with one buffer of codes and headers instead of two (the first tile's, loaded before the
# programmatic-dependent-launch wait, and the loop's), which takes q4_b32's one-token kernel from
# 107 to 80 registers (4 -> 6 blocks of 128 threads an SM), and with WEFT_EXP_QUANT_MINBLOCKS=8
# to 64 (8 blocks an SM; that switch existed only in the experiment build, not on main), against
# main in the same call. The sums are the same, in the same
# order: the quantized product tests must pass unchanged.
#   1. kernels_test '*CudaQuant*' (both variants);
#   2. cuda_quant_gemv_bench --tokens 1 --kernels lanes --formats q4_b32,q8_b32: main, A, B;
#   3. cuda_forward_bench --shape 8b --batches 1 --prefill "": bf16; q4_b32 and q8_b32 main, A, B,
#      two alternating rounds.
# Input: .devcarry/qocc (the branch: bin/{kernels_test,cuda_quant_gemv_bench,cuda_forward_bench}),
# .devcarry/qmain (main's cuda_quant_gemv_bench), .devcarry/mainf (main's cuda_forward_bench).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/qocc", ".devcarry/qmain", ".devcarry/mainf"], command="bash bench/device/q4occ.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh qmain >/dev/null
QMAIN=$B/cuda_quant_gemv_bench
. bench/device/carry.sh mainf >/dev/null
FMAIN=$B/cuda_forward_bench
. bench/device/carry.sh qocc
for v in 1 8; do
  WEFT_EXP_QUANT_MINBLOCKS=$v timeout 240 $B/kernels_test --gtest_color=no --gtest_filter='*CudaQuant*' >"$O/kt$v.log" 2>&1
  echo "kernels_test quant, variant $v: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/kt$v.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED" "$O/kt$v.log" | head -5
done
st "products"
q=(--tokens 1 --kernels lanes --formats q4_b32,q8_b32)
timeout 120 $QMAIN "${q[@]}" >"$O/qg_main.txt" 2>&1
timeout 120 $B/cuda_quant_gemv_bench "${q[@]}" >"$O/qg_a.txt" 2>&1
WEFT_EXP_QUANT_MINBLOCKS=8 timeout 120 $B/cuda_quant_gemv_bench "${q[@]}" >"$O/qg_b.txt" 2>&1
for f in main a b; do echo "== $f"; grep -E "^(q4_b32|q8_b32|bf16|format|product|kind| *[0-9]+x)" "$O/qg_$f.txt" | head -40; done
st "steps"
fbq() {
  local name=$1 bin=$2; shift 2
  env "$@" timeout 150 "$bin" --shape 8b --context 512 --prefill "" --repeats 20 --batches 1 ${QF:+--quantize $QF} >"$O/$name.txt" 2>&1
  echo "$name: $(grep -E '^decode' "$O/$name.txt" | tr -s ' ')"
}
QF= fbq bf16 $FMAIN
for k in 1 2; do
  for QF in q4_b32 q8_b32; do
    export QF
    fbq ${QF}_main_$k $FMAIN
    fbq ${QF}_a_$k $B/cuda_forward_bench
    fbq ${QF}_b_$k $B/cuda_forward_bench WEFT_EXP_QUANT_MINBLOCKS=8
  done
done
st end
