#pragma once
// Frustratingly Simple Decoding (FSD; Yang et al. 2023, "A Frustratingly Simple Decoding Method
// for Neural Text Generation") and its randomized variant, two of Inferflow's decoding
// strategies (seed 000, section 6), with Inferflow's definitions and defaults:
//
//   FSD(y) = (1 - alpha) * P_theta(y) - alpha * P_omega(y)
//
// P_theta is the model's distribution over its `fsd_pool_size` most likely tokens (a softmax
// over that pool at the request's temperature, at least 0.001); P_omega is an anti-LM, an
// n-gram model of the sequence so far (prompt + output) built on the fly (AntiLm below). Among
// the `fsd_k` tokens most likely under P_theta, the one with the largest FSD score is chosen.
// Randomized FSD draws the token the request's ordinary sampling would (temperature, top-k,
// top-p, ...) instead, with probability `fsd_random_prob` at each of the first
// `fsd_random_steps` output tokens; every other step is FSD.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/sampling/sampling_params.hpp"

namespace weft::sampling {

struct Candidate;  // runtime/sampling/truncation.hpp

// Inferflow's anti-LM (its class NGram): for each order i in [0, n), the tokens that followed
// each context of i tokens in the sequence. The penalty of a candidate y, with `remaining`
// starting at 1, visits the orders i = n-1 down to 0 with the context c of the last i tokens:
// where y followed c at least once (count(c, y) of the total(c) tokens that followed c),
//   i > 0: score += remaining * beta * count(c, y) / (total(c) + 1)
//   i = 0: score += remaining * count(y) / (number of tokens)
// and then remaining *= (1 - beta); orders where y never followed c add nothing and leave
// `remaining` as it is. A sequence shorter than n - 1 tokens penalizes nothing.
class AntiLm {
 public:
  AntiLm(int n, float beta, std::span<const std::int32_t> prompt);

  void push(std::int32_t token);
  // P_omega(token): 0 when inactive() or the token never appeared.
  double penalty(std::int32_t token) const;
  // False while the sequence is shorter than n - 1 tokens (Inferflow then scores FSD by
  // P_theta alone).
  bool active() const noexcept { return static_cast<int>(tokens_.size()) >= n_ - 1; }
  int size() const noexcept { return static_cast<int>(tokens_.size()); }

 private:
  struct ContextHash {
    std::size_t operator()(const std::vector<std::int32_t>& key) const noexcept;
  };
  struct Followers {
    std::unordered_map<std::int32_t, int> counts;
    int total = 0;
  };
  using Table = std::unordered_map<std::vector<std::int32_t>, Followers, ContextHash>;

  int n_;
  double beta_;
  std::vector<std::int32_t> tokens_;
  std::vector<Table> orders_;  // orders_[i]: contexts of i tokens
};

// The FSD choice among `c`, which holds (id, weight = exp((logit - max) / T)) for at least the
// fsd_pool_size most likely tokens (ties at the edge may add more). The pool is the first
// fsd_pool_size of them by weight (lower id on ties), P_theta their weights renormalised over
// the pool; the fsd_k most likely of the pool are scored, and the highest score wins (lower id
// on ties). Reorders `c`. `c` must not be empty.
std::int32_t fsd_choose(std::vector<Candidate>& c, const AntiLm& anti_lm, const SamplingParams& p);

// The FSD score of each of the fsd_k scored tokens, in the order fsd_choose ranks P_theta
// (for tests and debugging): (id, P_theta, P_omega, score).
struct FsdScore {
  std::int32_t id;
  double p_theta;
  double p_omega;
  double score;
};
std::vector<FsdScore> fsd_scores(std::vector<Candidate>& c, const AntiLm& anti_lm,
                                 const SamplingParams& p);

// Randomized FSD: whether the output token at `step` (0-based) is drawn by ordinary sampling
// instead of FSD: step < fsd_random_steps and a uniform from the request's Philox stream
// (a counter of its own, independent of the draw's) falls below fsd_random_prob. Always false
// for plain FSD.
bool fsd_samples_at(const SamplingParams& p, std::uint64_t seed, std::uint32_t sample_index,
                    int step);

// FSD's temperature: the request's, at least 0.001 (Inferflow's floor; 0 is not greedy here).
float fsd_temperature(const SamplingParams& p);

}  // namespace weft::sampling
