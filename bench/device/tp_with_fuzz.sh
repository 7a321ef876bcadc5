#!/usr/bin/env bash
# Device call on 2 GPUs: bench/gpu_tp.sh (args passed through) with the five slow fuzz targets
# running beside it on the spare cores (nice), FUZZ_SECONDS each; at most a few files in $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; mkdir -p $O; W=/tmp/work; mkdir -p $W
FS=${FUZZ_SECONDS:-0}; FJ=${FUZZ_JOBS:-5}
if [ "$FS" -gt 0 ]; then
  mkdir -p /tmp/fz && tar -C /tmp/fz -xJf .devcarry/fz5/fz.tar.xz
  for t in ${FUZZ_TARGETS:-regex chat_template json_schema config_json tokenizer_json}; do
    nice -n 15 scripts/fuzz $t $FS --jobs $FJ --prebuilt /tmp/fz/fuzz --work /tmp/fw > $W/fuzz_$t.txt 2>&1 &
  done
fi
nproc; nvidia-smi --query-gpu=name --format=csv,noheader
if [ -n "${PRE:-}" ]; then bash -c "$PRE" > $W/pre.log 2>&1; echo "pre rc=$?"; tail -${PRE_TAIL:-30} $W/pre.log; fi
if [ "${TP:-1}" = 1 ]; then
  OUT=$W/tp timeout ${TP_TIMEOUT:-480} bash bench/gpu_tp.sh --bin ${TPBIN:-.devcarry/tp/gpu.tar.xz} "$@" > $W/gpu_tp.log 2>&1
  echo "gpu_tp rc=$?"
  grep -E "PASSED|FAILED|SKIPPED|Failure|error|Error" $W/gpu_tp.log | head -30
  cat $W/tp/gpu_tp_table.md $W/tp/gpu_tp_variants.md 2>/dev/null | tail -50
fi
if [ -n "${POST:-}" ]; then bash -c "$POST" > $W/post.log 2>&1; echo "post rc=$?"; tail -${POST_TAIL:-30} $W/post.log; fi
wait
for f in $W/fuzz_*.txt; do [ -f $f ] && grep -E "execs in|runtime error|ERROR|SUMMARY" $f | sort -u | head -6; done > $O/fuzz_summary.txt
cat $O/fuzz_summary.txt
[ -d /tmp/fw ] && (cd /tmp/fw && tar czf $O/fuzz_crashes.tgz */crashes */logs 2>/dev/null)
tar czf $O/work.tgz -C $W . 2>/dev/null
ls -la $O
