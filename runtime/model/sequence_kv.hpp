#pragma once
// The keys and values of a batch of whole sequences that attend in both directions (the
// encoders of EncoderModel and Seq2SeqModel), each sequence as one page of its own length in
// cpu::PagedKv's fp32 layout (K as [heads][slot][head_dim], then V), so the paged attention
// kernel over positions [0, length) reads the whole sequence.

#include <cstddef>
#include <cstring>
#include <vector>

namespace weft::model {

// Sequence s (lengths[s] tokens from token starts[s]) into blocks[s]: k and v hold a row of
// `row_stride` floats per token, head hd's head_dim values at hd * head_dim.
inline void pack_sequence_kv(const std::vector<std::size_t>& starts,
                             const std::vector<int>& lengths, const float* k, const float* v,
                             std::size_t row_stride, std::size_t heads, std::size_t head_dim,
                             std::vector<std::vector<float>>& blocks) {
  const std::size_t D = head_dim;
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    const auto len = static_cast<std::size_t>(lengths[s]);
    auto& block = blocks[s];
    block.resize(2 * heads * len * D);
    for (std::size_t i = 0; i < len; ++i) {
      const std::size_t t = starts[s] + i;
      for (std::size_t hd = 0; hd < heads; ++hd) {
        std::memcpy(block.data() + (hd * len + i) * D, k + t * row_stride + hd * D,
                    D * sizeof(float));
        std::memcpy(block.data() + ((heads + hd) * len + i) * D, v + t * row_stride + hd * D,
                    D * sizeof(float));
      }
    }
  }
}

}  // namespace weft::model
