#pragma once
// The inner loops every CPU kernel is built from, in a scalar and an AVX2/FMA version. The
// choice is made at run time (KernelPath::kAuto asks cpu_features()), so one binary runs on
// any x86-64 and tests can compare the two paths on the same machine.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weft/tensor.hpp"

namespace weft::cpu {

enum class KernelPath { kAuto, kScalar, kAvx2 };

// kAuto -> kAvx2 when the CPU has AVX2, FMA and F16C, else kScalar; kAvx2 on a CPU without
// them also falls back to kScalar, so a caller can never run an illegal instruction.
KernelPath resolve(KernelPath path) noexcept;
bool avx2_available() noexcept;

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
