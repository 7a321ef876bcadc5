#include "kernels/cuda/quant_layout.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace weft::cuda {

QuantMatrixLayout quant_matrix_layout(QuantGemvFormat format, std::size_t rows, std::size_t cols) {
  const QuantGemvInfo info = quant_gemv_info(format);
  QuantMatrixLayout l;
  l.format = format;
  l.rows = rows;
  l.cols = cols;
  l.row_groups = cols / (32 * static_cast<std::size_t>(info.unit_weights));
  l.row_code_words = (l.row_groups * static_cast<std::size_t>(info.code_bits) + 3) / 4 * 4;
  l.row_blocks = cols / static_cast<std::size_t>(info.block);
  return l;
}

std::size_t quant_code_word_index(const QuantMatrixLayout& layout, std::size_t row,
                                  std::size_t group, int word) {
  const int bits = quant_gemv_info(layout.format).code_bits;
  const std::size_t tile = group / 32, in_tile = group % 32;
  const std::size_t n = std::min<std::size_t>(32, layout.row_groups - tile * 32);
  std::size_t at = row * layout.row_code_words + tile * 32 * static_cast<std::size_t>(bits);
  int before = 0;  // words of the group in earlier pieces
  for (int p = 0;; ++p) {
    const int w = quant_piece_width(bits, p);
    if (word < before + w) {
      return at + n * static_cast<std::size_t>(before) + in_tile * static_cast<std::size_t>(w) +
             static_cast<std::size_t>(word - before);
    }
    before += w;
  }
}

void quant_repack_rows(const QuantMatrixLayout& layout, const std::uint8_t* cpu_rows,
                       std::size_t first_row, std::size_t count, std::uint32_t* codes,
                       std::uint32_t* headers) {
  const QuantGemvInfo info = quant_gemv_info(layout.format);
  const auto bits = static_cast<std::size_t>(info.code_bits);
  const std::size_t block_code_bytes =
      static_cast<std::size_t>(info.block / info.unit_weights) * bits / 8;
  const std::size_t block_bytes = 4 + block_code_bytes;
  const std::size_t cpu_row_bytes = layout.row_blocks * block_bytes;
  std::vector<std::uint8_t> stream(layout.row_groups * bits * 4);
  for (std::size_t r = 0; r < count; ++r) {
    const std::uint8_t* src = cpu_rows + r * cpu_row_bytes;
    const std::size_t row = first_row + r;
    // The row's code bit string: the blocks' code bytes back to back.
    for (std::size_t b = 0; b < layout.row_blocks; ++b) {
      const std::uint8_t* block = src + b * block_bytes;
      std::memcpy(headers + row * layout.row_blocks + b, block, 4);
      std::memcpy(stream.data() + b * block_code_bytes, block + 4, block_code_bytes);
    }
    // Tile by tile, piece by piece (quant_code_word_index, unrolled).
    const auto* words = reinterpret_cast<const std::uint8_t*>(stream.data());
    std::uint32_t* row_codes = codes + row * layout.row_code_words;
    for (std::size_t tile = 0; tile * 32 < layout.row_groups; ++tile) {
      const std::size_t n = std::min<std::size_t>(32, layout.row_groups - tile * 32);
      std::uint32_t* at = row_codes + tile * 32 * bits;
      std::size_t before = 0;
      for (int p = 0; quant_piece_width(info.code_bits, p) > 0; ++p) {
        const auto width = static_cast<std::size_t>(quant_piece_width(info.code_bits, p));
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t group = tile * 32 + i;
          std::memcpy(at + n * before + i * width, words + (group * bits + before) * 4, width * 4);
        }
        before += width;
      }
    }
    // The padding words at the end of the row.
    for (std::size_t w = layout.row_groups * bits; w < layout.row_code_words; ++w)
      codes[row * layout.row_code_words + w] = 0;
  }
}

}  // namespace weft::cuda
