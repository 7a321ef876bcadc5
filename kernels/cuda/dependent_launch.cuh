#pragma once
// Programmatic dependent launch's second half, for the kernels of a decode step's chain (the
// few-token products, the streaming decode attention, the fused all-reduce + norm, add_norm).
// Included by .cu files only.

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/common.cuh"

namespace weft::cuda::detail {

// grid_dependency_wait (common.cuh), then lets the next kernel on the stream launch
// (griddepcontrol.launch_dependents): once every block of this grid has done so or exited,
// the next kernel's blocks may take the SM room this one leaves and load their constant
// inputs (the products' first weights) while this one still runs; their own wait still
// returns only once this kernel has completed and its writes are visible. Releasing only
// after the wait keeps at most one kernel waiting ahead of the one running. Without the
// release the next kernel launches when this one has finished.
// `release` false: grid_dependency_wait alone.
__device__ __forceinline__ void grid_dependency_wait_then_release(bool release) {
  grid_dependency_wait();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (release) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Which kernel classes release early (host; WEFT_PDL_RELEASE, a sum of these bits, read once).
enum ReleaseClass : unsigned {
  kReleaseGemv = 1,        // gemv and gemv_rows (16-bit few-token products), not pushing
  kReleaseQuantGemv = 2,   // the lanes quantized product
  kReleaseAttention = 4,   // the streaming decode attention and its combine
  kReleaseAddNorm = 8,     // add_norm
  kReleaseFusedNorm = 16,  // the fused all-reduce + norm (tp_fused.cu)
  kReleaseGemvGated = 32,  // gemv_gated (gate_up ending in its activation; down follows)
  kReleaseGemvPush = 64    // gemv pushing into the LL exchange (the fused kernel follows)
};
// Measured on two H200s (docs/PERFORMANCE.md, "Releasing the next kernel early" and "Which
// products release"): the attention's and the fused norm's releases each took 1.5-2% off an
// 8B TP=2 batch-1 step, the lanes product's 2% off a q4_b32 one, the pushing products' 0.7%
// (the fused kernel after them is resident and waiting when they finish); the other 16-bit
// products' made TP=2 slower (qkv's 0.9%, the gated gate_up's 3%), so they do not release.
inline constexpr unsigned kReleaseDefault =
    kReleaseQuantGemv | kReleaseAttention | kReleaseAddNorm | kReleaseFusedNorm | kReleaseGemvPush;
inline bool release_early(ReleaseClass c) {
  static const unsigned mask = [] {
    const char* v = std::getenv("WEFT_PDL_RELEASE");
    if (v == nullptr || *v == '\0') return kReleaseDefault;
    char* end = nullptr;
    const unsigned long m = std::strtoul(v, &end, 10);
    if (*end == '\0' && m < 128) return static_cast<unsigned>(m);
    std::fprintf(stderr,
                 "weft: ignoring WEFT_PDL_RELEASE=%s (expected a sum of 1 gemv, 2 quantized "
                 "lanes, 4 decode attention, 8 add_norm, 16 fused all-reduce + norm, 32 gated "
                 "gemv, 64 pushing gemv)\n",
                 v);
    return kReleaseDefault;
  }();
  return (mask & c) != 0;
}

}  // namespace weft::cuda::detail
