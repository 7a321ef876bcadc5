#include "kernels/cpu/quant/quant_dot.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/quant/codec.hpp"

namespace weft::cpu {
namespace {

using quant::QuantType;

// --- scalar -------------------------------------------------------------------------------

float dot_scalar(const float* x, QuantType type, const std::byte* row, std::size_t n) {
  const quant::QuantInfo& info = quant::quant_info(type);
  const auto block = static_cast<std::size_t>(info.block);
  std::uint8_t codes[64];
  float total = 0.0f;
  for (std::size_t begin = 0; begin < n; begin += block, row += info.block_bytes()) {
    const std::size_t count = std::min(block, n - begin);
    const auto h = quant::read_block_header(row);
    quant::unpack_block_codes(type, row, codes);
    float qx = 0.0f, sx = 0.0f;
    for (std::size_t i = 0; i < count; ++i) {
      qx += static_cast<float>(codes[i]) * x[begin + i];
      sx += x[begin + i];
    }
    total += h.scale * qx + h.min * sx;
  }
  return total;
}

// --- AVX2 ---------------------------------------------------------------------------------
// Eight K-bit units sit in K bytes (least significant bit first). Units 0-3 are the low 4K
// bits and units 4-7 the next 4K bits; 4K <= 32 for K <= 8, so each half is one 32-bit word
// and a per-lane variable shift plus a mask separates them.

// The caller says whether eight bytes may be read at p (not in the last groups of a row's
// last block whose eight bytes would reach past it, where the matrix may end). An 8-byte load
// instead of a K-byte one keeps odd K from becoming a call to memcpy.
template <int K>
__attribute__((target("avx2,fma"))) inline std::uint64_t load_units(const std::byte* p,
                                                                    bool at_end) {
  std::uint64_t v = 0;
  if (at_end) {
    for (int b = 0; b < K; ++b)
      v |= static_cast<std::uint64_t>(p[b]) << (8 * b);
  } else {
    std::memcpy(&v, p, 8);  // little-endian x86; bits past 8K are never used
  }
  return v;
}

template <int K>
__attribute__((target("avx2,fma"))) inline __m256i unpack8(const std::byte* p, bool at_end) {
  if constexpr (K == 8) {  // bytes as they are: one widening load
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  const std::uint64_t v = load_units<K>(p, at_end);
  const auto lo = static_cast<int>(static_cast<std::uint32_t>(v));
  const auto hi = static_cast<int>(static_cast<std::uint32_t>(v >> (4 * K)));
  const __m256i words = _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi);
  const __m256i shifts = _mm256_setr_epi32(0, K, 2 * K, 3 * K, 0, K, 2 * K, 3 * K);
  return _mm256_and_si256(_mm256_srlv_epi32(words, shifts), _mm256_set1_epi32((1 << K) - 1));
}

// Q4: sixteen codes from eight bytes (low nibble first): widen the bytes, split the nibbles,
// and interleave them back into weight order.
__attribute__((target("avx2,fma"))) inline void unpack16_nibbles(const std::byte* p, __m256& first,
                                                                 __m256& second) {
  const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi32(15));
  const __m256i hi = _mm256_srli_epi32(bytes, 4);
  const __m256i a = _mm256_unpacklo_epi32(lo, hi);  // codes 0-3 | 8-11
  const __m256i b = _mm256_unpackhi_epi32(lo, hi);  // codes 4-7 | 12-15
  first = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(a, b, 0x20));
  second = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(a, b, 0x31));
}

// A block's fp16 scale and min, broadcast (F16C, which the AVX2 path requires).
__attribute__((target("avx2,fma,f16c"))) inline void load_header(const std::byte* block,
                                                                 __m256& scale, __m256& min) {
  std::uint32_t bits;
  std::memcpy(&bits, block, 4);
  const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
  scale = _mm256_broadcastss_ps(both);
  min = _mm256_broadcastss_ps(_mm_movehdup_ps(both));
}

