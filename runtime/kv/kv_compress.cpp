#include "runtime/kv/kv_compress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

namespace weft::kv {

Result<void> check(const KvCompressConfig& config) {
  if (!(config.rate >= 0.0 && config.rate < 1.0)) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%g", config.rate);
    return Error(ErrorCode::kInvalidArgument,
                 std::string("kv_compress_rate: ") + rate + " is outside [0, 1) (0 turns it off)");
  }
  if (config.window < 1 || config.window > 4096) {
    return Error(ErrorCode::kInvalidArgument,
                 "kv_compress_window: " + std::to_string(config.window) + " is outside [1, 4096]");
  }
  return {};
}

int evicted_slots(int slots, const KvCompressConfig& config, int page_size) {
  if (!config.enabled() || slots <= config.window || page_size < 1) return 0;
  const auto wanted = static_cast<int>(std::floor(config.rate * slots));
  const int most = slots - config.window;
  return std::min(wanted, most) / page_size * page_size;
}

void select_kept_slots(std::span<const float> scores, int evict, int window,
                       std::vector<int>& kept) {
  const int slots = static_cast<int>(scores.size());
  const int scored = std::max(0, slots - window);  // slots that may be evicted
  evict = std::clamp(evict, 0, scored);
  std::vector<int> order(static_cast<std::size_t>(scored));
  std::iota(order.begin(), order.end(), 0);
  // Highest score first; on a tie the earlier slot ranks higher (kept).
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return scores[static_cast<std::size_t>(a)] > scores[static_cast<std::size_t>(b)];
  });
  order.resize(static_cast<std::size_t>(scored - evict));
  std::sort(order.begin(), order.end());
  kept = std::move(order);
  for (int s = scored; s < slots; ++s)
    kept.push_back(s);
}

}  // namespace weft::kv
