#pragma once
// Percentiles for `weft bench`'s reports (bench_report.cpp, bench_multi_turn.cpp).

#include <algorithm>
#include <cstddef>
#include <vector>

namespace weft::cli {

// The p-th percentile (0-100) with linear interpolation between ranks, as numpy's default;
// 0 for no values.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace weft::cli
