#pragma once
// Dequantize-fused products of few tokens (batch-1 decode) against block-quantized weights
// in the layout of docs/quantization.md (kernels/cpu/quant/): y[t, o] = sum_k x[t, k] *
// w'[o, k], w' = min + q * scale per block of 32, without materialising w'. One warp per
// output row, each lane one block at a time; the bytes are exactly the CPU format's, so a
// quantized checkpoint uploads as it is.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// The formats with a GPU kernel so far (quant::QuantType's kQ8B32 and kQ4B32).
enum class QuantGemvFormat { kQ8B32, kQ4B32 };

inline constexpr int kQuantGemvMaxTokens = 8;

// Bytes of one quantized row of `in_features` weights (in_features a multiple of 32).
inline std::size_t quant_gemv_row_bytes(QuantGemvFormat format, int in_features) {
  const std::size_t blocks = static_cast<std::size_t>(in_features) / 32;
  return blocks * (format == QuantGemvFormat::kQ8B32 ? 36 : 20);
}

// Whether quant_gemv takes these operands: 1..kQuantGemvMaxTokens tokens, in_features a
// multiple of 32, x 16-byte aligned and w 4-byte aligned.
inline bool quant_gemv_supported(const void* x, int tokens, const void* w, int in_features) {
  return tokens >= 1 && tokens <= kQuantGemvMaxTokens && in_features % 32 == 0 &&
         reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 4 == 0;
}

// x is [tokens, in] in `precision`, w [out, quant_gemv_row_bytes(format, in)] bytes, y
// [tokens, out] fp32 with row stride ldy.
void quant_gemv(const void* x, int tokens, const void* w, QuantGemvFormat format, int out_features,
                int in_features, float* y, int ldy, Precision precision, cudaStream_t stream);

}  // namespace weft::cuda
