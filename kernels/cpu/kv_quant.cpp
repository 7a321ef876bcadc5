#include "kernels/cpu/kv_quant.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace weft::cpu {
namespace {

float decode_fp8_e4m3(std::uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude =
      exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)  // subnormal
                    : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return (bits & 0x80) != 0 ? -magnitude : magnitude;
}

// Every fp8 value as a float: reading a row is one table load per element.
const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i)
      t[static_cast<std::size_t>(i)] = decode_fp8_e4m3(static_cast<std::uint8_t>(i));
    return t;
  }();
  return table;
}

// Eight elements of a stored row, widened (not yet scaled): int8 and fp8 (through the table,
// a gather) for dot_kv_row and axpy_kv_row's AVX2 path; bf16 and f16 as vector_math does.
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8_kv(KvDtype dtype, const void* row,
                                                                std::size_t i) {
  switch (dtype) {
    case KvDtype::kInt8: {
      const __m128i raw = _mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(row) + i));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
    }
    case KvDtype::kFp8E4M3: {
      const __m128i raw = _mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(static_cast<const std::uint8_t*>(row) + i));
      return _mm256_i32gather_ps(fp8_table().data(), _mm256_cvtepu8_epi32(raw), 4);
    }
    case KvDtype::kF16:
      return _mm256_cvtph_ps(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(row) + i)));
    case KvDtype::kBF16: {
      const __m128i raw = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(row) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
    case KvDtype::kF32:
      break;
  }
  return _mm256_loadu_ps(static_cast<const float*>(row) + i);
}

__attribute__((target("avx2,fma,f16c"))) float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The row's unscaled dot product over whole blocks of 8 (the caller does the tail).
__attribute__((target("avx2,fma,f16c"))) float dot8_avx2(const float* q, KvDtype dtype,
                                                         const void* row, std::size_t blocks) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {  // two accumulators hide the FMA latency
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * b), load8_kv(dtype, row, 8 * b), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * b + 8), load8_kv(dtype, row, 8 * b + 8), acc1);
  }
  if (b < blocks)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * b), load8_kv(dtype, row, 8 * b), acc0);
  return hsum8(_mm256_add_ps(acc0, acc1));
}

__attribute__((target("avx2,fma,f16c"))) void axpy8_avx2(float w, KvDtype dtype, const void* row,
                                                         float* out, std::size_t blocks) {
  const __m256 wv = _mm256_set1_ps(w);
  for (std::size_t b = 0; b < blocks; ++b) {
    float* o = out + 8 * b;
    _mm256_storeu_ps(o, _mm256_fmadd_ps(wv, load8_kv(dtype, row, 8 * b), _mm256_loadu_ps(o)));
  }
}

float max_abs(const float* x, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

std::uint8_t f32_to_fp8_e4m3(float value) noexcept {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80);
  if (std::isnan(value)) return static_cast<std::uint8_t>(sign | 0x7f);
  const float magnitude = std::fabs(value);
  if (magnitude >= kFp8E4M3Max) return static_cast<std::uint8_t>(sign | 0x7e);
  if (magnitude < 0x1p-6f) {
    // Subnormal: multiples of 2^-9. The product is exact, and nearbyint rounds to even (the
    // default rounding mode); 8 * 2^-9 comes out as 0x08, the smallest normal, as it should.
    return static_cast<std::uint8_t>(sign |
                                     static_cast<std::uint8_t>(std::nearbyint(magnitude * 512.0f)));
  }
  // Normal: keep the top 3 of float's 23 mantissa bits, rounding the other 20 to nearest
  // even; a carry out of the mantissa moves into the exponent, as it should.
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127;
  const std::uint32_t mantissa = bits & 0x7fffff;
  std::uint32_t code = (static_cast<std::uint32_t>(exponent + 7) << 3) | (mantissa >> 20);
  const std::uint32_t rest = mantissa & 0xfffff;
  if (rest > 0x80000 || (rest == 0x80000 && (code & 1) != 0)) ++code;
  return static_cast<std::uint8_t>(sign | std::min<std::uint32_t>(code, 0x7e));
}

float fp8_e4m3_to_f32(std::uint8_t bits) noexcept {
  return fp8_table()[bits];
}

float store_kv_row(KvDtype dtype, const float* x, std::size_t n, void* dst) noexcept {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, x, n * sizeof(float));
      return 1.0f;
    case KvDtype::kBF16: {
      auto* out = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i)
        out[i] = f32_to_bf16(x[i]);
      return 1.0f;
    }
    case KvDtype::kF16: {
      auto* out = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i)
        out[i] = f32_to_f16(x[i]);
      return 1.0f;
    }
    case KvDtype::kInt8: {
      auto* out = static_cast<std::int8_t*>(dst);
      const float amax = max_abs(x, n);
      if (amax == 0.0f) {
        std::memset(out, 0, n);
        return 0.0f;
      }
      const float inv = kInt8KvMax / amax;
      for (std::size_t i = 0; i < n; ++i) {
        const float q = std::clamp(std::nearbyint(x[i] * inv), -kInt8KvMax, kInt8KvMax);
        out[i] = static_cast<std::int8_t>(q);
      }
      return amax / kInt8KvMax;
    }
    case KvDtype::kFp8E4M3: {
      auto* out = static_cast<std::uint8_t*>(dst);
      const float amax = max_abs(x, n);
      if (amax == 0.0f) {
        std::memset(out, 0, n);
        return 0.0f;
      }
      const float inv = kFp8E4M3Max / amax;
      for (std::size_t i = 0; i < n; ++i)
        out[i] = f32_to_fp8_e4m3(x[i] * inv);
      return amax / kFp8E4M3Max;
    }
  }
  return 1.0f;
}

