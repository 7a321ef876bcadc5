#include "runtime/model/seq2seq_positions.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace weft::model {

int relative_position_bucket(int relative_position, bool bidirectional, int num_buckets,
                             int max_distance) noexcept {
  int bucket = 0;
  int distance = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative_position > 0) bucket += num_buckets;
    distance = std::abs(relative_position);
  } else {
    distance = relative_position < 0 ? -relative_position : 0;
  }
  const int max_exact = num_buckets / 2;
  if (distance < max_exact) return bucket + distance;
  // transformers: log(distance.float() / max_exact) / math.log(max_distance / max_exact)
  // * (num_buckets - max_exact), in fp32 (the Python float divisor is rounded to fp32), then
  // truncated toward zero.
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const auto log_range =
      static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact));
  const float scaled = std::log(ratio) / log_range * static_cast<float>(num_buckets - max_exact);
  const int large = std::min(max_exact + static_cast<int>(scaled), num_buckets - 1);
  return bucket + large;
}

void sinusoidal_position(int row, std::size_t dim, int padding_idx, float* out) noexcept {
  std::fill(out, out + dim, 0.0f);
  if (row == padding_idx) return;
  const std::size_t half = dim / 2;
  if (half == 0) return;
  // -(ln(10000) / (half - 1)) as a Python float, rounded to fp32 when it multiplies the fp32
  // arange; the exponential, the product with the row and sin/cos all in fp32.
  const double divisor = half > 1 ? static_cast<double>(half - 1) : 0.0;
  const auto step = static_cast<float>(-(std::log(10000.0) / divisor));
  for (std::size_t j = 0; j < half; ++j) {
    const float freq = std::exp(static_cast<float>(j) * step);
    const float angle = static_cast<float>(row) * freq;
    out[j] = std::sin(angle);
    out[half + j] = std::cos(angle);
  }
}

}  // namespace weft::model
