#include "kernels/cpu/norm.hpp"

#include <cmath>

namespace weft::cpu {

void rms_norm(const float* x, std::size_t tokens, std::size_t n, const float* weight, float eps,
              float* out, KernelPath path) {
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* row = x + t * n;
    float* dst = out + t * n;
    const float sum_sq = dot(row, DType::kF32, row, n, path);
    const float scale = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = row[i] * scale * weight[i];
  }
}

void layer_norm(const float* x, std::size_t tokens, std::size_t n, const float* weight,
                const float* bias, float eps, float* out, KernelPath path) {
  (void)path;  // two passes over a short row; the scalar loop is not the bottleneck
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* row = x + t * n;
    float* dst = out + t * n;
    float mean = 0.0f;
    for (std::size_t i = 0; i < n; ++i)
      mean += row[i];
    mean /= static_cast<float>(n);
    float var = 0.0f;
    for (std::size_t i = 0; i < n; ++i)
      var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<float>(n);
    const float scale = 1.0f / std::sqrt(var + eps);
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = (row[i] - mean) * scale * weight[i] + (bias ? bias[i] : 0.0f);
    }
  }
}

}  // namespace weft::cpu
