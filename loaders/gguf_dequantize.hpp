#pragma once
// Dequantizers for GGUF tensor data, one per block format, written from the block layouts of
// ggml's GGUF specification (docs/loading.md spells them out). They are plain functions over
// bytes so that other code (the quantization kernels' tests, a future fused loader) can reuse
// them; they do no bounds checks beyond `count` being whole blocks, so callers pass spans they
// have checked against the file.

#include <cstddef>
#include <cstdint>
#include <span>

#include "loaders/gguf_types.hpp"

namespace weft::gguf {

// Writes `out.size()` values decoded from `blocks`. `out.size()` must be a multiple of the
// type's block_elements and `blocks` exactly the bytes of that many blocks; otherwise nothing
// is written and false is returned.
bool dequantize(TensorType type, std::span<const std::byte> blocks, std::span<float> out);

// One block each: `block` points at block_bytes bytes, `out` at block_elements floats.
void dequantize_q4_0(const std::byte* block, float* out);
void dequantize_q4_1(const std::byte* block, float* out);
void dequantize_q5_0(const std::byte* block, float* out);
void dequantize_q5_1(const std::byte* block, float* out);
void dequantize_q8_0(const std::byte* block, float* out);
void dequantize_q4_k(const std::byte* block, float* out);
void dequantize_q5_k(const std::byte* block, float* out);
void dequantize_q6_k(const std::byte* block, float* out);

// The 6-bit scale and minimum of sub-block `j` (0..7) of a Q4_K or Q5_K super-block, from
// its 12 packed bytes: sub-blocks 0-3 keep theirs in the low 6 bits of bytes j and j+4;
// 4-7 split theirs between the low/high nibble of byte j+4 and the top 2 bits of bytes j-4
// (scale) and j (minimum).
void k_quant_scale_min(const std::uint8_t* packed, int j, std::uint8_t& scale, std::uint8_t& min);

}  // namespace weft::gguf
