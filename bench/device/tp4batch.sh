#!/usr/bin/env bash
# Device call on four GPUs (issue #20): TP=4 decode throughput against one GPU as the batch
# grows past 256 (the all-reduces cost about the same per call up to a few MB, so larger
# batches give each rank more work per all-reduce), cuda_forward_bench on the 8B shape, bf16,
# context 512, best of 20: one GPU at batches 256, 512 (and 1024 where its memory holds the KV,
# an H200), TP=4 at 256, 512, 1024.
# Input: .devcarry/$CARRY (bin/cuda_forward_bench of main, default tpb).
#   run(kind="nvidia-h200-x4", carry=[".devcarry/tpb"], command="bash bench/device/tp4batch.sh")
set -u
. bench/device/carry.sh "${CARRY:-tpb}"
. bench/device/fwdruns.sh
read -ra mpi4 <<<"$(mpi_np 4)"
export FB_TIMEOUT=240
fb tp4 -- "${mpi4[@]}" "$F" --tensor-parallel 4 --batches 256,512,1024
fb tp1 CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 256,512
fb tp1_1024 CUDA_VISIBLE_DEVICES=0 -- "$F" --batches 1024
tail -2 "$O/tp1_1024.txt"
