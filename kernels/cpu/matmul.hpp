#pragma once
// Dense products against weight matrices stored as Hugging Face Linear layers do: row-major
// [out_features, in_features] in f32, f16 or bf16, or in a block quantization format
// (quant/format.hpp: each row is row_bytes(quant, cols) bytes). Arithmetic is fp32
// throughout; half-precision and quantized weights are widened as they are read, never
// copied whole.

#include <cstddef>
#include <span>

#include "kernels/cpu/quant/format.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "weft/tensor.hpp"

namespace weft::cpu {

struct WeightMatrix {
  DType dtype = DType::kF32;  // kF32, kF16 or kBF16; kU8 when quantized
  const void* data = nullptr;
  std::size_t rows = 0;  // out_features
  std::size_t cols = 0;  // in_features (weights per row, also when quantized)
  quant::QuantType quant = quant::QuantType::kNone;

  bool quantized() const noexcept { return quant != quant::QuantType::kNone; }
  std::size_t row_bytes() const noexcept {
    return quantized() ? quant::row_bytes(quant, cols) : cols * dtype_size(dtype);
  }
  const void* row(std::size_t r) const {
    return static_cast<const std::byte*>(data) + r * row_bytes();
  }
};

// One row of w as f32 (dequantized or widened) into dst[0, w.cols).
void weight_row_to_f32(const WeightMatrix& w, std::size_t r, float* dst,
                       KernelPath path = KernelPath::kAuto);

// y[t, o] = sum_k x[t, k] * w[o, k] (+ bias[o]) for t < tokens. x is [tokens, w.cols], y is
// [tokens, w.rows], bias is f32 or null. Work is split over output rows, so each weight row
// is read once per call whatever the number of tokens.
void matmul(const float* x, std::size_t tokens, const WeightMatrix& w, const float* bias, float* y,
            ThreadPool* pool, KernelPath path = KernelPath::kAuto);

// Several products of the same activations (q, k and v; gate and up) as one parallel job,
// so they cost one barrier instead of one each.
struct MatmulOutput {
  const WeightMatrix* w = nullptr;
  const float* bias = nullptr;  // may be null
  float* y = nullptr;           // [tokens, w->rows]
};
void matmul_group(const float* x, std::size_t tokens, std::span<const MatmulOutput> outputs,
                  ThreadPool* pool, KernelPath path = KernelPath::kAuto);

}  // namespace weft::cpu