// Q3H: eight 7-bit pair numbers p = a * 11 + b give sixteen codes in weight order. a is
// (p * 187) >> 11, exact for p <= 120 (the error p * (187/2048 - 1/11) stays below 1/11).
__attribute__((target("avx2,fma"))) inline void unpack16_pairs(const std::byte* p, bool at_end,
                                                               __m256& first, __m256& second) {
  const __m256i pairs = unpack8<7>(p, at_end);
  const __m256i a = _mm256_srli_epi32(_mm256_mullo_epi32(pairs, _mm256_set1_epi32(187)), 11);
  const __m256i b = _mm256_sub_epi32(pairs, _mm256_mullo_epi32(a, _mm256_set1_epi32(11)));
  const __m256i lo = _mm256_unpacklo_epi32(a, b);  // a0 b0 a1 b1 | a4 b4 a5 b5
  const __m256i hi = _mm256_unpackhi_epi32(a, b);  // a2 b2 a3 b3 | a6 b6 a7 b7
  first = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x20));
  second = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x31));
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Full blocks only; the caller does a tail block with the scalar code. `row_end`: these
// blocks end the row's bytes (see load_units).
template <int K, int B, bool kPaired>
__attribute__((target("avx2,fma,f16c"))) float dot_blocks_avx2(const float* x, const std::byte* row,
                                                               std::size_t blocks, bool row_end) {
  constexpr std::size_t kBlockBytes = 4 + (kPaired ? B / 2 : B) * K / 8;
  constexpr int kGroups = kPaired || K == 4 ? B / 16 : B / 8;
  __m256 total = _mm256_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b, row += kBlockBytes, x += B) {
    __m256 scale, min;
    load_header(row, scale, min);
    const std::byte* codes = row + 4;
    const bool last_block = row_end && b + 1 == blocks;
    __m256 qx = _mm256_setzero_ps(), sx = _mm256_setzero_ps();
    for (int g = 0; g < kGroups; ++g) {
      // An 8-byte read at group g's K bytes must stay inside the row's last block.
      const bool at_end = last_block && g * K + 8 > kGroups * K;
      if constexpr (kPaired || K == 4) {
        __m256 first, second;
        if constexpr (kPaired) {
          unpack16_pairs(codes + g * K, at_end, first, second);
        } else {
          unpack16_nibbles(codes + g * 8, first, second);
        }
        const __m256 x0 = _mm256_loadu_ps(x + g * 16), x1 = _mm256_loadu_ps(x + g * 16 + 8);
        qx = _mm256_fmadd_ps(first, x0, qx);
        qx = _mm256_fmadd_ps(second, x1, qx);
        sx = _mm256_add_ps(sx, _mm256_add_ps(x0, x1));
      } else {
        const __m256 q = _mm256_cvtepi32_ps(unpack8<K>(codes + g * K, at_end));
        const __m256 xv = _mm256_loadu_ps(x + g * 8);
        qx = _mm256_fmadd_ps(q, xv, qx);
        sx = _mm256_add_ps(sx, xv);
      }
    }
    total = _mm256_fmadd_ps(scale, qx, total);
    total = _mm256_fmadd_ps(min, sx, total);
  }
  return hsum(total);
}

template <int K, int B, bool kPaired>
__attribute__((target("avx2,fma,f16c"))) void to_f32_blocks_avx2(const std::byte* row,
                                                                 std::size_t blocks, bool row_end,
                                                                 float* dst) {
  constexpr std::size_t kBlockBytes = 4 + (kPaired ? B / 2 : B) * K / 8;
  constexpr int kGroups = kPaired || K == 4 ? B / 16 : B / 8;
  for (std::size_t b = 0; b < blocks; ++b, row += kBlockBytes, dst += B) {
    __m256 scale, min;
    load_header(row, scale, min);
    const std::byte* codes = row + 4;
    const bool last_block = row_end && b + 1 == blocks;
    for (int g = 0; g < kGroups; ++g) {
      // An 8-byte read at group g's K bytes must stay inside the row's last block.
      const bool at_end = last_block && g * K + 8 > kGroups * K;
      if constexpr (kPaired || K == 4) {
        __m256 first, second;
        if constexpr (kPaired) {
          unpack16_pairs(codes + g * K, at_end, first, second);
        } else {
          unpack16_nibbles(codes + g * 8, first, second);
        }
        _mm256_storeu_ps(dst + g * 16, _mm256_fmadd_ps(first, scale, min));
        _mm256_storeu_ps(dst + g * 16 + 8, _mm256_fmadd_ps(second, scale, min));
      } else {
        const __m256 q = _mm256_cvtepi32_ps(unpack8<K>(codes + g * K, at_end));
        _mm256_storeu_ps(dst + g * 8, _mm256_fmadd_ps(q, scale, min));
      }
    }
  }
}

