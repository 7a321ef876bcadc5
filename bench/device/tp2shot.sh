#!/usr/bin/env bash
# Device call on four GPUs (branch tp2shot, not merged: docs/PERFORMANCE.md, "The two-shot
# exchange at TP=4"): the two-shot exchange of the fused all-reduce + norm (TpFusedGroup::
# two_shot_rows, WEFT_TP_FUSED_TWO_SHOT_ROWS, off by default): each rank sums its share of the
# rows over the group, then reads every row's sum from the rank that made it; half the bytes
# over NVLink of the one-shot barrier path from four ranks up. For issue #20's TP=4 throughput
# (the all-reduces of large decode steps: docs/parallel.md, "What TP=4 throughput still needs").
# (Trimmed for the session of 2026-11-27 midday, 544 s of device time left: four ranks only,
# one GPU once, two rounds of TP=4 against TP=4 two-shot.)
#   1. NcclFusedNorm* over four ranks (every case through the barrier, the LL
#      exchange and the two-shot exchange, bitwise; graph timings of each at 1, 2 and 16 rows);
#   2. a random 2-layer Llama of the 8B widths, 16 greedy tokens at TP=4: the defaults against
#      fused steps up to 256 rows with two shots from 1 row (the 7-token prefill takes it): the
#      same tokens;
#   3. cuda_forward_bench, 8B shape, context 512, batches 64 and 256, two rounds: one GPU; TP=4
#      with the defaults (64: the one-shot fused kernel; 256: NCCL's all-reduce); TP=4 fused up to
#      256 rows with two shots from 32 rows; once TP=4 fused up to 256 rows one-shot; TP=2 with
#      the defaults (256 rows one-shot) against two shots from 32 rows.
# Input: .devcarry/t2s/gpu.tar.xz (bin/{nccl_communicator_test,cuda_forward_bench,weft}, lib/),
# the Llama-3 tokenizer in .devcarry/l3.
#   run(kind="nvidia-h200-x4", carry=[".devcarry/t2s", ".devcarry/l3"], command="bash bench/device/tp2shot.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh t2s
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_ROWS WEFT_TP_FUSED_TWO_SHOT_ROWS"
read -ra mpi2 <<<"$(mpi_np 2)"
read -ra mpi4 <<<"$(mpi_np 4)"
for np in 4; do
  read -ra m <<<"$(mpi_np $np)"
  timeout 200 "${m[@]}" $B/nccl_communicator_test --gtest_color=no \
    --gtest_filter='NcclFusedNorm*' >"$O/nfn$np.log" 2>&1
  echo "nfn over $np rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$O/nfn$np.log" | sort -u | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|measured.*CUDA graphs.*pair: fused" "$O/nfn$np.log" | sort -u | head -12
done
st "model: two shots against the defaults"
TOK=.devcarry/l3
[ -f $TOK/tokenizer.json ] || xz -dk $TOK/tokenizer.json.xz
M=/tmp/llama8b2
python3 bench/make_random_model.py --shape 8b --layers 2 --tokenizer $TOK --out $M 2>&1 | tail -1
g=(generate --model $M --device cuda --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos)
a=$(timeout 60 "${mpi4[@]}" $B/weft "${g[@]}" --tensor-parallel 4 2>/dev/null)
b=$(WEFT_TP_FUSED_ROWS=256 WEFT_TP_FUSED_TWO_SHOT_ROWS=1 timeout 60 "${mpi4[@]}" $B/weft "${g[@]}" \
  --tensor-parallel 4 2>"$O/ts.err")
[ -n "$a" ] && [ "$a" = "$b" ] && echo "TP=4: two shots give the defaults' tokens" || { echo "TP=4: DIFFERENT: '$a' / '$b'"; tail -3 "$O/ts.err"; }
st "forward pass, batches 64 and 256"
two=(WEFT_TP_FUSED_ROWS=256 WEFT_TP_FUSED_TWO_SHOT_ROWS=32)
fb tp1 CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 64,256
for k in 1 2; do
  fb tp4_$k -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 64,256
  fb tp4_two_$k "${two[@]}" -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 64,256
done
st end
