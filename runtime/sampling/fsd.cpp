#include "runtime/sampling/fsd.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/sampling/philox.hpp"
#include "runtime/sampling/truncation.hpp"

namespace weft::sampling {

std::size_t AntiLm::ContextHash::operator()(const std::vector<std::int32_t>& key) const noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the ids
  for (std::int32_t t : key) {
    h ^= static_cast<std::uint32_t>(t);
    h *= 0x100000001b3ull;
  }
  return static_cast<std::size_t>(h);
}

AntiLm::AntiLm(int n, float beta, std::span<const std::int32_t> prompt)
    : n_(std::max(1, n)), beta_(beta), orders_(static_cast<std::size_t>(std::max(1, n))) {
  tokens_.reserve(prompt.size());
  for (std::int32_t t : prompt)
    push(t);
}

void AntiLm::push(std::int32_t token) {
  // The token follows the last i tokens, for every order i the sequence is long enough for.
  const int have = static_cast<int>(tokens_.size());
  for (int i = 0; i < n_ && i <= have; ++i) {
    std::vector<std::int32_t> context(tokens_.end() - i, tokens_.end());
    Followers& f = orders_[static_cast<std::size_t>(i)][std::move(context)];
    ++f.counts[token];
    ++f.total;
  }
  tokens_.push_back(token);
}

double AntiLm::penalty(std::int32_t token) const {
  if (!active()) return 0.0;
  double score = 0.0;
  double remaining = 1.0;
  for (int i = n_ - 1; i >= 0; --i) {
    const std::vector<std::int32_t> context(tokens_.end() - i, tokens_.end());
    const Table& table = orders_[static_cast<std::size_t>(i)];
    auto f = table.find(context);
    if (f == table.end()) continue;
    auto c = f->second.counts.find(token);
    if (c == f->second.counts.end()) continue;
    const double count = c->second;
    if (i == 0) {
      score += remaining * count / f->second.total;
    } else {
      score += remaining * beta_ * count / (f->second.total + 1);
    }
    remaining -= remaining * beta_;
  }
  return score;
}

namespace {

// Most likely first, lower id on ties.
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.weight != b.weight ? a.weight > b.weight : a.id < b.id;
}

}  // namespace

std::vector<FsdScore> fsd_scores(std::vector<Candidate>& c, const AntiLm& anti_lm,
                                 const SamplingParams& p) {
  const std::size_t pool =
      std::min(c.size(), static_cast<std::size_t>(std::max(1, p.fsd_pool_size)));
  std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(pool), c.end(), more_likely);
  double mass = 0.0;
  for (std::size_t i = 0; i < pool; ++i)
    mass += c[i].weight;
  const std::size_t k = std::min(pool, static_cast<std::size_t>(std::max(1, p.fsd_k)));
  std::vector<FsdScore> out;
  out.reserve(k);
  const double alpha = p.fsd_alpha;
  for (std::size_t i = 0; i < k; ++i) {
    FsdScore s;
    s.id = c[i].id;
    s.p_theta = mass > 0.0 ? c[i].weight / mass : (i == 0 ? 1.0 : 0.0);
    s.p_omega = anti_lm.penalty(s.id);
    // Inferflow leaves P_theta as it is while the anti-LM is inactive.
    s.score = anti_lm.active() ? (1.0 - alpha) * s.p_theta - alpha * s.p_omega : s.p_theta;
    out.push_back(s);
  }
  return out;
}

std::int32_t fsd_choose(std::vector<Candidate>& c, const AntiLm& anti_lm, const SamplingParams& p) {
  const std::vector<FsdScore> scores = fsd_scores(c, anti_lm, p);
  const FsdScore* best = &scores.front();
  for (const FsdScore& s : scores) {
    if (s.score > best->score || (s.score == best->score && s.id < best->id)) best = &s;
  }
  return best->id;
}

bool fsd_samples_at(const SamplingParams& p, std::uint64_t seed, std::uint32_t sample_index,
                    int step) {
  if (p.fsd != Fsd::kRandomized || step >= p.fsd_random_steps) return false;
  // Counter word 3 = 1: a stream apart from the draws' (philox_uniform uses 0 there).
  const PhiloxKey key = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const auto s = static_cast<std::uint64_t>(step);
  const PhiloxCounter out = philox4x32_10(
      {static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s >> 32), sample_index, 1u}, key);
  const std::uint64_t bits = (static_cast<std::uint64_t>(out[0]) << 32 | out[1]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53 < static_cast<double>(p.fsd_random_prob);
}

float fsd_temperature(const SamplingParams& p) {
  return std::max(p.temperature, 0.001f);
}

}  // namespace weft::sampling
