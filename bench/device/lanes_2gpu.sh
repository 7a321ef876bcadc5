#!/usr/bin/env bash
# Final device call of the session on 2 H100s, in lanes:
#   start: multi-GPU tests (NCCL point to point, TP), PP=2 and --cpu-layers quick checks
#   lane A (GPU 0): the GPU test binaries, then the quantized-weight bench (bf16, q4_b32, q8_b32)
#   lane B (GPU 1): random 8b folder, constrained vs unconstrained at batch 32, speculative bench
#   lane C (CPU):   the transformers seq2seq fixtures
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; W=/tmp/work; mkdir -p $O $W
R=$PWD; G=$R/.devcarry/gpu; mkdir -p $G && tar -C $G -xJf .devcarry/g2/gpu.tar.xz
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models WEFT_TEST_SOURCE_DIR=$R
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI2="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x WEFT_SPEC_DIR -x WEFT_TEST_SOURCE_DIR"
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=index,name --format=csv,noheader
# lane C first (CPU only)
( timeout 200 python3 tests/fixtures/make_seq2seq_fixtures.py --out $W/seq2seq > $W/seq2seq.log 2>&1; echo "seq2seq rc=$?" >> $W/seq2seq.log ) &
# lane B: the 8b folder on GPU 1 while the start checks run
( CUDA_VISIBLE_DEVICES=1 timeout 150 python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out /tmp/llama8b > $W/mk8b.log 2>&1; echo "mk8b rc=$?" >> $W/mk8b.log ) &
mk=$!
st "start checks"
timeout 60 $MPI2 $G/bin/nccl_point_to_point_test --gtest_color=no > $W/p2p.log 2>&1; echo "p2p rc=$?"; grep -E "PASSED|FAILED|SKIPPED" $W/p2p.log | sort -u
P="--model tests/fixtures/models/llama_gqa_f32 --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos --device cuda"
timeout 60 $G/bin/weft generate $P > $W/g1.txt 2>$W/g1.err; echo "1 GPU: $(tail -1 $W/g1.txt)"
timeout 90 $MPI2 $G/bin/weft generate $P --pipeline-parallel 2 > $W/pp2.txt 2>$W/pp2.err; echo "PP=2 rc=$?: $(tail -1 $W/pp2.txt)"; tail -2 $W/pp2.err
T="--model models/weft-tiny --prompt-ids 5,17,42,99,3,201,64 --max-tokens 24 --ignore-eos --device cuda"
timeout 60 $G/bin/weft generate $T > $W/t1.txt 2>$W/t1.err; echo "tiny GPU: $(tail -1 $W/t1.txt)"
timeout 60 $G/bin/weft generate $T --cpu-layers 2 > $W/t2.txt 2>$W/t2.err; echo "tiny --cpu-layers 2: $(tail -1 $W/t2.txt)"; tail -1 $W/t2.err
st "lanes"
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 80 $G/bin/kernels_test --gtest_filter='*Cuda*:DeviceInfo*' --gtest_color=no > $W/kernels_test.log 2>&1; echo "kernels_test rc=$?" >> $W/laneA.txt
  timeout 150 $G/bin/model_cuda_test --gtest_color=no > $W/model_cuda_test.log 2>&1; echo "model_cuda_test rc=$?" >> $W/laneA.txt
  timeout 110 $G/bin/executor_cuda_test --gtest_color=no > $W/executor_cuda_test.log 2>&1; echo "executor_cuda_test rc=$?" >> $W/laneA.txt
  for f in kernels_test model_cuda_test executor_cuda_test; do grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" $W/$f.log | sort -u >> $W/laneA.txt; done
  OUT=$W/quant timeout ${QUANT_S:-130} bash bench/gpu_quant.sh --bin $G/bin --skip-gemv --formats ${QF:-q4_b32} > $W/quant.log 2>&1; echo "quant rc=$?" >> $W/laneA.txt
) &
la=$!
(
  export CUDA_VISIBLE_DEVICES=1
  wait $mk 2>/dev/null; while ! grep -q "mk8b rc" $W/mk8b.log 2>/dev/null; do sleep 2; done
  OUT=$W/constrained BATCHES=32 REPS=1 timeout ${CONS_S:-300} bash bench/gpu_constrained.sh --bin $G/bin > $W/constrained.log 2>&1; echo "constrained rc=$?" >> $W/laneB.txt
  OUT=$W/spec timeout ${SPEC_S:-120} bash bench/gpu_speculative.sh --bin $G/bin --batches "1" --output-len 128 > $W/spec.log 2>&1; echo "spec rc=$?" >> $W/laneB.txt
  timeout ${GEMV_S:-60} $G/bin/cuda_quant_gemv_bench --tokens 1 > $W/gemv.log 2>&1; echo "gemv rc=$?" >> $W/laneB.txt
) &
lb=$!
wait $la; st "lane A done"; cat $W/laneA.txt; grep -E "^\||tok/s" $W/quant.log | tail -12
wait $lb; st "lane B done"; cat $W/laneB.txt; cat $W/constrained/constrained_table.md 2>/dev/null | tail -12; grep -E "^\|" $W/spec.log | tail -16; tail -25 $W/gemv.log
wait
tail -3 $W/seq2seq.log
[ -d $W/seq2seq ] && tar czf $O/seq2seq.tgz -C $W seq2seq
grep -h "measured" $W/*.log | head -60 > $W/measured.txt
tar czf $O/work.tgz -C $W --exclude seq2seq . 2>/dev/null
ls -la $O; st end
