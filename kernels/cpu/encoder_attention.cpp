#include "kernels/cpu/encoder_attention.hpp"

#include <algorithm>
#include <cmath>

namespace weft::cpu {

void encoder_attention(const float* qkv, std::size_t qkv_stride, const float* qkv_bias,
                       const std::vector<int>& lengths, int num_heads, int head_dim, float scale,
                       float* out) {
  const auto D = static_cast<std::size_t>(head_dim);
  const std::size_t width = static_cast<std::size_t>(num_heads) * D;
  auto at = [&](std::size_t token, std::size_t col) {
    return qkv[token * qkv_stride + col] + (qkv_bias != nullptr ? qkv_bias[col] : 0.0f);
  };
  std::size_t begin = 0;
  std::vector<double> scores;
  for (const int length : lengths) {
    const auto len = static_cast<std::size_t>(length);
    scores.resize(len);
    for (std::size_t t = begin; t < begin + len; ++t) {
      for (std::size_t h = 0; h < static_cast<std::size_t>(num_heads); ++h) {
        double top = -INFINITY;
        for (std::size_t j = 0; j < len; ++j) {
          double dot = 0;
          for (std::size_t d = 0; d < D; ++d)
            dot += static_cast<double>(at(t, h * D + d)) * at(begin + j, width + h * D + d);
          scores[j] = dot * scale;
          top = std::max(top, scores[j]);
        }
        double sum = 0;
        for (auto& s : scores) {
          s = std::exp(s - top);
          sum += s;
        }
        for (std::size_t d = 0; d < D; ++d) {
          double o = 0;
          for (std::size_t j = 0; j < len; ++j)
            o += scores[j] * at(begin + j, 2 * width + h * D + d);
          out[t * width + h * D + d] = static_cast<float>(o / sum);
        }
      }
    }
    begin += len;
  }
}

}  // namespace weft::cpu
