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

// y[r] = quant_dot(x, type, rows + r * stride, n, path) for r in [0, count), bit for bit. On the
// AVX-512 path Q8, Q4 and Q3H read each block's sum of x (and Q4 and Q3H x split into each
// group's even and odd values), formed here once for all the rows (quant_dot forms them for its
// one row).
void quant_dot_rows(const float* x, quant::QuantType type, const std::byte* rows,
                    std::size_t stride, std::size_t count, std::size_t n, float* y,
                    KernelPath path);

// dst[i] = w'[i]: quant::dequantize_row, vectorized on the AVX2 path (kAvx512 runs it too).
void quant_to_f32(quant::QuantType type, const std::byte* row, std::size_t n, float* dst,
                  KernelPath path);

}  // namespace weft::cpu
