#pragma once
// The element types KV cache pages can hold, shared by the CPU and CUDA kernels and the page
// layout (runtime/model/kv_cache.hpp). Plain C++: no CUDA headers.
//
// int8 and fp8 (e4m3) pages are quantized per (token, kv head): each row of head_dim values
// is stored with one fp32 scale, chosen from that row alone when the token is written
// (scale = max|x| / 127 for int8, max|x| / 448 for fp8; a row of zeros has scale 0). A
// dynamic scale per row needs no calibration, never rewrites a row once stored (pages are
// append-only and may be shared through the prefix cache), and keeps an outlier token (an
// attention sink with a large key) from flattening every other token of its head. The scales
// cost 4 bytes per head_dim elements: at head_dim 128 an int8 page is 132 / 256 of a bf16 one.

#include <cstddef>
#include <cstdint>

namespace weft {

enum class KvDtype : std::uint8_t { kF32, kBF16, kF16, kInt8, kFp8E4M3 };

constexpr std::size_t kv_element_bytes(KvDtype d) {
  switch (d) {
    case KvDtype::kF32:
      return 4;
    case KvDtype::kBF16:
    case KvDtype::kF16:
      return 2;
    case KvDtype::kInt8:
    case KvDtype::kFp8E4M3:
      return 1;
  }
  return 4;
}

// Whether rows carry a scale (the quantized types).
constexpr bool kv_dtype_scaled(KvDtype d) {
  return d == KvDtype::kInt8 || d == KvDtype::kFp8E4M3;
}

// The spelling --kv-cache-dtype takes: "f32", "bf16", "fp16", "int8", "fp8".
constexpr const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kF16:
      return "fp16";
    case KvDtype::kInt8:
      return "int8";
    case KvDtype::kFp8E4M3:
      return "fp8";
  }
  return "?";
}

// The largest magnitude a quantized element holds: a row's max|x| maps onto it.
inline constexpr float kInt8KvMax = 127.0f;
inline constexpr float kFp8E4M3Max = 448.0f;

}  // namespace weft
