#pragma once
// Beam search over one request's beams: the policy alone, as a plain class without threads or
// KV (the scheduler actor forks the beams' sequences and their KV pages as it decides; see
// docs/sampling.md#beam-search).
//
// A hypothesis is the output tokens y_1..y_L (L >= 1, a final stop token included) with the
// score
//     score = (log p(y_1) + ... + log p(y_L)) / L^length_penalty
// where log p is the log-softmax of the beam's row after the bitmask, logit_bias and penalties
// (temperature 1, no truncation). Search, with W = beam_width:
//   - one live beam, empty, at first;
//   - each step, every (live beam b, token t) is a candidate with the sum of logprobs
//     cum(b) + log p(t | b); they are ranked by that sum (higher first; then lower b, then
//     lower t). Walking them in rank order r = 0, 1, ...: a stop token with r < W ends a
//     finished hypothesis (a stop token ranked lower is dropped, as in Hugging Face); any other
//     token makes a live beam of the next step, until there are W;
//   - a live beam that reaches max_tokens is finished too (by length);
//   - the W best finished hypotheses are kept (by score; the earlier found first on ties);
//   - the search ends when no beam is live, or when W are finished and no live beam can still
//     beat the worst of them: its sum can only fall, so its best possible score is
//     max(cum / (L + 1)^lp, cum / max_tokens^lp) (score is monotone in the length).
// The result is the n best finished hypotheses.
//
// When W is at least the number of live prefixes the search could ever hold, this is
// exhaustive: it returns the best-scoring sequence of all (tests/runtime/sampling/
// beam_search_test.cpp checks that against a brute-force enumeration).

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sampling_types.hpp"

namespace weft::sampling {

class BeamSearch {
 public:
  struct Config {
    int width = 4;
    float length_penalty = 1.0f;
    int max_tokens = 16;
    std::vector<std::int32_t> stop_ids;  // end a hypothesis (EOS, stop_token_ids)
  };
  struct Beam {
    std::vector<std::int32_t> tokens;
    std::vector<float> logprobs;  // per token
    double sum = 0.0;             // of logprobs
  };
  struct Hypothesis {
    Beam beam;
    double score = 0.0;
    bool stopped = false;  // ended by a stop token (else by max_tokens)
  };
  // Beam `parent` (an index into live() before step()) continued by `token`.
  struct Extension {
    int parent = 0;
    std::int32_t token = 0;
    float logprob = 0.0f;
  };

  explicit BeamSearch(Config config);

  const Config& config() const noexcept { return config_; }
  const std::vector<Beam>& live() const noexcept { return live_; }
  const std::vector<Hypothesis>& finished() const noexcept { return finished_; }
  bool done() const noexcept { return done_; }

  // How many of a row's most likely tokens step() needs per beam so that the walk sees every
  // candidate it could take: W non-stop tokens even when stop tokens rank above them, so
  // W + the number of stop ids. A row may hold more, or every token.
  int candidates_per_row() const noexcept {
    return config_.width + static_cast<int>(config_.stop_ids.size());
  }

  // One step. rows[i] holds (token, logprob) for at least the candidates_per_row() most likely
  // tokens of live()[i] (any order; -inf entries are impossible tokens). Returns how the next live
  // beams (live() after the call, in this order) came from the current ones; finished hypotheses
  // are recorded. Throws weft::Error (kInvalidArgument) on a row count that does not match live()
  // or after done().
  std::vector<Extension> step(std::span<const std::vector<TokenLogprob>> rows);

  // The n best finished hypotheses, best first (n > finished().size() gives them all).
  std::vector<Hypothesis> best(int n) const;

  // The score of a sum of logprobs over `length` tokens.
  double score(double sum, int length) const;

 private:
  void add_finished(Hypothesis h);
  bool can_improve() const;

  Config config_;
  std::vector<Beam> live_;
  std::vector<Hypothesis> finished_;  // best first, at most W
  bool done_ = false;
};

}  // namespace weft::sampling
