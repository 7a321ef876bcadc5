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
    for (std::size_t g = 0; g < layout.row_groups; ++g) {
      for (int j = 0; j < info.code_bits; ++j) {
        std::uint32_t word = 0;
        std::memcpy(&word, stream.data() + (g * bits + static_cast<std::size_t>(j)) * 4, 4);
        codes[quant_code_word_index(layout, row, g, j)] = word;
      }
    }
    // The padding words at the end of the row.
    for (std::size_t w = layout.row_groups * bits; w < layout.row_code_words; ++w)
      codes[row * layout.row_code_words + w] = 0;
  }
}

}  // namespace weft::cuda
