#pragma once
// The GPU layout of block-quantized weight matrices (docs/quantization.md, "On the GPU"): the
// CPU format's bytes, repacked once as the model loads so that the dequantize-fused kernels
// (quant_gemv.hpp) read them with wide, fully coalesced loads. Plain C++: no CUDA headers, so
// the repacking is tested on machines without a GPU.
//
// A format codes `units` of code_bits bits: one weight each, or a pair of weights for Q3H (a
// 7-bit number p = q0 * 11 + q1). A row's units, read as the CPU stores them (least
// significant bit first, blocks back to back, the block headers left out), are one bit
// string; a *group* is 32 consecutive units (32 weights, 64 for Q3H), i.e. code_bits 32-bit
// words of that string. The GPU matrix is two arrays:
//
// - codes: row r starts at word r * row_code_words (row_groups * code_bits, rounded up to a
//   multiple of 4 words so every row starts 16-byte aligned). A row's groups come in tiles of
//   32 (the last tile may have fewer, `n` groups); a group's code_bits words are split into
//   pieces of 4, 2 and 1 words (8 = 4+4, 7 = 4+2+1, 6 = 4+2, 5 = 4+1, 4, 3 = 2+1, 2) and a
//   tile stores piece by piece: the first piece of its n groups, then the second piece of
//   its n groups, ... So a warp whose lane i reads group i of a tile loads each piece as one
//   contiguous run of 32 x 16, 8 or 4 bytes.
// - headers: the blocks' (scale, min) fp16 pairs, 4 bytes each as the CPU stores them, row r
//   at word r * row_blocks.
//
// Matrices whose in_features is not a multiple of 64 have no GPU layout (the model then keeps
// a 16-bit copy, as for unquantized weights).

#include <cstddef>
#include <cstdint>

namespace weft::cuda {

// Every block format, in the order of quant::QuantType (kernels/cpu/quant/format.hpp) minus
// its kNone: QuantGemvFormat(int(QuantType) - 1).
enum class QuantGemvFormat {
  kQ8B32,
  kQ8B64,
  kQ6B32,
  kQ6B64,
  kQ5B32,
  kQ5B64,
  kQ4B32,
  kQ4B64,
  kQ3HB32,
  kQ3HB64,
  kQ3B32,
  kQ3B64,
  kQ2B32,
  kQ2B64,
};
inline constexpr int kQuantGemvFormats = 14;

struct QuantGemvInfo {
  int block = 32;        // weights per block (one header each)
  int code_bits = 4;     // bits per unit
  int unit_weights = 1;  // weights per unit: 2 for Q3H
};

constexpr QuantGemvInfo quant_gemv_info(QuantGemvFormat f) {
  const int i = static_cast<int>(f);
  const int block = i % 2 == 0 ? 32 : 64;
  constexpr int bits[] = {8, 6, 5, 4, 7, 3, 2};
  return {block, bits[i / 2], i / 2 == 4 ? 2 : 1};
}

// The piece widths (in 32-bit words) of a group of `code_bits` words, first to last; 0 ends.
constexpr int quant_piece_width(int code_bits, int piece) {
  int left = code_bits;
  for (int p = 0;; ++p) {
    const int w = left >= 4 ? 4 : left >= 2 ? 2 : left;
    if (p == piece) return w;
    left -= w;
    if (left == 0) return 0;
  }
}

// Sizes of one matrix in the GPU layout.
struct QuantMatrixLayout {
  QuantGemvFormat format{};
  std::size_t rows = 0, cols = 0;
  std::size_t row_groups = 0;      // cols / (32 * unit_weights)
  std::size_t row_code_words = 0;  // row_groups * code_bits rounded up to a multiple of 4
  std::size_t row_blocks = 0;      // cols / block
  // Byte offsets in one device allocation: codes first, then headers (16-byte aligned).
  std::size_t code_bytes() const noexcept { return rows * row_code_words * 4; }
  std::size_t header_offset() const noexcept { return code_bytes(); }
  std::size_t header_bytes() const noexcept { return rows * row_blocks * 4; }
  std::size_t total_bytes() const noexcept { return code_bytes() + header_bytes(); }
};

// Whether a matrix of `cols` input features has a GPU layout (cols a positive multiple of 64).
inline bool quant_layout_supported(std::size_t cols) {
  return cols > 0 && cols % 64 == 0;
}

QuantMatrixLayout quant_matrix_layout(QuantGemvFormat format, std::size_t rows, std::size_t cols);

// Repacks `count` rows in the CPU format (rows of quant::row_bytes(type, cols) bytes, back to
// back) into rows [first_row, first_row + count) of a matrix in the GPU layout: `codes` and
// `headers` point at the matrix's two arrays (a host image of the device allocation).
void quant_repack_rows(const QuantMatrixLayout& layout, const std::uint8_t* cpu_rows,
                       std::size_t first_row, std::size_t count, std::uint32_t* codes,
                       std::uint32_t* headers);

// Word `word` (0 .. code_bits - 1) of group `group` of row `row`: its index in `codes`.
std::size_t quant_code_word_index(const QuantMatrixLayout& layout, std::size_t row,
                                  std::size_t group, int word);

}  // namespace weft::cuda
