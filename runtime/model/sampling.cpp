#include "runtime/model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/softmax.hpp"

namespace weft::model {

TokenChoice choose_token(const float* logits, int vocab, float temperature, int top_logprobs,
                         std::mt19937_64& rng) {
  const auto n = static_cast<std::size_t>(vocab);
  std::vector<float> logprobs(n);
  cpu::log_softmax(logits, n, logprobs.data());
  TokenChoice out;
  if (temperature <= 0.0f) {
    out.id = static_cast<int>(std::max_element(logits, logits + n) - logits);
  } else {
    std::vector<float> scaled(logits, logits + n);
    for (auto& v : scaled)
      v /= temperature;
    cpu::softmax_inplace(scaled.data(), n);
    // Inverse-CDF sampling in double: the last token absorbs rounding so a draw never falls off.
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    double cumulative = 0.0;
    out.id = vocab - 1;
    for (std::size_t i = 0; i < n; ++i) {
      cumulative += scaled[i];
      if (u < cumulative) {
        out.id = static_cast<int>(i);
        break;
      }
    }
  }
  out.logprob = logprobs[static_cast<std::size_t>(out.id)];
  const auto k = static_cast<std::size_t>(std::clamp(top_logprobs, 0, vocab));
  if (k > 0) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(
        order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
        [&](int a, int b) {
          return logprobs[static_cast<std::size_t>(a)] > logprobs[static_cast<std::size_t>(b)] ||
                 (logprobs[static_cast<std::size_t>(a)] == logprobs[static_cast<std::size_t>(b)] &&
                  a < b);
        });
    for (std::size_t i = 0; i < k; ++i) {
      out.top.push_back({order[i], logprobs[static_cast<std::size_t>(order[i])]});
    }
  }
  return out;
}

}  // namespace weft::model