// --- AVX-512 (F) --------------------------------------------------------------------------
// Sixteen units a step: a group of 32 weights for Q4 (16 bytes) and Q3H (16 pair numbers),
// else 16 weights. Q4's and Q3H's codes come out as the even and odd weights of the group, so
// x is split the same way (once for all the rows of a product) instead of interleaving the codes
// back; the sums run in another order than AVX2's, so the two paths agree to fp32 rounding, not
// bit for bit.

#define WEFT_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

// GCC 12's unmasked forms of these intrinsics start from an undefined register, which its
// -Wuninitialized reports where they are inlined (GCC bug 105593); the zero-masked forms with
// every lane set are the same instructions without that.
constexpr __mmask16 kAll = 0xffff;
WEFT_AVX512 inline __m512i widen_bytes(const std::byte* p) {
  return _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
WEFT_AVX512 inline __m512 to_floats(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(kAll, v);
}
WEFT_AVX512 inline float hsum512(__m512 v) {  // once a row: through memory, no extracts
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
}

// Units 0-7 from the first K bytes at p, 8-15 from the next K (load_units' rule for at_end).
template <int K>
WEFT_AVX512 inline __m512i unpack16(const std::byte* p, bool at_end) {
  if constexpr (K == 8) {
    return widen_bytes(p);
  }
  // Two of the AVX2 path's eight-unit steps, side by side.
  const __m512i first =
      _mm512_maskz_inserti64x4(0xff, _mm512_setzero_si512(), unpack8<K>(p, at_end), 0);
  return _mm512_maskz_inserti64x4(0xff, first, unpack8<K>(p + K, at_end), 1);
}

// Full blocks of Q8, Q4 and Q3H against x prepared once for all the rows of a product
// (split_for_avx512): for Q4 and Q3H each group's 16 even then 16 odd values of x (Q8 reads x as
// it is), and each block's sum of x as 16 lanes. `row_end` as dot_blocks_avx2's.
template <int K, int B, bool kPaired>
WEFT_AVX512 float dot_blocks_avx512(const float* split, const float* sums, const std::byte* row,
                                    std::size_t blocks, bool row_end) {
  static_assert(kPaired || K == 4 || K == 8);
  constexpr std::size_t kBlockBytes = 4 + (kPaired ? B / 2 : B) * K / 8;
  constexpr bool kHalves = kPaired || K == 4;
  constexpr int kGroups = kHalves ? B / 32 : B / 16;
  constexpr int kGroupBytes = K == 4 ? 16 : 2 * K;
  __m512 total = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b, row += kBlockBytes, split += B, sums += 16) {
    std::uint32_t bits;
    std::memcpy(&bits, row, 4);
    const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
    const __m512 scale = _mm512_set1_ps(_mm_cvtss_f32(both));
    const __m512 min = _mm512_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(both)));
    const std::byte* codes = row + 4;
    const bool last_block = row_end && b + 1 == blocks;
    __m512 qx = _mm512_setzero_ps();
    for (int g = 0; g < kGroups; ++g) {
      const bool at_end = last_block && g * kGroupBytes + K + 8 > kGroups * kGroupBytes;
      const std::byte* p = codes + g * kGroupBytes;
      if constexpr (kHalves) {
        __m512i lo, hi;
        if constexpr (kPaired) {
          const __m512i pairs = unpack16<K>(p, at_end);
          lo = _mm512_maskz_srli_epi32(kAll, _mm512_mullo_epi32(pairs, _mm512_set1_epi32(187)), 11);
          hi = _mm512_sub_epi32(pairs, _mm512_mullo_epi32(lo, _mm512_set1_epi32(11)));
        } else {
          const __m512i bytes = widen_bytes(p);
          lo = _mm512_and_si512(bytes, _mm512_set1_epi32(15));
          hi = _mm512_maskz_srli_epi32(kAll, bytes, 4);
        }
        qx = _mm512_fmadd_ps(to_floats(lo), _mm512_loadu_ps(split + g * 32), qx);
        qx = _mm512_fmadd_ps(to_floats(hi), _mm512_loadu_ps(split + g * 32 + 16), qx);
      } else {
        qx =
            _mm512_fmadd_ps(to_floats(unpack16<K>(p, at_end)), _mm512_loadu_ps(split + g * 16), qx);
      }
    }
    total = _mm512_fmadd_ps(scale, qx, total);
    total = _mm512_fmadd_ps(min, _mm512_loadu_ps(sums), total);
  }
  return hsum512(total);
}

