#!/usr/bin/env bash
# Train weft-tiny-draft (models/weft-tiny-draft/README.md), then draft for weft-tiny on the GPU.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O build/corpus
tar -C build/corpus -xJf .devcarry/c5/corpus.tar.xz  # tools/train/prepare_corpus.sh /tmp/corpus; tar -C /tmp/corpus -cJf .devcarry/c5/corpus.tar.xz train.txt heldout.txt heldout_documents.txt
R=$PWD; G=$R/.devcarry/gpu; mkdir -p $G && tar -C $G -xJf .devcarry/g2/gpu.tar.xz
timeout 150 python3 tools/train/train.py --corpus build/corpus --out models/weft-tiny-draft \
    --tokenizer models/weft-tiny/tokenizer.json --seconds 90 \
    --layers 2 --hidden 192 --heads 3 --kv-heads 1 --intermediate 512 2>&1 | tee models/weft-tiny-draft/train.log | tail -8
ls -la models/weft-tiny-draft
tar czf $O/draft.tgz models/weft-tiny-draft
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models
[ -f models/weft-tiny-draft/model.safetensors ] && OUT=/tmp/spec timeout 100 bash bench/gpu_speculative.sh --bin $G/bin --batches "1" --output-len 128 > /tmp/spec.log 2>&1
grep -A6 "weft-tiny-draft\|## weft-tiny, prompt lookup (chain" /tmp/spec.log | head -24; cp /tmp/spec.log $O/
