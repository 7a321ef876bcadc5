#pragma once
// The inner loops every CPU kernel is built from, in a scalar and an AVX2/FMA version (and, for
// the quantized one-token products, an AVX-512 one: quant/quant_dot.hpp). The choice is made at
// run time (KernelPath::kAuto asks cpu_features()), so one binary runs on any x86-64 and tests
// can compare the paths on the same machine.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weft/tensor.hpp"

namespace weft::cpu {

// kAvx512: the AVX-512 kernels where there are some (the quantized one-token products), the
// AVX2 ones everywhere else.
enum class KernelPath { kAuto, kScalar, kAvx2, kAvx512 };

// kAuto -> kAvx512 when the CPU also has AVX-512F and WEFT_CPU_AVX512 is not 0, else kAvx2
// when it has AVX2, FMA and F16C, else kScalar. A path the CPU lacks falls back the same way
// (kAvx512 to kAvx2 to kScalar), so a caller can never run an illegal instruction.
KernelPath resolve(KernelPath path) noexcept;
bool avx2_available() noexcept;
bool avx512_available() noexcept;  // AVX2's set and AVX-512F

// Whether a resolved path runs the AVX2 kernels (kAvx2, or kAvx512 where a kernel has no
// AVX-512 version).
inline bool runs_avx2(KernelPath resolved) noexcept {
  return resolved == KernelPath::kAvx2 || resolved == KernelPath::kAvx512;
}

// "avx512", "avx2", "scalar" or "auto", for benchmark headers.
inline const char* kernel_path_name(KernelPath path) noexcept {
  switch (path) {
    case KernelPath::kAvx512:
      return "avx512";
    case KernelPath::kAvx2:
      return "avx2";
    case KernelPath::kScalar:
      return "scalar";
    case KernelPath::kAuto:
      break;
  }
  return "auto";
}

inline float bf16_to_f32(std::uint16_t bits) noexcept {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, 4);
  return out;
}
float f16_to_f32(std::uint16_t bits) noexcept;
// Round-to-nearest-even, as torch does when it casts.
std::uint16_t f32_to_bf16(float value) noexcept;
std::uint16_t f32_to_f16(float value) noexcept;

// dst[i] = float(src[i]) for f32, f16 and bf16 sources.
void to_f32(DType dtype, const void* src, float* dst, std::size_t n, KernelPath path);

// sum_i a[i] * float(b[i]), b in f32, f16 or bf16.
float dot(const float* a, DType b_dtype, const void* b, std::size_t n, KernelPath path);

// y[i] += alpha * x[i]
void axpy(float alpha, const float* x, float* y, std::size_t n, KernelPath path);

}  // namespace weft::cpu
