#!/usr/bin/env bash
# Follow-up call: the three CudaKvQuantModel tests (their compiled-in source path linked),
# CudaEngine batch invariance and decode speed with the row kernel on and off (GPU 0);
# constrained vs unconstrained at batch 1 and 32 (GPU 1).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; W=/tmp/work; mkdir -p $O $W
R=$PWD; G=$R/.devcarry/gpu; mkdir -p $G && tar -C $G -xJf .devcarry/g2/gpu.tar.xz
[ -f .devcarry/l3/tokenizer.json ] || { [ -f .devcarry/l3/tokenizer.json.xz ] && xz -dk .devcarry/l3/tokenizer.json.xz || gunzip -k .devcarry/l3/tokenizer.json.gz; }
mkdir -p /work/wt && ln -sfn $R /work/wt/mb
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64 WEFT_SPEC_DIR=$R/config/models WEFT_TEST_SOURCE_DIR=$R
t0=$(date +%s); st() { echo "[t+$(( $(date +%s) - t0 ))s] $*"; }
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 100 python3 bench/make_random_model.py --shape 8b --tokenizer .devcarry/l3 --out /tmp/llama8b > $W/mk8b.log 2>&1
  OUT=$W/constrained BATCHES="1 32" REPS=1 timeout 250 bash bench/gpu_constrained.sh --bin $G/bin > $W/constrained.log 2>&1; echo "constrained rc=$?" > $W/laneB.txt
) &
lb=$!
export CUDA_VISIBLE_DEVICES=0
timeout 60 $G/bin/model_cuda_test --gtest_filter='CudaKvQuantModel.*' --gtest_color=no > $W/kvq.log 2>&1; echo "kvq rc=$?"; grep -E "^\[  (PASSED|FAILED)|measured" $W/kvq.log
for rk in default 0; do
  if [ $rk = default ]; then unset WEFT_ROW_KERNEL_TOKENS; else export WEFT_ROW_KERNEL_TOKENS=$rk; fi
  timeout 60 $G/bin/executor_cuda_test --gtest_filter='CudaEngine.*:CudaSpeculative.*' --gtest_color=no > $W/eng_$rk.log 2>&1; echo "row kernel $rk: engine tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|OK \]|FAILED \]" $W/eng_$rk.log | sort -u
  st "forward row kernel $rk"
  timeout 90 $G/bin/cuda_forward_bench --shape 8b --batches 1,8,64 --prefill "" --repeats 20 > $W/fwd_$rk.txt 2>&1; grep -E "^decode|floor" $W/fwd_$rk.txt
done
unset WEFT_ROW_KERNEL_TOKENS
wait $lb; st "lane B"; cat $W/laneB.txt; cat $W/constrained/constrained_table.md 2>/dev/null
tar czf $O/work.tgz -C $W . 2>/dev/null; st end
