#include "runtime/scheduler/admission.hpp"

#include <algorithm>

namespace weft::sched {

std::int64_t peak_pages(std::vector<KvDemand> demands, int page_size) {
  std::sort(demands.begin(), demands.end(), [](const KvDemand& a, const KvDemand& b) {
    return a.tokens_to_come > b.tokens_to_come;
  });
  std::int64_t cumulative_now = 0;
  std::int64_t cumulative_fixed = 0;
  std::int64_t peak = 0;
  const std::int64_t p = page_size;
  for (std::size_t i = 0; i < demands.size(); ++i) {
    cumulative_now += demands[i].tokens_now;
    cumulative_fixed += demands[i].fixed_pages;
    const auto alive = static_cast<std::int64_t>(i + 1);
    // tokens_now + tokens_to_come bounds a finished sequence's KV from above (its last token
    // is never fed back, so it holds one slot less).
    const std::int64_t tokens = cumulative_now + demands[i].tokens_to_come * alive;
    peak = std::max(peak, (tokens + alive * (p - 1)) / p + cumulative_fixed);
  }
  return peak;
}

}  // namespace weft::sched
