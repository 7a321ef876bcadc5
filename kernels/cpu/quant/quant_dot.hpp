#pragma once
// Dequantize-fused inner loops over one quantized row (format.hpp): the dot product with f32
// activations without materialising the weights, and a fast dequantization to f32 for
// products with several tokens (the row is widened once into L1 and reused per token).
// Both have an AVX2/FMA and a scalar version, chosen like vector_math.hpp's; the dot product
// also an AVX-512 one (KernelPath::kAvx512, which kAuto picks where the CPU has AVX-512F).

#include <cstddef>

#include "kernels/cpu/quant/format.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace weft::cpu {

// sum_i x[i] * w'[i] over the n weights of a row stored in `type` (row_bytes(type, n) bytes).
// Per block it computes scale * sum(q * x) + min * sum(x), which equals the product with
// the dequantized row up to fp32 rounding.
float quant_dot(const float* x, quant::QuantType type, const std::byte* row, std::size_t n,
                KernelPath path);

// dst[i] = w'[i]: quant::dequantize_row, vectorized on the AVX2 path (kAvx512 runs it too).
void quant_to_f32(quant::QuantType type, const std::byte* row, std::size_t n, float* dst,
                  KernelPath path);

}  // namespace weft::cpu
