#include "kernels/cpu/vector_math.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_features.hpp"

namespace weft::cpu {

bool avx2_available() noexcept {
  const auto& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

bool avx512_available() noexcept {
  return avx2_available() && cpu_features().avx512f;
}

KernelPath resolve(KernelPath path) noexcept {
  if (path == KernelPath::kScalar) return path;
  if (!avx2_available()) return KernelPath::kScalar;
  if (path == KernelPath::kAvx2) return path;
  // kAuto asks the environment once: WEFT_CPU_AVX512=0 keeps the AVX2 kernels (comparisons).
  static const bool auto_avx512 = [] {
    const char* v = std::getenv("WEFT_CPU_AVX512");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "1") == 0) return true;
    if (std::strcmp(v, "0") == 0) return false;
    std::fprintf(stderr,
                 "WEFT_CPU_AVX512=%s: not 0 (AVX2) or 1 (AVX-512 where the CPU has it); using 1\n",
                 v);
    return true;
  }();
  const bool avx512 = avx512_available() && (path == KernelPath::kAvx512 || auto_avx512);
  return avx512 ? KernelPath::kAvx512 : KernelPath::kAvx2;
}

float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise the mantissa
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

std::uint16_t f32_to_bf16(float value) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

std::uint16_t f32_to_f16(float value) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;              // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;             // overflows to infinity
  if (abs < 0x38800000u) {                                   // subnormal or zero in f16
    const float magnitude = std::fabs(value) * 16777216.0f;  // 2^24: units of f16's smallest
    return sign | static_cast<std::uint16_t>(std::nearbyint(magnitude));
  }
  std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<std::uint16_t>((rounded - 0x38000000u) >> 13);
}

namespace {

float load_scalar(DType dtype, const void* p, std::size_t i) {
  switch (dtype) {
    case DType::kF16:
      return f16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(DType dtype, const void* p,
                                                             std::size_t i) {
  switch (dtype) {
    case DType::kF16:
      return _mm256_cvtph_ps(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i)));
    case DType::kBF16: {
      const __m128i raw = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
    default:
      return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma,f16c"))) float dot_avx2(const float* a, DType dtype, const void* b,
                                                        std::size_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  std::size_t i = 0;
  // Four independent accumulators hide the FMA latency.
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(dtype, b, i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load8(dtype, b, i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), load8(dtype, b, i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), load8(dtype, b, i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(dtype, b, i), acc0);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i)
    sum += a[i] * load_scalar(dtype, b, i);
  return sum;
}

__attribute__((target("avx2,fma,f16c"))) void to_f32_avx2(DType dtype, const void* src, float* dst,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, load8(dtype, src, i));
  for (; i < n; ++i)
    dst[i] = load_scalar(dtype, src, i);
}

__attribute__((target("avx2,fma,f16c"))) void axpy_avx2(float alpha, const float* x, float* y,
                                                        std::size_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i)
    y[i] += alpha * x[i];
}

}  // namespace

void to_f32(DType dtype, const void* src, float* dst, std::size_t n, KernelPath path) {
  if (runs_avx2(resolve(path))) return to_f32_avx2(dtype, src, dst, n);
  for (std::size_t i = 0; i < n; ++i)
    dst[i] = load_scalar(dtype, src, i);
}

float dot(const float* a, DType b_dtype, const void* b, std::size_t n, KernelPath path) {
  if (runs_avx2(resolve(path))) return dot_avx2(a, b_dtype, b, n);
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    sum += a[i] * load_scalar(b_dtype, b, i);
  return sum;
}

void axpy(float alpha, const float* x, float* y, std::size_t n, KernelPath path) {
  if (runs_avx2(resolve(path))) return axpy_avx2(alpha, x, y, n);
  for (std::size_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

}  // namespace weft::cpu
