#!/usr/bin/env bash
# Second call for branch tppre: five more alternating rounds of TP=2 batch 1, main against the
# branch (the first call's second round of the branch took 3.311 ms), with one GPU once.
#   run(kind="nvidia-h200-x2", carry=[".devcarry/pre", ".devcarry/mainf"], command="bash bench/device/tppre2.sh")
set -u
. bench/device/carry.sh mainf >/dev/null
MAIN=$B/cuda_forward_bench
. bench/device/carry.sh pre >/dev/null
. bench/device/fwdruns.sh
read -ra mpi2 <<<"$(mpi_np 2)"
fb tp1 CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
for k in 1 2 3 4 5; do
  fb m$k -- "${mpi2[@]}" "$MAIN" --tensor-parallel 2 --batches 1
  fb p$k -- "${mpi2[@]}" "$F" --tensor-parallel 2 --batches 1
done
fb tp1b CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1
nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv
