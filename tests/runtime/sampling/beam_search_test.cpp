// Beam search (runtime/sampling/beam_search.hpp): a case worked by hand, and a brute-force
// enumeration of every sequence over a tiny vocabulary proving that a beam wide enough to be
// exhaustive returns the best sequence under the documented length penalty, early stop
// included.

#include "runtime/sampling/beam_search.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "runtime/sampling/sampling_params.hpp"

namespace weft::sampling {
namespace {

using Prefix = std::vector<std::int32_t>;
// A toy model: the next-token log-probabilities after a prefix.
using Model = std::function<std::vector<double>(const Prefix&)>;

std::vector<TokenLogprob> row_of(const std::vector<double>& logprobs) {
  std::vector<TokenLogprob> row;
  for (std::size_t t = 0; t < logprobs.size(); ++t)
    row.push_back({static_cast<std::int32_t>(t), static_cast<float>(logprobs[t])});
  return row;
}

BeamSearch::Hypothesis run(BeamSearch& search, const Model& model) {
  while (!search.done()) {
    std::vector<std::vector<TokenLogprob>> rows;
    for (const auto& beam : search.live())
      rows.push_back(row_of(model(beam.tokens)));
    search.step(rows);
  }
  const auto best = search.best(1);
  EXPECT_EQ(best.size(), 1u);
  return best.empty() ? BeamSearch::Hypothesis{} : best.front();
}

// A random model over `vocab` tokens: log-softmax of normal logits seeded by the prefix.
Model random_model(int vocab, std::uint32_t seed, double spread) {
  return [=](const Prefix& prefix) {
    std::uint32_t h = seed;
    for (std::int32_t t : prefix)
      h = h * 1000003u + static_cast<std::uint32_t>(t) + 7u;
    std::mt19937 rng(h);
    std::normal_distribution<double> normal(0.0, spread);
    std::vector<double> x(static_cast<std::size_t>(vocab));
    double max = -INFINITY;
    for (auto& v : x) {
      v = normal(rng);
      max = std::max(max, v);
    }
    double z = 0.0;
    for (double v : x)
      z += std::exp(v - max);
    for (auto& v : x)
      v = v - max - std::log(z);
    // Rounded as the search sees them (float logprobs).
    for (auto& v : x)
      v = static_cast<float>(v);
    return x;
  };
}

struct Scored {
  Prefix tokens;
  double score;
};

// Every complete sequence: ends with a stop token, or reaches max_tokens without one.
void enumerate(const Model& model, const std::vector<std::int32_t>& stops, int max_tokens,
               double length_penalty, Prefix& prefix, double sum, std::vector<Scored>& out) {
  const std::vector<double> lp = model(prefix);
  for (std::size_t t = 0; t < lp.size(); ++t) {
    prefix.push_back(static_cast<std::int32_t>(t));
    // Summed in the order the search sums (float logprobs added to a double).
    const double s = sum + static_cast<double>(static_cast<float>(lp[t]));
    const bool stop =
        std::find(stops.begin(), stops.end(), static_cast<std::int32_t>(t)) != stops.end();
    const int length = static_cast<int>(prefix.size());
    if (stop || length == max_tokens) {
      out.push_back({prefix, s / std::pow(static_cast<double>(length), length_penalty)});
    } else {
      enumerate(model, stops, max_tokens, length_penalty, prefix, s, out);
    }
    prefix.pop_back();
  }
}

TEST(BeamSearch, WorkedByHand) {
  // Vocabulary {0: stop, 1, 2}, max 2 tokens, length penalty 0 (plain sum of logprobs).
  // After the empty prefix: 1 -> 0.5, 2 -> 0.4, stop -> 0.1. After 1: 1 -> 0.3, 2 -> 0.3,
  // stop -> 0.4. After 2: 1 -> 0.9, ... Greedy takes 1 (0.5) then stop (0.4): 0.20. Beam 2
  // keeps 1 and 2 and finds 2 1: 0.4 * 0.9 = 0.36.
  const Model model = [](const Prefix& p) {
    std::vector<double> probs;
    if (p.empty()) {
      probs = {0.1, 0.5, 0.4};
    } else if (p == Prefix{1}) {
      probs = {0.4, 0.3, 0.3};
    } else {
      probs = {0.05, 0.9, 0.05};
    }
    std::vector<double> lp;
    for (double q : probs)
      lp.push_back(std::log(q));
    return lp;
  };
  BeamSearch greedy({1, 0.0f, 2, {0}});
  const auto g = run(greedy, model);
  EXPECT_EQ(g.beam.tokens, (Prefix{1, 0}));
  EXPECT_NEAR(std::exp(g.score), 0.20, 1e-6);
  EXPECT_TRUE(g.stopped);
  BeamSearch two({2, 0.0f, 2, {0}});
  const auto b = run(two, model);
  EXPECT_EQ(b.beam.tokens, (Prefix{2, 1}));
  EXPECT_NEAR(std::exp(b.score), 0.36, 1e-6);
  EXPECT_FALSE(b.stopped);  // by length
  // Length penalty 1 on the same model: "stop" alone (length 1) scores log 0.1 = -2.30,
  // 2 1 scores log(0.36) / 2 = -0.51, 1 stop log(0.2) / 2 = -0.80: still 2 1.
  BeamSearch normalised({2, 1.0f, 2, {0}});
  const auto n = run(normalised, model);
  EXPECT_EQ(n.beam.tokens, (Prefix{2, 1}));
  EXPECT_NEAR(n.score, std::log(0.36) / 2, 1e-6);
}

TEST(BeamSearch, ExhaustiveWidthFindsTheBruteForceBest) {
  // 4 tokens (0 stops), at most 4 output tokens: 3^3 live prefixes at the last step, so a
  // width of 3^3 * 4 keeps every candidate of every step. For each length penalty the search
  // (early stop included) must return exactly the brute-force ranking's best sequences.
  const std::vector<std::int32_t> stops = {0};
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    for (double lp : {-1.0, 0.0, 0.5, 1.0, 2.0}) {
      const Model model = random_model(4, seed, seed % 2 ? 1.0 : 3.0);
      std::vector<Scored> all;
      Prefix prefix;
      enumerate(model, stops, 4, lp, prefix, 0.0, all);
      std::stable_sort(all.begin(), all.end(),
                       [](const Scored& a, const Scored& b) { return a.score > b.score; });
      const int width = 27 * 4;
      BeamSearch search({width, static_cast<float>(lp), 4, stops});
      while (!search.done()) {
        std::vector<std::vector<TokenLogprob>> rows;
        for (const auto& beam : search.live())
          rows.push_back(row_of(model(beam.tokens)));
        search.step(rows);
      }
      const auto best = search.best(3);
      ASSERT_EQ(best.size(), 3u);
      for (int i = 0; i < 3; ++i) {
        EXPECT_NEAR(best[static_cast<std::size_t>(i)].score, all[static_cast<std::size_t>(i)].score,
                    1e-9)
            << "seed " << seed << " length_penalty " << lp << " rank " << i;
      }
      EXPECT_EQ(best[0].beam.tokens, all[0].tokens) << "seed " << seed << " lp " << lp;
      EXPECT_NEAR(best[0].beam.sum, all[0].score * std::pow(all[0].tokens.size(), lp), 1e-9);
    }
  }
}

TEST(BeamSearch, NarrowBeamsNeverBeatTheBruteForceBestAndOnlyTopRowsAreNeeded) {
  const std::vector<std::int32_t> stops = {0, 5};
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    const Model model = random_model(6, seed, 2.0);
    std::vector<Scored> all;
    Prefix prefix;
    enumerate(model, stops, 4, 1.0, prefix, 0.0, all);
    double best_all = -INFINITY;
    for (const auto& s : all)
      best_all = std::max(best_all, s.score);
    for (int width = 1; width <= 4; ++width) {
      BeamSearch full({width, 1.0f, 4, stops});
      BeamSearch top({width, 1.0f, 4, stops});
      const auto a = run(full, model);
      // The same search fed only candidates_per_row() most likely tokens of each row.
      while (!top.done()) {
        std::vector<std::vector<TokenLogprob>> rows;
        for (const auto& beam : top.live()) {
          auto row = row_of(model(beam.tokens));
          std::sort(row.begin(), row.end(), [](const TokenLogprob& x, const TokenLogprob& y) {
            return x.logprob != y.logprob ? x.logprob > y.logprob : x.id < y.id;
          });
          row.resize(static_cast<std::size_t>(top.candidates_per_row()));
          rows.push_back(row);
        }
        top.step(rows);
      }
      const auto b = top.best(1);
      ASSERT_EQ(b.size(), 1u);
      EXPECT_EQ(a.beam.tokens, b[0].beam.tokens) << "seed " << seed << " width " << width;
      EXPECT_LE(a.score, best_all + 1e-12);
    }
  }
}

TEST(BeamSearch, ParametersAreValidated) {
  SamplingParams p;
  p.beam_width = 4;
  p.n = 2;
  EXPECT_TRUE(validate(p, 10).ok());
  p.n = 5;
  EXPECT_NE(std::string(validate(p, 10).error().what()).find("n: 5 is more than beam_width 4"),
            std::string::npos);
  p.n = 1;
  p.top_k = 5;
  EXPECT_NE(std::string(validate(p, 10).error().what()).find("beam_width: cannot be combined"),
            std::string::npos);
  p.top_k = 0;
  p.beam_width = 17;
  EXPECT_NE(std::string(validate(p, 10).error().what()).find("beam_width"), std::string::npos);
  p.beam_width = 2;
  p.length_penalty = NAN;
  EXPECT_NE(std::string(validate(p, 10).error().what()).find("length_penalty"), std::string::npos);
}

}  // namespace
}  // namespace weft::sampling