#undef WEFT_AVX512

// A format's vector kernels: the AVX2 dot and dequantization, and the AVX-512 dot (Q8, Q4 and
// Q3H; over x prepared by split_for_avx512).
struct VectorKernels {
  float (*dot)(const float*, const std::byte*, std::size_t, bool) = nullptr;
  void (*to_f32)(const std::byte*, std::size_t, bool, float*) = nullptr;
  float (*dot512)(const float*, const float*, const std::byte*, std::size_t, bool) = nullptr;
  bool halves = false;  // dot512 reads x split into even and odd values (Q4, Q3H)
};

// The AVX-512 dot for Q8, Q4 and Q3H, whose sixteen units a step come from one widening load
// or the pair split; Q6, Q5, Q3 and Q2 spend their time cutting units out of words, which
// AVX-512F does no faster (two of AVX2's eight-unit steps measured 0.8-0.96x AVX2's dot on the
// development VM), so they run the AVX2 dot on the kAvx512 path.
template <int K, int B, bool kPaired = false>
constexpr VectorKernels kernels() {
  VectorKernels k{&dot_blocks_avx2<K, B, kPaired>, &to_f32_blocks_avx2<K, B, kPaired>};
  if constexpr (K == 8 || K == 4 || kPaired) {
    k.dot512 = &dot_blocks_avx512<K, B, kPaired>;
    k.halves = K == 4 || kPaired;
  }
  return k;
}

VectorKernels vector_kernels(QuantType type) {
  switch (type) {
    case QuantType::kQ8B32:
      return kernels<8, 32>();
    case QuantType::kQ8B64:
      return kernels<8, 64>();
    case QuantType::kQ6B32:
      return kernels<6, 32>();
    case QuantType::kQ6B64:
      return kernels<6, 64>();
    case QuantType::kQ5B32:
      return kernels<5, 32>();
    case QuantType::kQ5B64:
      return kernels<5, 64>();
    case QuantType::kQ4B32:
      return kernels<4, 32>();
    case QuantType::kQ4B64:
      return kernels<4, 64>();
    case QuantType::kQ3HB32:
      return kernels<7, 32, true>();
    case QuantType::kQ3HB64:
      return kernels<7, 64, true>();
    case QuantType::kQ3B32:
      return kernels<3, 32>();
    case QuantType::kQ3B64:
      return kernels<3, 64>();
    case QuantType::kQ2B32:
      return kernels<2, 32>();
    case QuantType::kQ2B64:
      return kernels<2, 64>();
    case QuantType::kNone:
      break;
  }
  return {};
}

