#pragma once
// Normalisations over the last dimension of a [tokens, n] activation, fp32 throughout as
// transformers computes them (it upcasts to fp32 before the variance).

#include <cstddef>

#include "kernels/cpu/vector_math.hpp"

namespace weft::cpu {

// out = x / sqrt(mean(x^2) + eps) * weight  (Zhang & Sennrich 2019)
void rms_norm(const float* x, std::size_t tokens, std::size_t n, const float* weight, float eps,
              float* out, KernelPath path = KernelPath::kAuto);

// out = (x - mean) / sqrt(var + eps) * weight + bias  (bias may be null)
void layer_norm(const float* x, std::size_t tokens, std::size_t n, const float* weight,
                const float* bias, float eps, float* out, KernelPath path = KernelPath::kAuto);

}  // namespace weft::cpu
