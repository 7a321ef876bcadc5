#include "runtime/kv/kv_compress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <queue>
#include <string>

namespace weft::kv {

const char* name(KvCompressHeads heads) noexcept {
  return heads == KvCompressHeads::kVariable ? "variable" : "uniform";
}

Result<KvCompressHeads> parse_kv_compress_heads(std::string_view text) {
  if (text == "uniform") return KvCompressHeads::kUniform;
  if (text == "variable") return KvCompressHeads::kVariable;
  return Error(ErrorCode::kInvalidArgument,
               "kv_compress_heads: \"" + std::string(text) + "\" is not one of uniform, variable");
}

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

namespace weft::kv {

std::vector<int> head_evictions(std::span<const float> scores, int units, int evict, int window,
                                int page_size) {
  const int slots = units > 0 ? static_cast<int>(scores.size()) / units : 0;
  std::vector<int> counts(static_cast<std::size_t>(std::max(units, 0)), 0);
  if (units < 1 || page_size < 1 || evict <= 0) return counts;
  const int scored = std::max(0, slots - window);
  const int most_pages = scored / page_size;  // per unit
  // Each unit's pages' worth in eviction order (lowest score first, a tie the later slot
  // first: the reverse of select_kept_slots' ranking), as their summed scores.
  std::vector<std::vector<double>> costs(static_cast<std::size_t>(units));
  std::vector<int> order(static_cast<std::size_t>(scored));
  for (int u = 0; u < units; ++u) {
    const float* row = scores.data() + static_cast<std::size_t>(u) * slots;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    std::reverse(order.begin(), order.end());
    auto& c = costs[static_cast<std::size_t>(u)];
    c.assign(static_cast<std::size_t>(most_pages), 0.0);
    for (int i = 0; i < most_pages * page_size; ++i)
      c[static_cast<std::size_t>(i / page_size)] += row[order[static_cast<std::size_t>(i)]];
  }
  // The smallest next cost first; a tie takes the lower unit.
  using Next = std::pair<double, int>;
  std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
  for (int u = 0; u < units; ++u) {
    if (most_pages > 0) next.push({costs[static_cast<std::size_t>(u)][0], u});
  }
  const long total = std::min<long>(static_cast<long>(units) * (evict / page_size),
                                    static_cast<long>(units) * most_pages);
  for (long taken = 0; taken < total && !next.empty(); ++taken) {
    const int u = next.top().second;
    next.pop();
    auto& count = counts[static_cast<std::size_t>(u)];
    count += page_size;
    const int page = count / page_size;
    if (page < most_pages)
      next.push({costs[static_cast<std::size_t>(u)][static_cast<std::size_t>(page)], u});
  }
  return counts;
}

HeadCells::HeadCells(std::vector<int> evicted, int slots, int page_size)
    : evicted_(std::move(evicted)) {
  const int units = static_cast<int>(evicted_.size());
  if (units < 1 || page_size < 1) return;
  long sum = 0;
  for (int e : evicted_)
    sum += e;
  mean_ = static_cast<int>(sum / units);
  pages_ = (slots - mean_ + page_size - 1) / page_size;
  kept_cells_.resize(evicted_.size());
  for (int u = 0; u < units; ++u) {
    kept_cells_[static_cast<std::size_t>(u)] =
        (slots - evicted_[static_cast<std::size_t>(u)] + page_size - 1) / page_size;
  }
  for (int u = 0; u < units; ++u) {
    for (int page = kept_cells_[static_cast<std::size_t>(u)]; page < pages_; ++page)
      free_.push_back({page, u});
  }
  overflow_begin_.resize(evicted_.size());
  int begin = 0;
  for (int u = 0; u < units; ++u) {
    overflow_begin_[static_cast<std::size_t>(u)] = begin;
    begin += std::max(0, kept_cells_[static_cast<std::size_t>(u)] - pages_);
  }
}

HeadCells::Cell HeadCells::cell(int unit, int index) const {
  const int kept = kept_cells_[static_cast<std::size_t>(unit)];
  if (index >= kept) return {pages_ + index - kept, unit};  // grown since the compression
  if (index < pages_) return {index, unit};
  return free_[static_cast<std::size_t>(overflow_begin_[static_cast<std::size_t>(unit)] + index -
                                        pages_)];
}

}  // namespace weft::kv