// x's full blocks for dot_blocks_avx512: each block's 16 lanes of sum of x over its
// groups of 16 (Q8) or 32 (x[i] + x[i + 16]: Q4, Q3H), added in group order; with `split`, per
// group of 32 the even values then the odd ones.
void split_for_avx512(const float* x, std::size_t blocks, std::size_t block, float* split,
                      float* sums) {
  const std::size_t group = split != nullptr ? 32 : 16;
  for (std::size_t b = 0; b < blocks; ++b) {
    float* s = sums + b * 16;
    std::fill(s, s + 16, 0.0f);
    for (std::size_t g = 0; g < block / group; ++g) {
      const float* xg = x + b * block + g * group;
      if (split == nullptr) {
        for (int i = 0; i < 16; ++i)
          s[i] = s[i] + xg[i];
        continue;
      }
      float* out = split + b * block + g * 32;
      for (int i = 0; i < 16; ++i) {
        out[i] = xg[2 * i];
        out[16 + i] = xg[2 * i + 1];
        s[i] = s[i] + (xg[i] + xg[16 + i]);
      }
    }
  }
}

// Rows of a format that has dot512, with x prepared once for all of them; a tail block (n not a
// multiple of the block) through the scalar code, as on the AVX2 path.
void dot_rows_avx512(const VectorKernels& k, const float* x, QuantType type, const std::byte* rows,
                     std::size_t stride, std::size_t count, std::size_t n, float* y) {
  const quant::QuantInfo& info = quant::quant_info(type);
  const auto block = static_cast<std::size_t>(info.block);
  const std::size_t full = n / block;
  const bool tail = full * block < n;
  thread_local std::vector<float> split, sums;
  if (k.halves) split.resize(full * block);
  sums.resize(full * 16);
  split_for_avx512(x, full, block, k.halves ? split.data() : nullptr, sums.data());
  const float* xs = k.halves ? split.data() : x;
  for (std::size_t r = 0; r < count; ++r) {
    const std::byte* row = rows + r * stride;
    float total = k.dot512(xs, sums.data(), row, full, !tail);
    if (tail) {
      total +=
          dot_scalar(x + full * block, type, row + full * info.block_bytes(), n - full * block);
    }
    y[r] = total;
  }
}

}  // namespace

float quant_dot(const float* x, QuantType type, const std::byte* row, std::size_t n,
                KernelPath path) {
  path = resolve(path);
  if (!runs_avx2(path)) return dot_scalar(x, type, row, n);
  const VectorKernels k = vector_kernels(type);
  if (path == KernelPath::kAvx512 && k.dot512 != nullptr) {
    float y = 0.0f;
    dot_rows_avx512(k, x, type, row, 0, 1, n, &y);
    return y;
  }
  const quant::QuantInfo& info = quant::quant_info(type);
  const auto block = static_cast<std::size_t>(info.block);
  const std::size_t full = n / block;
  const bool tail = full * block < n;
  float total = k.dot(x, row, full, !tail);
  if (tail) {
    total += dot_scalar(x + full * block, type, row + full * info.block_bytes(), n - full * block);
  }
  return total;
}

void quant_dot_rows(const float* x, QuantType type, const std::byte* rows, std::size_t stride,
                    std::size_t count, std::size_t n, float* y, KernelPath path) {
  path = resolve(path);
  if (path == KernelPath::kAvx512) {
    if (const VectorKernels k = vector_kernels(type); k.dot512 != nullptr) {
      return dot_rows_avx512(k, x, type, rows, stride, count, n, y);
    }
  }
  for (std::size_t r = 0; r < count; ++r)
    y[r] = quant_dot(x, type, rows + r * stride, n, path);
}

void quant_to_f32(QuantType type, const std::byte* row, std::size_t n, float* dst,
                  KernelPath path) {
  if (!runs_avx2(resolve(path))) return quant::dequantize_row(type, row, n, dst);
  const quant::QuantInfo& info = quant::quant_info(type);
  const auto block = static_cast<std::size_t>(info.block);
  const std::size_t full = n / block;
  const bool tail = full * block < n;
  vector_kernels(type).to_f32(row, full, !tail, dst);
  if (tail) {
    quant::dequantize_row(type, row + full * info.block_bytes(), n - full * block,
                          dst + full * block);
  }
}

}  // namespace weft::cpu
