// Each method against the brute-force reference: the fast sampler's distribution() must keep
// exactly the reference's tokens with the same probabilities.

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "runtime/sampling/sequence_sampler.hpp"
#include "tests/runtime/sampling/reference_sampler.hpp"

namespace weft::sampling {
namespace {

std::vector<float> random_logits(std::size_t n, std::uint32_t seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) {
    v = normal(rng);
  }
  return x;
}

void expect_matches_reference(const std::vector<float>& logits, const SamplingParams& p,
                              const reference::History& h = {},
                              const std::vector<bool>* allowed = nullptr) {
  auto expected = reference::distribution(logits, p, h, allowed);
  // The fast sampler works in float: a token whose weight underflows (e.g. bias -100) has
  // probability 0 there and below 1e-30 here.
  std::erase_if(expected, [](const auto& e) { return e.second < 1e-30; });
  std::vector<std::uint32_t> mask;
  if (allowed) {
    mask.assign((logits.size() + 31) / 32, 0u);
    for (std::size_t i = 0; i < logits.size(); ++i) {
      if ((*allowed)[i]) {
        mask[i / 32] |= 1u << (i % 32);
      }
    }
  }
  SequenceSampler sampler(p, h.prompt, 1);
  for (const auto t : h.output) {
    sampler.accept(t);
  }
  std::vector<float> row = logits;
  auto got = sampler.distribution(row, allowed ? mask.data() : nullptr);
  ASSERT_TRUE(got.ok()) << got.error().what();
  std::map<std::int32_t, double> actual;
  double total = 0.0;
  for (const auto& t : *got) {
    actual[t.id] = t.logprob;
    total += t.logprob;
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [id, prob] : expected) {
    ASSERT_TRUE(actual.count(id)) << "token " << id << " missing";
    EXPECT_NEAR(actual[id], prob, 2e-6 + 1e-5 * prob) << "token " << id;
  }
}

struct Case {
  const char* name;
  SamplingParams params;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const auto add = [&](const char* name, auto&& set) {
    SamplingParams p;
    set(p);
    out.push_back({name, p});
  };
  add("temperature", [](SamplingParams& p) { p.temperature = 0.7f; });
  add("top_k_small", [](SamplingParams& p) { p.top_k = 5; });
  add("top_k_large", [](SamplingParams& p) { p.top_k = 300; });  // selection, not the heap
  add("top_p", [](SamplingParams& p) { p.top_p = 0.83f; });
  add("top_p_small", [](SamplingParams& p) { p.top_p = 0.05f; });
  add("top_p_hot", [](SamplingParams& p) {
    p.top_p = 0.6f;
    p.temperature = 2.5f;
  });
  add("min_p", [](SamplingParams& p) { p.min_p = 0.07f; });
  add("typical_p", [](SamplingParams& p) { p.typical_p = 0.71f; });
  add("top_k_then_top_p", [](SamplingParams& p) {
    p.top_k = 40;
    p.top_p = 0.77f;
  });
  add("all_truncations", [](SamplingParams& p) {
    p.temperature = 1.3f;
    p.top_k = 200;
    p.top_p = 0.93f;
    p.min_p = 0.01f;
    p.typical_p = 0.8f;
  });
  add("min_p_and_top_p", [](SamplingParams& p) {
    p.top_p = 0.97f;
    p.min_p = 0.2f;
  });
  add("greedy", [](SamplingParams& p) { p.temperature = 0.0f; });
  return out;
}

TEST(SamplingDistribution, EachMethodMatchesBruteForce) {
  for (const auto& c : cases()) {
    for (std::uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(std::string(c.name) + " seed " + std::to_string(seed));
      expect_matches_reference(random_logits(1000 + seed * 7, seed), c.params);
    }
  }
}

TEST(SamplingDistribution, TopPOverAFlatDistribution) {
  // The tail top-p drops spreads over most of the vocabulary: the sampler's first, tight
  // candidate floor falls short and it must fall back to the safe one.
  SamplingParams p;
  p.top_p = 0.9f;
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    expect_matches_reference(random_logits(5000, seed, 0.05f), p);
  }
  p.min_p = 0.97f;
  expect_matches_reference(random_logits(5000, 4, 0.05f), p);
}

