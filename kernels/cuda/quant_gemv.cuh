#pragma once
// Device helpers of the quantized products (quant_gemv.cu, quant_gemv_mma.cu,
// quant_gemv_dp4a.cu, quant_gemv_blocks.cu): reading a group's code words in the GPU layout of
// quant_layout.hpp, a unit's code, a block header, 16-bit inputs as floats, a warp's sums.
// Included by .cu files only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_layout.hpp"

namespace weft::cuda::quant_device {

// Words of piece `piece` of a group of `bits` words (quant_piece_width, for device code).
__host__ __device__ constexpr int piece_width(int bits, int piece) {
  int left = bits;
  for (int p = 0;; ++p) {
    const int w = left >= 4 ? 4 : left >= 2 ? 2 : left;
    if (p == piece) return w;
    left -= w;
    if (left == 0) return 0;
  }
}

// Weights are read once: they skip L1, which keeps x.
__device__ __forceinline__ void load_words(const unsigned* p, unsigned* w, int count) {
  if (count == 4) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
        : "l"(p));
  } else if (count == 2) {
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
  }
}

// Group `i` of a tile of `n` groups at `tile`: its kBits words, piece by piece.
template <int kBits, int kPiece = 0, int kBefore = 0>
__device__ __forceinline__ void load_group(const unsigned* tile, int n, int i,
                                           unsigned (&w)[kBits]) {
  constexpr int width = piece_width(kBits, kPiece);
  if constexpr (width > 0) {
    load_words(tile + static_cast<std::size_t>(n) * kBefore + i * width, w + kBefore, width);
    load_group<kBits, kPiece + 1, kBefore + width>(tile, n, i, w);
  }
}

// Asks L2 for group `i`'s words (as load_group reads them), without waiting for them.
template <int kBits, int kPiece = 0, int kBefore = 0>
__device__ __forceinline__ void prefetch_group(const unsigned* tile, int n, int i) {
  constexpr int width = piece_width(kBits, kPiece);
  if constexpr (width > 0) {
    asm volatile(
        "prefetch.global.L2 [%0];" ::"l"(tile + static_cast<std::size_t>(n) * kBefore + i * width));
    prefetch_group<kBits, kPiece + 1, kBefore + width>(tile, n, i);
  }
}

// Unit u (0..31) of a group: bits u * kBits .. of its words, least significant first.
template <int kBits>
__device__ __forceinline__ unsigned unit_code(const unsigned (&w)[kBits], int u) {
  const int bit = u * kBits, word = bit >> 5, shift = bit & 31;
  const unsigned v =
      shift + kBits <= 32 ? w[word] >> shift : __funnelshift_r(w[word], w[word + 1], shift);
  return v & ((1u << kBits) - 1u);
}

// A small unsigned integer as a float, exactly: 2^23 + v has v in its mantissa.
__device__ __forceinline__ float code_float(unsigned v) {
  return __uint_as_float(v | 0x4b000000u) - 8388608.0f;
}

// Eight 16-bit values (the lower address in the low half of each word) as floats; the tag's
// type says which.
__device__ __forceinline__ void unpack(const uint4& v, float* f, const __nv_bfloat16*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack(const uint4& v, float* f, const __half*) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &w[i], sizeof(h));
    const float2 p = __half22float2(h);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// A warp's sums per row and token, added over its lanes, into its slot of a block's shared
// partial sums (lane 0 writes).
template <int kRows, int kTokens>
__device__ __forceinline__ void warp_partials(const float (&acc)[kRows][kTokens],
                                              float (&partial)[kRows][kTokens], int lane) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float v = detail::warp_sum(acc[r][t]);
      if (lane == 0) partial[r][t] = v;
    }
  }
}

// A block header's (scale, min) fp16 pair as floats.
__device__ __forceinline__ float2 header_floats(unsigned word) {
  __half2 h;
  memcpy(&h, &word, sizeof(h));
  return __half22float2(h);  // .x scale (the lower address), .y min
}

template <int kBits, int kUnitW, int kBlock>
struct Geometry {
  static constexpr int kGroupWeights = 32 * kUnitW;
  // Headers per group: 2 for q3h_b32 (a group of 64 weights, blocks of 32), else 1 (a b64
  // block of 1-weight units spans two groups, and its header serves both).
  static constexpr int kSegments = kGroupWeights > kBlock ? kGroupWeights / kBlock : 1;
  static constexpr int kSegmentUnits = 32 / kSegments;
  static_assert(kSegmentUnits % 8 == 0);
};

}  // namespace weft::cuda::quant_device

// The switch from a format to its kernels' template arguments (code bits, weights per unit,
// block), calling CALL(bits, unit_weights, block).
#define WEFT_QUANT_FORMAT_SWITCH(format, CALL) \
  switch (format) {                            \
    case QuantGemvFormat::kQ8B32:              \
      CALL(8, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ8B64:              \
      CALL(8, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ6B32:              \
      CALL(6, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ6B64:              \
      CALL(6, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ5B32:              \
      CALL(5, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ5B64:              \
      CALL(5, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ4B32:              \
      CALL(4, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ4B64:              \
      CALL(4, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ3HB32:             \
      CALL(7, 2, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ3HB64:             \
      CALL(7, 2, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ3B32:              \
      CALL(3, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ3B64:              \
      CALL(3, 1, 64);                          \
      break;                                   \
    case QuantGemvFormat::kQ2B32:              \
      CALL(2, 1, 32);                          \
      break;                                   \
    case QuantGemvFormat::kQ2B64:              \
      CALL(2, 1, 64);                          \
      break;                                   \
  }
