#pragma once
// KV page elements on the device: the 16-bit types the model runs in, and the int8 and fp8
// (e4m3) quantized rows with their fp32 scale per (token, kv head) (kernels/kv_dtype.hpp).
// Quantizing rounds exactly as the CPU's store_kv_row (kernels/cpu/kv_quant.hpp): the same
// IEEE operations (no fused multiply-adds) and the same round-to-nearest-even, so a page
// written on either side reads the same. Included by .cu files only.

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda::detail {

using KvInt8 = std::int8_t;
using KvFp8 = __nv_fp8_e4m3;

// Whether elements of type KV carry a row scale (the one-byte types).
template <class KV>
inline constexpr bool kv_scaled = sizeof(KV) == 1;

__device__ __forceinline__ float kv_to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float kv_to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float kv_to_float(KvInt8 v) {
  return static_cast<float>(v);
}
__device__ __forceinline__ float kv_to_float(KvFp8 v) {
  return static_cast<float>(v);
}

// A row's quantized element, given x / scale's reciprocal factor `inv` (kInt8KvMax / max|x|
// or kFp8E4M3Max / max|x|).
template <class KV>
__device__ __forceinline__ KV kv_quantize(float x, float inv);
template <>
__device__ __forceinline__ KvInt8 kv_quantize<KvInt8>(float x, float inv) {
  const float q = fminf(fmaxf(rintf(__fmul_rn(x, inv)), -kInt8KvMax), kInt8KvMax);
  return static_cast<KvInt8>(q);
}
template <>
__device__ __forceinline__ KvFp8 kv_quantize<KvFp8>(float x, float inv) {
  KvFp8 out;
  out.__x = __nv_cvt_float_to_fp8(__fmul_rn(x, inv), __NV_SATFINITE, __NV_E4M3);
  return out;
}
template <class KV>
inline constexpr float kv_quant_max = std::is_same_v<KV, KvInt8> ? kInt8KvMax : kFp8E4M3Max;

// The fp32 scales of a page's layer block: K's rows [num_kv_heads][page_size], then V's.
__device__ __forceinline__ const float* kv_scales(const PagedKvView& kv, int page) {
  return reinterpret_cast<const float*>(static_cast<const unsigned char*>(kv.pool) +
                                        static_cast<std::size_t>(page) * kv.page_elems +
                                        kv.layer_offset + kv.scales_offset);
}

// Quantizes one row of D floats (src, any stride-1 memory) into dst with a warp: the row's
// max|x| by a warp reduction, then each lane its elements. Returns the row's scale (on every
// lane). Every lane of the warp must call it.
template <class KV>
__device__ __forceinline__ float kv_quantize_row_warp(const float* src, int D, KV* dst) {
  const int lane = threadIdx.x & 31;
  float amax = 0.0f;
  for (int d = lane; d < D; d += 32)
    amax = fmaxf(amax, fabsf(src[d]));
  amax = warp_max(amax);
  if (amax == 0.0f) {
    for (int d = lane; d < D; d += 32)
      dst[d] = kv_quantize<KV>(0.0f, 0.0f);
    return 0.0f;
  }
  const float inv = __fdiv_rn(kv_quant_max<KV>, amax);
  for (int d = lane; d < D; d += 32)
    dst[d] = kv_quantize<KV>(src[d], inv);
  return __fdiv_rn(amax, kv_quant_max<KV>);
}

}  // namespace weft::cuda::detail

// Runs the statement with KV bound to the page element type of `view` (a PagedKvView) and T
// to its precision's 16-bit type.
#define WEFT_DISPATCH_KV(view, ...)                         \
  WEFT_DISPATCH_PRECISION((view).precision, {               \
    if ((view).dtype == ::weft::KvDtype::kInt8) {           \
      using KV = ::weft::cuda::detail::KvInt8;              \
      __VA_ARGS__;                                          \
    } else if ((view).dtype == ::weft::KvDtype::kFp8E4M3) { \
      using KV = ::weft::cuda::detail::KvFp8;               \
      __VA_ARGS__;                                          \
    } else {                                                \
      using KV = T;                                         \
      __VA_ARGS__;                                          \
    }                                                       \
  })
