#pragma once
// The tensor-core pieces of the quantized products (quant_gemv_mma.cu, quant_gemv_stream.cu):
// mma.sync.m16n8k16 with fp32 accumulators, codes turned into exact 16-bit numbers two at a
// time (code_pair) and x permuted to the same k slots (x_pair). quant_gemv_mma.cu's header
// comment explains the fragments and the block-diagonal B. Included by .cu files only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/quant_gemv.cuh"

namespace weft::cuda::quant_device {

// The 16-bit formats' constants: two copies of 2^7 (bf16) or 2^10 (fp16), whose mantissa's
// low bits take a code; of 1; and of minus the former.
template <class T>
struct Bits16;
template <>
struct Bits16<__nv_bfloat16> {
  static constexpr unsigned kMagic = 0x43004300u, kOne = 0x3f803f80u, kMinusMagic = 0xc300c300u;
};
template <>
struct Bits16<__half> {
  static constexpr unsigned kMagic = 0x64006400u, kOne = 0x3c003c00u, kMinusMagic = 0xe400e400u;
};

// (magic + q1, magic + q0) - (magic, magic): the codes as exact 16-bit numbers.
__device__ __forceinline__ unsigned unbias(unsigned v, const __nv_bfloat16*) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;"
      : "=r"(d)
      : "r"(v), "r"(Bits16<__nv_bfloat16>::kOne), "r"(Bits16<__nv_bfloat16>::kMinusMagic));
  return d;
}
__device__ __forceinline__ unsigned unbias(unsigned v, const __half*) {
  unsigned d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;"
      : "=r"(d)
      : "r"(v), "r"(Bits16<__half>::kOne), "r"(Bits16<__half>::kMinusMagic));
  return d;
}

// d += A * B, fp32 accumulators.
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                                    const __nv_bfloat16*) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                                    const __half*) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Pair j (0 .. 32 * kUnitW / 2 - 1) of a group: two of its weights' codes as 16-bit numbers
// (the lower k slot in the low half). Which two weights (x_pair must agree):
// - q4: weights 8 * (j / 4) + j % 4 and that + 4 (nibbles j % 4 and j % 4 + 4 of word j / 4);
// - q2: weights 16 * (j / 8) + j % 8 and that + 8;
// - the others: weights 2j and 2j + 1 (Q3H: unit j).
template <class T, int kBits, int kUnitW>
__device__ __forceinline__ unsigned code_pair(const unsigned (&w)[kBits], int j) {
  const T* tag = nullptr;
  constexpr unsigned kMagic = Bits16<T>::kMagic;
  if constexpr (kBits == 4 && kUnitW == 1) {
    return unbias(((w[j >> 2] >> (4 * (j & 3))) & 0x000f000fu) | kMagic, tag);
  } else if constexpr (kBits == 2) {
    return unbias(((w[j >> 3] >> (2 * (j & 7))) & 0x00030003u) | kMagic, tag);
  } else if constexpr (kBits == 8 && std::is_same_v<T, __half>) {
    // Bytes 2 (j % 2) and 2 (j % 2) + 1 of word j / 2, each under a 0x64 byte: 1024 + q.
    return unbias(__byte_perm(w[j >> 1], kMagic, (j & 1) ? 0x7352u : 0x7150u), tag);
  } else if constexpr (kBits == 8) {
    const unsigned word = w[j >> 1];
    const unsigned b = 2u * static_cast<unsigned>(j & 1);
    const float lo = __uint_as_float(__byte_perm(word, 0x4b000000u, 0x7540u | b)) - 8388608.0f;
    const float hi =
        __uint_as_float(__byte_perm(word, 0x4b000000u, 0x7540u | (b + 1u))) - 8388608.0f;
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // exact: q < 256
    unsigned out;
    memcpy(&out, &v, sizeof(out));
    return out;
  } else {
    unsigned q0, q1;
    if constexpr (kUnitW == 2) {
      // Q3H: p = q0 * 11 + q1; p / 11 == (p * 187) >> 11 for every 7-bit p.
      const unsigned p = unit_code<kBits>(w, j);
      q0 = (p * 187u) >> 11;
      q1 = p - q0 * 11u;
    } else {
      q0 = unit_code<kBits>(w, 2 * j);
      q1 = unit_code<kBits>(w, 2 * j + 1);
    }
    return unbias(q0 | (q1 << 16) | kMagic, tag);
  }
}

// x at the weights of code_pair(j), from the group's x as 16-bit pairs (xw[i]: weights 2i and
// 2i + 1).
template <int kBits, int kUnitW, int kXWords>
__device__ __forceinline__ unsigned x_pair(const unsigned (&xw)[kXWords], int j) {
  if constexpr (kBits == 4 && kUnitW == 1) {
    const int at = 4 * (j >> 2) + ((j & 3) >> 1);
    return __byte_perm(xw[at], xw[at + 2], (j & 1) ? 0x7632u : 0x5410u);
  } else if constexpr (kBits == 2) {
    const int at = 8 * (j >> 3) + ((j & 7) >> 1);
    return __byte_perm(xw[at], xw[at + 4], (j & 1) ? 0x7632u : 0x5410u);
  } else {
    return xw[j];
  }
}

// This lane's B values: x of `group` (kGroupWeights elements from group * kGroupWeights) for
// `token` as kXWords 16-bit pairs, or zeros where `live` is false.
template <int kGroupWeights, class T, int kXWords>
__device__ __forceinline__ void load_x_words(unsigned (&xw)[kXWords], const T* __restrict__ x,
                                             int token, int in, int group, bool live) {
  if (live) {
    const auto* xp = reinterpret_cast<const uint4*>(
        x + static_cast<std::size_t>(token) * in + static_cast<std::size_t>(group) * kGroupWeights);
#pragma unroll
    for (int v = 0; v < kXWords / 4; ++v) {
      const uint4 q = __ldg(xp + v);
      xw[4 * v] = q.x;
      xw[4 * v + 1] = q.y;
      xw[4 * v + 2] = q.z;
      xw[4 * v + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kXWords; ++i)
      xw[i] = 0;
  }
}

// acc += scale * d + min * sum(x) for rows g (header fa) and g + 8 (header fb) of an m16n8
// product d, sx its sum(x) product.
__device__ __forceinline__ void add_scaled(float (&acc)[4], float2 fa, float2 fb,
                                           const float (&d)[4], const float (&sx)[4]) {
  acc[0] = fmaf(fa.x, d[0], fmaf(fa.y, sx[0], acc[0]));
  acc[1] = fmaf(fa.x, d[1], fmaf(fa.y, sx[1], acc[1]));
  acc[2] = fmaf(fb.x, d[2], fmaf(fb.y, sx[2], acc[2]));
  acc[3] = fmaf(fb.x, d[3], fmaf(fb.y, sx[3], acc[3]));
}

// Token pair p's sums over the four lanes of a row (their groups) into acc; lane t == 0 stores
// rows g and g + 8, tokens 2p and 2p + 1, in the warp's part[row][token].
template <int kRows, int kCols>
__device__ __forceinline__ void quad_sum_store(float (&acc)[4], int g, int t, int p,
                                               float (&part)[kRows][kCols]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 1);
    acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 2);
  }
  if (t == 0) {
    part[g][2 * p] = acc[0];
    part[g][2 * p + 1] = acc[1];
    part[g + 8][2 * p] = acc[2];
    part[g + 8][2 * p + 1] = acc[3];
  }
}

}  // namespace weft::cuda::quant_device
