#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26): issue #17's self-drafting case on the GPU.
# An 8B-shaped model that copies (bench/make_random_model.py --copying: every weight read and
# multiplied as in the 8B step, the next token a function of the current one) and prompts that
# hold its output (bench/make_copy_workload.py), then bench/speculative_bench.sh: plain against
# prompt lookup, batch 1 and 64, with the output digests compared. CORRUPT (default "0 0.25"):
# the share of prompt tokens replaced by random ones; SPECS: the speculation settings.
# Input: .devcarry/b1.tar.xz (bin/weft, lib/), the Llama-3 tokenizer in .devcarry/l3.
#   run(carry=[".devcarry/b1.tar.xz", ".devcarry/l3"], command="bash bench/device/spec_copy.sh")
set -u
O=${OUT:-/tmp/out}; W=/tmp/work; mkdir -p $O $W
G=$PWD/.devcarry/gpu; mkdir -p $G && tar -C $G -xJf .devcarry/${BINS:-b1.tar.xz}
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$PWD/config/models
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
M=/tmp/copy8b
[ -f $M/config.json ] || python3 bench/make_random_model.py --shape 8b --copying --tokenizer .devcarry/l3 --out $M 2>&1 | tail -1
st "model"
for c in ${CORRUPT:-0 0.25}; do
  python3 bench/make_copy_workload.py --model $M --out $W/copy_$c.jsonl --requests 64 --input-len 1024 --output-len 256 --corrupt $c
done
st "workloads"
while read -r spec; do
  [ -n "$spec" ] || continue
  for c in ${CORRUPT:-0 0.25}; do
    echo "== corrupt $c, $spec"
    bash bench/speculative_bench.sh --weft $G/bin/weft --batches "${BATCHES:-1 64}" --speculate "$spec" -- \
      --model $M --device cuda --dataset $W/copy_$c.jsonl --gpu-memory-fraction 0.85 2>&1
    st "corrupt $c done"
  done
done <<< "${SPECS:-"--speculate prompt-lookup --spec-tokens 4
--speculate prompt-lookup --spec-tokens 8"}"
st end
