#!/usr/bin/env bash
# Device call on two or four GPUs (session of 2026-11-27): NCCL's own switches against the
# all-reduces of a 512-token prefill step (8 MB fp32 / 4 MB bf16 each), in cuda_forward_bench
# --profile at TP ranks, 8B widths with LAYERS layers (default 8, so that each run is short):
# the "all-reduce" ms per step and the prefill's ms, per variant (";"-separated environment
# settings in VARIANTS, "default" for none).
# Input: .devcarry/tpc/gpu.tar.xz (bin/cuda_forward_bench, lib/).
#   run(kind="nvidia-h100-x4", carry=[".devcarry/tpc"], command="TP=4 bash bench/device/ncclenv.sh")
set -u
. bench/device/carry.sh tpc
TP=${TP:-4}
IFS=';' read -ra variants <<<"${VARIANTS:-default;WEFT_TP_NCCL_BUFFERS=plain;NCCL_PROTO=Simple;NCCL_PROTO=LL128;NCCL_ALGO=Tree;NCCL_MIN_NCHANNELS=32;WEFT_TP_BF16_REDUCE_TOKENS=0}"
for v in "${variants[@]}"; do
  envs=(); [ "$v" = default ] || read -ra envs <<<"$v"
  xs=(); for e in "${envs[@]}"; do xs+=(-x "${e%%=*}"); done
  line=$(env "${envs[@]}" timeout 90 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$TP" \
    -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "${xs[@]}" "$B/cuda_forward_bench" --shape 8b --layers "${LAYERS:-8}" \
    --context 512 --batches 1 --prefill 512 --repeats 3 --profile --tensor-parallel "$TP" 2>&1)
  pf=$(grep -E "^prefill " <<<"$line" | awk '{print $4}')
  ar=$(grep -o "all-reduce [0-9.]*" <<<"$line" | head -1)
  echo "TP=$TP $v: prefill 512 ${pf:-?} ms, $ar ms ($(grep -o 'sum [0-9.]*' <<<"$line" | head -1))"
  [ -n "$pf" ] || tail -3 <<<"$line"
done
