#!/usr/bin/env bash
# Device call on 2 GPUs (session of 2026-11-25, night): issue #20's remaining single-machine
# figures with main's binaries, the slow fuzz targets on the spare cores.
#   start (both GPUs): 70B-widths shape (10 layers) TP=1 against TP=2 (bench/gpu_tp.sh forward),
#     while GPU 1 makes the random 8B folder; then PP=2 against one GPU (bench/gpu_pipeline.sh --mode pp)
#   lanes: GPU 0 the GPU/CPU hybrid (bench/gpu_pipeline.sh --mode hybrid); GPU 1 two points of
#     bench/gpu_sched_sweep.sh
#   CPU: the five slow fuzz targets (FUZZ_SECONDS, FUZZ_JOBS jobs each, nice 19), corpora kept
# Inputs: .devcarry/n1/gpu.tar.xz (weft, cuda_forward_bench, cuda_tensor_parallel_test,
# nccl_communicator_test + lib/), .devcarry/fz6/fz.tar.xz (fuzz/fuzz_*), .devcarry/l3 (tokenizer).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; W=/tmp/work; mkdir -p $O $W
R=$PWD; G=$R/.devcarry/gpu; mkdir -p $G && tar -C $G -xJf .devcarry/${BINS:-n1}/gpu.tar.xz
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
nproc; nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
FS=${FUZZ_SECONDS:-480}; FJ=${FUZZ_JOBS:-2}
if [ "$FS" -gt 0 ]; then
  mkdir -p /tmp/fz && tar -C /tmp/fz -xJf .devcarry/fz6/fz.tar.xz
  [ -f .devcarry/fw.tgz ] && mkdir -p /tmp/fw && tar -C /tmp/fw -xzf .devcarry/fw.tgz
  for t in regex chat_template json_schema config_json tokenizer_json; do
    nice -n 19 scripts/fuzz $t $FS --jobs $FJ --prebuilt /tmp/fz/fuzz --work /tmp/fw > $W/fuzz_$t.txt 2>&1 &
  done
fi
echo "HF caches: $(ls -d ~/.cache/huggingface/hub/* 2>/dev/null | head -5 | tr '\n' ' ')"
( CUDA_VISIBLE_DEVICES=1 timeout 200 python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out /tmp/llama8b > $W/mk8b.log 2>&1; echo "mk8b rc=$?" >> $W/mk8b.log ) &
st "70b TP=1 vs TP=2"
OUT=$W/tp timeout ${TP_S:-200} bash bench/gpu_tp.sh --bin $G --only forward --shapes 70b --layers-70b 10 --batches 1,8,64,256 > $W/gpu_tp.log 2>&1; echo "gpu_tp rc=$?"
cat $W/tp/gpu_tp_table.md 2>/dev/null | tail -20 || tail -20 $W/gpu_tp.log
while ! grep -q "mk8b rc" $W/mk8b.log 2>/dev/null; do sleep 2; done; tail -2 $W/mk8b.log
st "PP=2"
OUT=$W/pp timeout ${PP_S:-150} bash bench/gpu_pipeline.sh --bin $G --mode pp > $W/pp.log 2>&1; echo "pp rc=$?"; tail -9 $W/pp.log
st "lanes"
( export CUDA_VISIBLE_DEVICES=0
  OUT=$W/hy timeout ${HY_S:-200} bash bench/gpu_pipeline.sh --bin $G --mode hybrid > $W/hy.log 2>&1; echo "hybrid rc=$?" >> $W/hy.log ) &
ha=$!
( export CUDA_VISIBLE_DEVICES=1
  OUT=$W/sweep timeout ${SW_S:-200} bash bench/gpu_sched_sweep.sh --bin $G/bin --steps "${SW_STEPS:-2048}" --running "${SW_RUN:-512 1024}" --rate 0 > $W/sweep.log 2>&1; echo "sweep rc=$?" >> $W/sweep.log ) &
sb=$!
wait $ha; st "hybrid done"; tail -14 $W/hy.log
wait $sb; st "sweep done"; tail -12 $W/sweep.log
wait
for f in $W/fuzz_*.txt; do [ -f $f ] && grep -E "execs in|runtime error|ERROR|SUMMARY|exec" $f | sort -u | head -6; done > $O/fuzz_summary.txt
cat $O/fuzz_summary.txt
[ -d /tmp/fw ] && tar czf $O/fw.tgz -C /tmp/fw . 2>/dev/null
tar czf $O/work.tgz -C $W . 2>/dev/null
ls -la $O; st end