TEST(SamplingDistribution, TopPKeepsSmallestSetReachingP) {
  // Probabilities 0.4, 0.3, 0.2, 0.1 (as logits): p = 0.7 needs exactly the first two,
  // p = 0.71 the first three.
  const std::vector<float> logits = {std::log(0.2f), std::log(0.4f), std::log(0.1f),
                                     std::log(0.3f)};
  SamplingParams p;
  p.top_p = 0.69f;
  expect_matches_reference(logits, p);
  p.top_p = 0.71f;
  expect_matches_reference(logits, p);
  SequenceSampler sampler(p, {}, 0);
  std::vector<float> row = logits;
  EXPECT_EQ(sampler.distribution(row)->size(), 3u);
}

TEST(SamplingDistribution, TopKKeepsTiesAtTheEdge) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.0f, 2.0f, 0.5f};
  SamplingParams p;
  p.top_k = 2;  // 3.0 and the three 2.0s
  SequenceSampler sampler(p, {}, 0);
  std::vector<float> row = logits;
  EXPECT_EQ(sampler.distribution(row)->size(), 4u);
  expect_matches_reference(logits, p);
}

TEST(SamplingDistribution, MinPThresholdIsRelativeToTheMostLikely) {
  // p = 0.5, 0.25, 0.15, 0.1: min_p = 0.3 keeps p >= 0.15.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.15f) + 1e-4f,
                                     std::log(0.1f)};
  SamplingParams p;
  p.min_p = 0.3f;
  SequenceSampler sampler(p, {}, 0);
  std::vector<float> row = logits;
  EXPECT_EQ(sampler.distribution(row)->size(), 3u);
  expect_matches_reference(logits, p);
}

TEST(SamplingDistribution, PenaltiesFollowHfAndOpenAiFormulas) {
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.6f;
  p.frequency_penalty = -0.4f;
  p.logit_bias = {{3, 2.5f}, {10, -100.0f}, {17, 4.0f}};
  reference::History h;
  h.prompt = {1, 2, 3, 3, 50, 60};
  h.output = {2, 7, 7, 7, 60, 99, 10};
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    expect_matches_reference(random_logits(128, seed), p, h);
  }
  p.temperature = 0.0f;
  expect_matches_reference(random_logits(128, 9), p, h);
}

TEST(SamplingDistribution, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  // Token 0 (logit 3, seen) becomes 1.5 < token 1 (2.0); token 2 (-1, seen) becomes -2.
  SequenceSampler sampler(p, std::vector<std::int32_t>{0, 2}, 0);
  std::vector<float> row = {3.0f, 2.0f, -1.0f};
  EXPECT_EQ(sampler.sample(row).id, 1);
  SamplingParams q = p;
  q.repetition_penalty = 1.4f;  // 3 / 1.4 = 2.14 > 2: token 0 stays first
  SequenceSampler mild(q, std::vector<std::int32_t>{0}, 0);
  row = {3.0f, 2.0f, -1.0f};
  EXPECT_EQ(mild.sample(row).id, 0);
}

TEST(SamplingDistribution, FrequencyPenaltyCountsOutputRepeats) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.frequency_penalty = 0.5f;
  SequenceSampler sampler(p, std::vector<std::int32_t>{1, 1, 1}, 0);  // prompt is not counted
  std::vector<float> row = {1.0f, 1.9f};
  EXPECT_EQ(sampler.sample(row).id, 1);
  sampler.accept(1);  // 1 has now been output twice: 1.9 - 1.0 < 1.0
  row = {1.0f, 1.9f};
  EXPECT_EQ(sampler.sample(row).id, 0);
}

TEST(SamplingDistribution, BitmaskRestrictsEveryMethod) {
  const auto logits = random_logits(300, 5);
  std::vector<bool> allowed(300, false);
  for (std::size_t i = 0; i < 300; i += 7) {
    allowed[i] = true;
  }
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    expect_matches_reference(logits, c.params, {}, &allowed);
  }
}

}  // namespace
}  // namespace weft::sampling
