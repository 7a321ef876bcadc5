#!/usr/bin/env bash
# Packs what bench/gpu_tp.sh needs for its tests, forward and variants phases into one
# tarball to carry to a machine with two GPUs (the device tool carries 64 MiB at most):
# bin/ cuda_forward_bench, cuda_tensor_parallel_test, nccl_communicator_test (and weft, when
# built: the hybrid check) and lib/ the
# shared libraries the device machine lacks (simdjson). Open MPI and NCCL are the device
# machine's own (/usr/bin/mpirun, /lib/x86_64-linux-gnu/libnccl.so.2), so neither travels.
#
#   bench/gpu_tp_pack.sh [BUILD] [OUT.tar.xz]     (defaults: build/release, .devcarry/tp2.tar.xz)
#
# Build first (CUDA on, NCCL and MPI found):
#   cmake --preset release && cmake --build build/release -j2 --target cuda_forward_bench \
#     cuda_tensor_parallel_test nccl_communicator_test
# Then there: bash bench/gpu_tp.sh --bin .devcarry/tp2.tar.xz --only tests,forward
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
out=${2:-.devcarry/tp2.tar.xz}
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
bins=("$build/bin/cuda_forward_bench" "$build/tests/runtime/cuda_tensor_parallel_test"
      "$build/tests/runtime/nccl_communicator_test")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "gpu_tp_pack.sh: no $b (build it first; see --help)" >&2; exit 1; }
done
# weft too when built (gpu_tp.sh's tests phase then checks the hybrid TP x PP on GPUs).
[ -x "$build/bin/weft" ] && bins+=("$build/bin/weft")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tp2/bin" "$stage/tp2/lib"
cp "${bins[@]}" "$stage/tp2/bin/"
strip --strip-debug "$stage/tp2/bin/"* 2>/dev/null || true
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -E 'simdjson|benchmark|fmt' || true
done | sort -u | while read -r lib; do cp -L "$lib" "$stage/tp2/lib/"; done
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out" tp2
echo "$out: $(du -h "$out" | cut -f1) ($(tar -tJf "$out" | grep -vc '/$') files)"
