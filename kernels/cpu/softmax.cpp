#include "kernels/cpu/softmax.hpp"

#include <algorithm>
#include <cmath>

namespace weft::cpu {

void softmax_inplace(float* x, std::size_t n) noexcept {
  if (n == 0) return;
  const float max = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (std::size_t i = 0; i < n; ++i)
    x[i] *= inv;
}

void log_softmax(const float* x, std::size_t n, float* out) noexcept {
  if (n == 0) return;
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    sum += std::exp(static_cast<double>(x[i] - max));
  const auto log_sum = static_cast<float>(std::log(sum));
  for (std::size_t i = 0; i < n; ++i)
    out[i] = x[i] - max - log_sum;
}

}  // namespace weft::cpu
