#!/usr/bin/env bash
# Device call on four GPUs (session of 2026-11-27, afternoon): the defaults that changed for
# groups of four (the LL exchange where the products push, the pushing products' early release)
# checked end to end, and TP=4 batch 1 timed with them.
#   1. A random Llama of the 8B widths with 2 layers (bench/make_random_model.py; 32 heads,
#      8 kv heads: a TP=4 rank holds 8 and 2, 4096-wide rows take the LL exchange), weft generate
#      of 16 greedy tokens: TP=4 with the defaults, with the fused kernel pushing
#      (WEFT_TP_FUSED_PUSH=0), with the barrier (WEFT_TP_FUSED_LL_ROWS=0), which are the same sums
#      bit for bit and must give the same tokens; one GPU's for reference; then the CTest's TP=2
#      check on weft-tiny (default against the barrier).
#   2. cuda_forward_bench, 8B shape, context 512, batch 1: one GPU, TP=4 twice.
# Input: .devcarry/tpf/gpu.tar.xz (bin/{weft,cuda_forward_bench}, lib/), the Llama-3 tokenizer in
# .devcarry/l3.
#   run(kind="nvidia-h200-x4", carry=[".devcarry/tpf", ".devcarry/l3"], command="bash bench/device/tp4check.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh tpf
. bench/device/fwdruns.sh
MPI_VARS="WEFT_TP_FUSED_PUSH WEFT_TP_FUSED_LL_ROWS"
read -ra mpi2 <<<"$(mpi_np 2)"
read -ra mpi4 <<<"$(mpi_np 4)"
TOK=.devcarry/l3
[ -f $TOK/tokenizer.json ] || xz -dk $TOK/tokenizer.json.xz
M=/tmp/llama8b2
python3 bench/make_random_model.py --shape 8b --layers 2 --tokenizer $TOK --out $M 2>&1 | tail -1
g=(generate --model $M --device cuda --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos)
one=$(timeout 60 $B/weft "${g[@]}" 2>"$O/one.err")
def=$(timeout 60 "${mpi4[@]}" $B/weft "${g[@]}" --tensor-parallel 4 2>"$O/def.err")
fus=$(WEFT_TP_FUSED_PUSH=0 timeout 60 "${mpi4[@]}" $B/weft "${g[@]}" --tensor-parallel 4 2>/dev/null)
bar=$(WEFT_TP_FUSED_LL_ROWS=0 timeout 60 "${mpi4[@]}" $B/weft "${g[@]}" --tensor-parallel 4 2>/dev/null)
echo "one GPU:          $one"; echo "TP=4 defaults:    $def"; echo "TP=4 no pushes:   $fus"; echo "TP=4 barrier:     $bar"
[ -n "$def" ] && [ "$def" = "$fus" ] && [ "$def" = "$bar" ] && echo "TP=4: same tokens three ways" || { echo "TP=4: DIFFERENT"; tail -3 "$O/def.err"; }
grep -h "fused norm" "$O/def.err" | head -1
t=(generate --model models/weft-tiny --device cuda --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos)
a=$(timeout 60 "${mpi2[@]}" $B/weft "${t[@]}" --tensor-parallel 2 2>/dev/null)
b=$(WEFT_TP_FUSED_LL_ROWS=0 timeout 60 "${mpi2[@]}" $B/weft "${t[@]}" --tensor-parallel 2 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "weft-tiny TP=2: pushed = barrier: $a" || echo "weft-tiny TP=2: DIFFERENT: '$a' / '$b'"
st "forward pass"
fb tp1 CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
for k in 1 2; do fb tp4_$k -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 1; done
st end
