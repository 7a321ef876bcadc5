#pragma once
// The passes over a whole row of logits that dominate the sampler's time at 128K tokens:
// max, sum of exponentials, argmax, the k-th largest value, and the allowed-token bitmask.
// Written as fixed-width blocks of independent lanes so the compiler vectorises them without
// -ffast-math (a float reduction is only vectorised when its order is spelled out), and
// compiled twice (AVX2 and baseline SSE2, picked at run time, rounding identically).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/sampling/sampling_types.hpp"

namespace weft::sampling {

struct RowMax {
  float max;        // -inf when every entry is -inf
  bool non_finite;  // some entry is NaN or +inf: a model bug, never sampled from
};
RowMax row_max(const float* x, std::size_t n) noexcept;

// The first index holding NaN or +inf, or n.
std::size_t find_non_finite(const float* x, std::size_t n) noexcept;

// sum_i exp((x[i] - shift) * scale), accumulated per lane in float and across lanes in
// double. With `out`, each term is also written to out[i]. Entries of -inf give exactly 0.
double sum_exp(const float* x, std::size_t n, float shift, float scale, float* out) noexcept;

// Lowest index of the maximum (greedy's tie rule); `max`, when not NaN, is the row's known
// maximum and saves a pass.
std::int32_t argmax(const float* x, std::size_t n,
                    float max = std::numeric_limits<float>::quiet_NaN()) noexcept;

// The k-th largest value among the finite entries (counting repeats), or -inf when fewer
// than k entries are finite. One pass with a k-entry heap that skips whole blocks below the
// heap's minimum, so top-k over 128K logits never sorts them.
float kth_largest(const float* x, std::size_t n, int k);

// The k largest finite entries, largest first, ties to the lowest id.
std::vector<TokenLogprob> top_entries(const float* x, std::size_t n, int k);

// Appends to `ids` every i with x[i] >= threshold, skipping whole blocks below it.
void collect_at_least(const float* x, std::size_t n, float threshold,
                      std::vector<std::int32_t>& ids);

// The first i whose cumulative weight w[0] + ... + w[i] exceeds `target` (weights >= 0),
// summing 32-entry blocks before entering one; the last positive weight when rounding leaves
// `target` beyond the total.
std::int32_t inverse_cdf(const float* w, std::size_t n, double target) noexcept;

// Sets x[i] = -inf where bit i of `allowed` (32-bit words, little-endian bit order) is clear;
// returns how many of the n tokens are allowed.
std::size_t apply_token_bitmask(float* x, std::size_t n, const std::uint32_t* allowed) noexcept;

}  // namespace weft::sampling