void load_kv_row(KvDtype dtype, const void* src, float scale, std::size_t n, float* out) noexcept {
  switch (dtype) {
    case KvDtype::kF32:
      to_f32(DType::kF32, src, out, n, KernelPath::kScalar);
      break;
    case KvDtype::kBF16:
      to_f32(DType::kBF16, src, out, n, KernelPath::kAuto);
      break;
    case KvDtype::kF16:
      to_f32(DType::kF16, src, out, n, KernelPath::kAuto);
      break;
    case KvDtype::kInt8: {
      const auto* in = static_cast<const std::int8_t*>(src);
      for (std::size_t i = 0; i < n; ++i)
        out[i] = scale * static_cast<float>(in[i]);
      return;
    }
    case KvDtype::kFp8E4M3: {
      const auto* in = static_cast<const std::uint8_t*>(src);
      const auto& table = fp8_table();
      for (std::size_t i = 0; i < n; ++i)
        out[i] = scale * table[in[i]];
      return;
    }
  }
  if (scale != 1.0f) {
    for (std::size_t i = 0; i < n; ++i)
      out[i] *= scale;
  }
}

float dot_kv_row(const float* q, KvDtype dtype, const void* row, float scale, std::size_t n,
                 KernelPath path) noexcept {
  if (kv_dtype_scaled(dtype) && runs_avx2(resolve(path))) {
    const std::size_t whole = n / 8 * 8;
    float sum = dot8_avx2(q, dtype, row, n / 8);
    for (std::size_t i = whole; i < n; ++i) {
      sum += q[i] * (dtype == KvDtype::kInt8
                         ? static_cast<float>(static_cast<const std::int8_t*>(row)[i])
                         : fp8_table()[static_cast<const std::uint8_t*>(row)[i]]);
    }
    return sum * scale;
  }
  switch (dtype) {
    case KvDtype::kF32:
      return dot(q, DType::kF32, row, n, path) * scale;
    case KvDtype::kBF16:
      return dot(q, DType::kBF16, row, n, path) * scale;
    case KvDtype::kF16:
      return dot(q, DType::kF16, row, n, path) * scale;
    case KvDtype::kInt8: {
      // The scale is the row's: apply it once to the sum.
      const auto* in = static_cast<const std::int8_t*>(row);
      float sum = 0.0f;
      for (std::size_t i = 0; i < n; ++i)
        sum += q[i] * static_cast<float>(in[i]);
      return sum * scale;
    }
    case KvDtype::kFp8E4M3: {
      const auto* in = static_cast<const std::uint8_t*>(row);
      const auto& table = fp8_table();
      float sum = 0.0f;
      for (std::size_t i = 0; i < n; ++i)
        sum += q[i] * table[in[i]];
      return sum * scale;
    }
  }
  return 0.0f;
}

void axpy_kv_row(float alpha, KvDtype dtype, const void* row, float scale, float* out,
                 std::size_t n, KernelPath path) noexcept {
  const float w = alpha * scale;
  std::size_t done = 0;
  if (dtype != KvDtype::kF32 && runs_avx2(resolve(path))) {
    axpy8_avx2(w, dtype, row, out, n / 8);
    done = n / 8 * 8;
    if (done == n) return;
    // The tail below, from `done` on.
    row = static_cast<const unsigned char*>(row) + done * kv_element_bytes(dtype);
    out += done;
    n -= done;
  }
  switch (dtype) {
    case KvDtype::kF32:
      axpy(w, static_cast<const float*>(row), out, n, path);
      return;
    case KvDtype::kBF16: {
      const auto* in = static_cast<const std::uint16_t*>(row);
      for (std::size_t i = 0; i < n; ++i)
        out[i] += w * bf16_to_f32(in[i]);
      return;
    }
    case KvDtype::kF16: {
      const auto* in = static_cast<const std::uint16_t*>(row);
      for (std::size_t i = 0; i < n; ++i)
        out[i] += w * f16_to_f32(in[i]);
      return;
    }
    case KvDtype::kInt8: {
      const auto* in = static_cast<const std::int8_t*>(row);
      for (std::size_t i = 0; i < n; ++i)
        out[i] += w * static_cast<float>(in[i]);
      return;
    }
    case KvDtype::kFp8E4M3: {
      const auto* in = static_cast<const std::uint8_t*>(row);
      const auto& table = fp8_table();
      for (std::size_t i = 0; i < n; ++i)
        out[i] += w * table[in[i]];
      return;
    }
  }
}

}  // namespace weft::cpu
