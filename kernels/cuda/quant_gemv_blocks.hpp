#pragma once
// The first, simple dequantize-fused products, kept as a reference for the bench and tests:
// they read q8_b32 and q4_b32 weights in the CPU layout of docs/quantization.md
// (kernels/cpu/quant/) as they are: y[t, o] = sum_k x[t, k] * w'[o, k], w' = min + q * scale
// per block of 32. One warp per output row, each lane one block at a time. The model uses
// the faster kernels of quant_gemv.hpp, which read the repacked layout of quant_layout.hpp.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// The two formats this kernel reads (quant::QuantType's kQ8B32 and kQ4B32).
enum class QuantBlocksFormat { kQ8B32, kQ4B32 };

inline constexpr int kQuantBlocksMaxTokens = 8;

// Bytes of one quantized row of `in_features` weights (in_features a multiple of 32).
inline std::size_t quant_blocks_row_bytes(QuantBlocksFormat format, int in_features) {
  const std::size_t blocks = static_cast<std::size_t>(in_features) / 32;
  return blocks * (format == QuantBlocksFormat::kQ8B32 ? 36 : 20);
}

// Whether quant_gemv_blocks takes these operands: 1..kQuantBlocksMaxTokens tokens, in_features a
// multiple of 32, x 16-byte aligned and w 4-byte aligned.
inline bool quant_blocks_supported(const void* x, int tokens, const void* w, int in_features) {
  return tokens >= 1 && tokens <= kQuantBlocksMaxTokens && in_features % 32 == 0 &&
         reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 4 == 0;
}

// x is [tokens, in] in `precision`, w [out, quant_blocks_row_bytes(format, in)] bytes, y
// [tokens, out] fp32 with row stride ldy.
void quant_gemv_blocks(const void* x, int tokens, const void* w, QuantBlocksFormat format,
                       int out_features, int in_features, float* y, int ldy, Precision precision,
                       cudaStream_t stream);

}  // namespace weft::cuda
