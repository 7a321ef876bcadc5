#pragma once
// A brute-force sampler in double precision that sorts the whole vocabulary at every step:
// the formulas of HF's logits processors and warpers and of the OpenAI penalties, written
// the obvious way, for the tests to hold the fast sampler against.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "runtime/sampling/sampling_params.hpp"

namespace weft::sampling::reference {

struct History {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> output;
};

inline std::vector<double> processed_logits(const std::vector<float>& raw, const SamplingParams& p,
                                            const History& h, const std::vector<bool>* allowed) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x(raw.begin(), raw.end());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (allowed && !(*allowed)[i]) {
      x[i] = -inf;
    }
  }
  for (const auto& [id, bias] : p.logit_bias) {
    x[static_cast<std::size_t>(id)] += bias;
  }
  std::set<std::int32_t> seen(h.prompt.begin(), h.prompt.end());
  seen.insert(h.output.begin(), h.output.end());
  for (const auto id : seen) {
    double& v = x[static_cast<std::size_t>(id)];
    v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
  }
  std::map<std::int32_t, int> counts;
  for (const auto id : h.output) {
    ++counts[id];
  }
  for (const auto& [id, c] : counts) {
    x[static_cast<std::size_t>(id)] -=
        c * static_cast<double>(p.frequency_penalty) + static_cast<double>(p.presence_penalty);
  }
  return x;
}

// (id -> probability) of the distribution the next token is drawn from.
inline std::map<std::int32_t, double> distribution(const std::vector<float>& raw,
                                                   const SamplingParams& p, const History& h = {},
                                                   const std::vector<bool>* allowed = nullptr) {
  const std::vector<double> x = processed_logits(raw, p, h, allowed);
  const auto n = static_cast<std::int32_t>(x.size());
  std::map<std::int32_t, double> out;
  if (p.temperature == 0.0f) {
    std::int32_t best = 0;
    for (std::int32_t i = 1; i < n; ++i) {
      if (x[static_cast<std::size_t>(i)] > x[static_cast<std::size_t>(best)]) {
        best = i;
      }
    }
    out[best] = 1.0;
    return out;
  }
  // Survivors as (id, probability), renormalised after each filter.
  std::vector<std::pair<std::int32_t, double>> s;
  double max = -std::numeric_limits<double>::infinity();
  for (const double v : x) {
    max = std::max(max, v);
  }
  for (std::int32_t i = 0; i < n; ++i) {
    const double v = x[static_cast<std::size_t>(i)];
    if (std::isfinite(v)) {
      s.emplace_back(i, std::exp((v - max) / p.temperature));
    }
  }
  const auto normalise = [&] {
    double z = 0.0;
    for (const auto& e : s) {
      z += e.second;
    }
    for (auto& e : s) {
      e.second /= z;
    }
  };
  const auto by_probability = [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  normalise();
  if (p.top_k > 0 && p.top_k < static_cast<int>(s.size())) {
    std::sort(s.begin(), s.end(), by_probability);
    const double kth = s[static_cast<std::size_t>(p.top_k) - 1].second;
    std::erase_if(s, [&](const auto& e) { return e.second < kth; });
    normalise();
  }
  if (p.top_p < 1.0f) {
    std::sort(s.begin(), s.end(), by_probability);
    double before = 0.0;
    std::size_t keep = 0;
    while (keep < s.size() && before < p.top_p) {
      before += s[keep++].second;
    }
    s.resize(keep);
    normalise();
  }
  if (p.min_p > 0.0f) {
    double top = 0.0;
    for (const auto& e : s) {
      top = std::max(top, e.second);
    }
    std::erase_if(s, [&](const auto& e) { return e.second < p.min_p * top; });
    normalise();
  }
  if (p.typical_p < 1.0f) {
    double entropy = 0.0;
    for (const auto& e : s) {
      entropy -= e.second * std::log(e.second);
    }
    std::sort(s.begin(), s.end(), [&](const auto& a, const auto& b) {
      const double da = std::abs(-std::log(a.second) - entropy);
      const double db = std::abs(-std::log(b.second) - entropy);
      return da < db || (da == db && a.first < b.first);
    });
    double before = 0.0;
    std::size_t keep = 0;
    while (keep < s.size() && before < p.typical_p) {
      before += s[keep++].second;
    }
    s.resize(keep);
    normalise();
  }
  for (const auto& e : s) {
    out[e.first] = e.second;
  }
  return out;
}

inline std::vector<double> log_softmax(const std::vector<float>& raw,
                                       const std::vector<bool>* allowed = nullptr) {
  double max = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (!allowed || (*allowed)[i]) {
      max = std::max(max, static_cast<double>(raw[i]));
    }
  }
  double z = 0.0;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (!allowed || (*allowed)[i]) {
      z += std::exp(raw[i] - max);
    }
  }
  std::vector<double> out(raw.size(), -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (!allowed || (*allowed)[i]) {
      out[i] = raw[i] - max - std::log(z);
    }
  }
  return out;
}

}  // namespace weft::sampling::reference
