#include "kernels/cpu/embedding.hpp"

#include <vector>

namespace weft::cpu {

void embed_tokens(const EmbeddingTable& tokens_table, const std::int32_t* tokens,
                  std::size_t num_tokens, float scale, const EmbeddingTable* positions_table,
                  const std::int32_t* positions, std::size_t offset, float* out, KernelPath path) {
  const std::size_t n = tokens_table.width;
  const std::size_t es = dtype_size(tokens_table.dtype);
  std::vector<float> row(positions_table != nullptr ? n : 0);
  for (std::size_t t = 0; t < num_tokens; ++t) {
    float* dst = out + t * n;
    const auto id = static_cast<std::size_t>(tokens[t]);
    to_f32(tokens_table.dtype, tokens_table.data + id * n * es, dst, n, path);
    if (scale != 1.0f) {
      for (std::size_t i = 0; i < n; ++i)
        dst[i] *= scale;
    }
    if (positions_table != nullptr) {
      const auto p = static_cast<std::size_t>(positions[t]) + offset;
      to_f32(positions_table->dtype,
             positions_table->data + p * n * dtype_size(positions_table->dtype), row.data(), n,
             path);
      for (std::size_t i = 0; i < n; ++i)
        dst[i] += row[i];
    }
  }
}

}  // namespace weft::cpu
