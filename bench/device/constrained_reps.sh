#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26): issue #21's repeated end-to-end constrained
# runs (bench/gpu_constrained.sh) at batch 32 then batch 1, one schema and a schema per request,
# and, on the CPU meanwhile, the mT5 seq2seq fixture (tests/fixtures/make_seq2seq_fixtures.py
# --only mt5, returned as mt5.tgz to unpack into tests/fixtures/seq2seq).
# Input: .devcarry/b1.tar.xz (bin/{weft,grammar_bench,constrained_step_bench}, lib/) and the
# Llama-3 tokenizer in .devcarry/l3.
#   run(carry=[".devcarry/b1.tar.xz", ".devcarry/l3"], command="bash bench/device/constrained_reps.sh")
set -u
O=${OUT:-/tmp/out}; W=/tmp/work; mkdir -p $O $W
G=$PWD/.devcarry/gpu; mkdir -p $G && tar -C $G -xJf .devcarry/b1.tar.xz
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$PWD/config/models
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
( CUDA_VISIBLE_DEVICES= timeout 300 python3 tests/fixtures/make_seq2seq_fixtures.py --out $W/s2s --only mt5 > $W/mt5.log 2>&1
  echo "mt5 rc=$?" >> $W/mt5.log; tar czf $O/mt5.tgz -C $W/s2s . ) &
st "batch 32"
OUT=$W/c32 BATCHES=32 FORMATS="schema schemas" REPS=${REPS32:-5} BUDGET_S=${B32:-330} \
  bash bench/gpu_constrained.sh --bin $G/bin > $W/c32.log 2>&1; echo "c32 rc=$?"
cat $W/c32/constrained_table.md 2>/dev/null || tail -20 $W/c32.log
st "batch 1"
OUT=$W/c1 BATCHES=1 FORMATS="schema schemas" REPS=${REPS1:-3} BUDGET_S=${B1:-170} \
  bash bench/gpu_constrained.sh --bin $G/bin > $W/c1.log 2>&1; echo "c1 rc=$?"
cat $W/c1/constrained_table.md 2>/dev/null || tail -20 $W/c1.log
wait; tail -3 $W/mt5.log
tar czf $O/work.tgz -C $W --exclude=s2s . ; st end
