#pragma once
// The rotary embedding's arithmetic, shared by the rope kernels and the decode attention
// kernel that applies it itself (paged_attention.hpp): every kernel that rotates a value goes
// through these, with every rounding spelled out (no contraction into FMAs), so a key or query
// is bitwise the same whichever kernel rotated it.

#include <cuda_runtime.h>

namespace weft::cuda::detail {

// cos and sin of position * inv_freq, times the attention factor (fp32, as torch forms them).
__device__ __forceinline__ void rope_cos_sin(int pos, float inv_freq, float factor, float& c,
                                             float& s) {
  const float angle = __fmul_rn(static_cast<float>(pos), inv_freq);
  c = __fmul_rn(cosf(angle), factor);
  s = __fmul_rn(sinf(angle), factor);
}

// The pair (x0, x1) rotated: y0 = x0 c - x1 s, y1 = x1 c + x0 s.
__device__ __forceinline__ void rotate_pair(float x0, float x1, float c, float s, float& y0,
                                            float& y1) {
  y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

}  // namespace weft::cuda::detail
