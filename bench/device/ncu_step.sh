#!/usr/bin/env bash
# Device call on one GPU (issue #16): each kernel's time in an 8B q4_b64 batch-1 decode step,
# read by Nsight Compute (one metric, gpu__time_duration.sum, clocks and caches left alone, the
# step's CUDA graph profiled node by node), beside the same step timed whole. The kernels run
# one at a time under ncu, so their sum less the whole step is what the kernel boundaries cost
# where programmatic dependent launch does not hide them. Summarized here by
# bench/device/ncu_step_summary.py (the per-kernel CSV comes back as $OUT/ncu_*.csv.xz).
# Input: .devcarry/$CARRY (bin/cuda_forward_bench, default nf).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/nf"], command="bash bench/device/ncu_step.sh")
set -u
. bench/device/carry.sh "${CARRY:-nf}"
. bench/device/fwdruns.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
fb whole_q4_b64 -- "$F" --batches 1 --quantize q4_b64
fb whole_bf16 -- "$F" --batches 1
for cfg in q4_b64 bf16; do
  q=(); [ "$cfg" = bf16 ] || q=(--quantize "$cfg")
  timeout 200 "$NCU" --clock-control none --cache-control none --graph-profiling node \
    --metrics gpu__time_duration.sum --csv --log-file "$O/ncu_$cfg.csv" \
    "$F" --shape 8b --context 512 --prefill "" --repeats 2 --batches 1 "${q[@]}" \
    >"$O/ncu_$cfg.out" 2>&1
  echo "ncu $cfg rc=$? rows=$(grep -c gpu__time_duration "$O/ncu_$cfg.csv")"
  tail -3 "$O/ncu_$cfg.out"
  xz -T4 "$O/ncu_$cfg.csv"
done
