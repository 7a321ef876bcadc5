#pragma once
// The reference quantizer and dequantizer of the block formats (format.hpp), one row at a
// time: plain scalar code that defines the formats. The fused kernels (quant/matmul.hpp) and
// other readers (a GGUF loader, the CUDA kernels) are tested against dequantize_row.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant/format.hpp"

namespace weft::quant {

// Writes row_bytes(type, n) bytes to dst. Per block: min and max of its weights, scale =
// (max - min) / (levels - 1), both stored as fp16; each code is round((w - min) / scale)
// with the stored (fp16-rounded) min and scale, clamped to [0, levels - 1]. Weights must
// be finite and within fp16's range (|w| < 65504).
void quantize_row(QuantType type, const float* src, std::size_t n, std::byte* dst);

// Reads row_bytes(type, n) bytes from src and writes the n dequantized weights:
// w' = min + q * scale (fp32 arithmetic).
void dequantize_row(QuantType type, const std::byte* src, std::size_t n, float* dst);

// The codes of one block (values in [0, levels)), for tests and other readers: block_bytes
// at `block`, all `info.block` codes (a tail block's padding included).
void unpack_block_codes(QuantType type, const std::byte* block, std::uint8_t* codes);

// The two numbers at the head of a block, widened to f32.
struct BlockHeader {
  float scale = 0.0f;
  float min = 0.0f;
};
BlockHeader read_block_header(const std::byte* block) noexcept;

}  // namespace weft::quant
