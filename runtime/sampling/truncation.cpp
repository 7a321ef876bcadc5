#include "runtime/sampling/truncation.hpp"

#include <algorithm>
#include <cmath>

namespace weft::sampling {
namespace {

bool before(const Candidate& a, const Candidate& b) {
  return a.key < b.key || (a.key == b.key && a.id < b.id);
}

double weight_sum(std::span<const Candidate> c) {
  double sum = 0.0;
  for (const auto& e : c) {
    sum += e.weight;
  }
  return sum;
}

// Most likely first, lower id on ties.
void sort_by_weight(std::vector<Candidate>& c) {
  std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.weight > b.weight || (a.weight == b.weight && a.id < b.id);
  });
}

// Tail-free sampling (Phillips 2019, "Tail-free sampling"), as llama.cpp computes it: with
// the probabilities sorted, most likely first, the absolute second differences
// |(p_i - p_i+1) - (p_i+1 - p_i+2)| are normalised to sum to 1 (when their sum exceeds
// 1e-6) and the first i tokens are kept, i >= 1 the first index where their running sum
// exceeds z.
void tail_free(std::vector<Candidate>& c, float z) {
  if (c.size() <= 2) {
    return;
  }
  sort_by_weight(c);
  const double mass = weight_sum(c);
  const std::size_t n = c.size();
  std::vector<double> second(n - 2);
  double sum = 0.0;
  for (std::size_t i = 0; i + 2 < n; ++i) {
    const double p0 = c[i].weight / mass, p1 = c[i + 1].weight / mass, p2 = c[i + 2].weight / mass;
    second[i] = std::abs((p0 - p1) - (p1 - p2));
    sum += second[i];
  }
  if (sum > 1e-6) {
    for (auto& d : second) {
      d /= sum;
    }
  }
  double running = 0.0;
  for (std::size_t i = 0; i < second.size(); ++i) {
    running += second[i];
    if (running > z && i >= 1) {
      c.resize(i);
      return;
    }
  }
}

}  // namespace

std::size_t select_mass_prefix(std::span<Candidate> c, double target) {
  // Invariant: c[0, lo) is in the prefix with mass `taken`; the boundary lies in c[lo, hi).
  std::size_t lo = 0, hi = c.size();
  double taken = 0.0;
  while (hi - lo > 16) {
    // Median of three for the pivot, moved to c[lo].
    const std::size_t mid = lo + (hi - lo) / 2;
    if (before(c[mid], c[lo])) {
      std::swap(c[mid], c[lo]);
    }
    if (before(c[hi - 1], c[mid])) {
      std::swap(c[hi - 1], c[mid]);
    }
    if (before(c[mid], c[lo])) {
      std::swap(c[mid], c[lo]);
    }
    std::swap(c[lo], c[mid]);
    const Candidate pivot = c[lo];
    const auto split = std::partition(c.begin() + static_cast<std::ptrdiff_t>(lo) + 1,
                                      c.begin() + static_cast<std::ptrdiff_t>(hi),
                                      [&](const Candidate& e) { return before(e, pivot); });
    const auto p = static_cast<std::size_t>(split - c.begin()) - 1;
    std::swap(c[lo], c[p]);  // c[lo, p) precede the pivot, now at p; c(p, hi) follow it
    const double upper = weight_sum(c.subspan(lo, p - lo));
    if (taken + upper >= target) {
      hi = p;
    } else if (taken + upper + pivot.weight >= target) {
      return p + 1;
    } else {
      taken += upper + pivot.weight;
      lo = p + 1;
    }
  }
  std::sort(c.begin() + static_cast<std::ptrdiff_t>(lo),
            c.begin() + static_cast<std::ptrdiff_t>(hi), before);
  for (std::size_t i = lo; i < hi; ++i) {
    taken += c[i].weight;
    if (taken >= target) {
      return i + 1;
    }
  }
  return hi == c.size() ? c.size() : hi;
}

void truncate(std::vector<Candidate>& c, double total_weight, const SamplingParams& params) {
  if (c.empty()) {
    return;
  }
  if (params.tfs_z < 1.0f) {
    tail_free(c, params.tfs_z);
    total_weight = weight_sum(c);  // the filters below act on the renormalised survivors
  }
  // Top-p (Holtzman et al. 2020, "The curious case of neural text degeneration"): the shortest
  // most-likely-first prefix with probability >= top_p, as HF's TopPLogitsWarper and vLLM keep
  // (a token stays iff the mass strictly before it is < top_p).
  if (params.top_p < 1.0f) {
    for (auto& e : c) {
      e.key = -e.weight;
    }
    c.resize(std::max<std::size_t>(1, select_mass_prefix(c, params.top_p * total_weight)));
  }
  // Min-p (Nguyen et al. 2024): keep p >= min_p * p_max. A ratio of probabilities, so the
  // renormalisation after top-p does not change it.
  if (params.min_p > 0.0f) {
    float max_weight = 0.0f;
    for (const auto& e : c) {
      max_weight = std::max(max_weight, e.weight);
    }
    const float threshold = params.min_p * max_weight;
    std::erase_if(c, [&](const Candidate& e) { return e.weight < threshold; });
  }
  // Typical-p (Meister et al. 2023, "Locally typical sampling"): rank tokens by how far their
  // information content -log q is from the entropy H of the (renormalised) distribution, and
  // keep the shortest such prefix with probability >= typical_p, as HF's TypicalLogitsWarper.
  if (params.typical_p < 1.0f && c.size() > 1) {
    const double mass = weight_sum(c);
    double entropy = 0.0;
    for (const auto& e : c) {
      if (e.weight > 0.0f) {
        const double q = e.weight / mass;
        entropy -= q * std::log(q);
      }
    }
    for (auto& e : c) {
      const double surprise = e.weight > 0.0f ? -std::log(e.weight / mass) : HUGE_VAL;
      e.key = static_cast<float>(std::abs(surprise - entropy));
    }
    c.resize(std::max<std::size_t>(1, select_mass_prefix(c, params.typical_p * mass)));
  }
}

void mirostat_truncate(std::vector<Candidate>& c, int mode, double mu, int vocab) {
  if (c.empty()) {
    return;
  }
  sort_by_weight(c);
  const double mass = weight_sum(c);
  std::size_t keep = c.size();
  if (mode == 1) {
    constexpr std::size_t kZipfTokens = 100;
    double ti_bi = 0.0, ti_sq = 0.0;
    for (std::size_t i = 0; i + 1 < std::min(kZipfTokens, c.size()); ++i) {
      const double t = std::log(static_cast<double>(i + 2) / static_cast<double>(i + 1));
      const double b = std::log(static_cast<double>(c[i].weight) / c[i + 1].weight);
      ti_bi += t * b;
      ti_sq += t * t;
    }
    if (ti_sq > 0.0) {
      const double s = ti_bi / ti_sq;
      const double e = s - 1.0;
      const double k = std::pow(e * std::exp2(mu) / (1.0 - std::pow(vocab, -e)), 1.0 / s);
      // A flat head (s = 1 makes 0 / 0) or a rising one gives no usable k: keep every token.
      if (std::isfinite(k) && k >= 0.0 && k < static_cast<double>(c.size())) {
        keep = std::max<std::size_t>(1, static_cast<std::size_t>(k));
      }
    }
  } else {
    const double floor = std::exp2(-mu) * mass;  // -log2(w / mass) <= mu
    keep = 1;
    while (keep < c.size() && c[keep].weight >= floor) {
      ++keep;
    }
  }
  c.resize(keep);
}

}  // namespace weft::sampling
