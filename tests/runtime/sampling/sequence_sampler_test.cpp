// SequenceSampler: seeded determinism, the empirical distribution of draws, greedy, the
// bitmask's failure modes, and reported logprobs.

#include "runtime/sampling/sequence_sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>

#include "tests/runtime/sampling/reference_sampler.hpp"

namespace weft::sampling {
namespace {

std::vector<float> random_logits(std::size_t n, std::uint32_t seed, float scale = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) {
    v = normal(rng);
  }
  return x;
}

SamplingParams hot() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  return p;
}

std::vector<std::int32_t> run(SequenceSampler& s, int steps, std::uint32_t logits_seed = 100) {
  std::vector<std::int32_t> out;
  for (int i = 0; i < steps; ++i) {
    auto row = random_logits(500, logits_seed + static_cast<std::uint32_t>(i));
    out.push_back(s.sample(row).id);
  }
  return out;
}

TEST(SequenceSampler, SameSeedSameTokens) {
  SequenceSampler a(hot(), {}, 1234), b(hot(), {}, 1234);
  EXPECT_EQ(run(a, 64), run(b, 64));
  SequenceSampler c(hot(), {}, 1235);
  SequenceSampler d(hot(), {}, 1234);
  EXPECT_NE(run(c, 64), run(d, 64));
}

TEST(SequenceSampler, SampleIndexGivesIndependentStreams) {
  SequenceSampler a(hot(), {}, 7, 0), b(hot(), {}, 7, 1);
  const auto ta = run(a, 64), tb = run(b, 64);
  EXPECT_NE(ta, tb);
  int same = 0;
  for (std::size_t i = 0; i < ta.size(); ++i) {
    same += ta[i] == tb[i];
  }
  EXPECT_LT(same, 32);  // 500 tokens at temperature 1: collisions are rare
}

TEST(SequenceSampler, IndependentOfInterleavingWithOtherSequences) {
  SequenceSampler alone(hot(), {}, 99);
  const auto expected = run(alone, 40);
  // The same sequence served between other sequences with other parameters and vocabularies,
  // as the sampler actor does with a batch.
  SequenceSampler seq(hot(), {}, 99);
  SamplingParams other = hot();
  other.top_k = 3;
  other.repetition_penalty = 1.2f;
  SequenceSampler noisy1(other, std::vector<std::int32_t>{1, 2, 3}, 99);
  SequenceSampler noisy2(hot(), {}, 5, 3);
  std::vector<std::int32_t> got;
  for (int i = 0; i < 40; ++i) {
    auto big = random_logits(70000, 9000 + static_cast<std::uint32_t>(i));
    noisy1.sample(big);
    auto row = random_logits(500, 100 + static_cast<std::uint32_t>(i));
    got.push_back(seq.sample(row).id);
    auto small = random_logits(17, 3);
    noisy2.sample(small);
    if (i % 3 == 0) {
      noisy2.accept(4);
    }
  }
  EXPECT_EQ(got, expected);
}

TEST(SequenceSampler, AcceptAdvancesTheStepLikeASample) {
  SequenceSampler a(hot(), {}, 31);
  const auto first = run(a, 2);
  SequenceSampler b(hot(), {}, 31);
  b.accept(first[0]);
  EXPECT_EQ(b.generated(), 1);
  auto row = random_logits(500, 101);
  EXPECT_EQ(b.sample(row).id, first[1]);
  EXPECT_EQ(b.generated(), 2);
}

TEST(SequenceSampler, GreedyIgnoresSeedAndTakesLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1;
  for (std::uint64_t seed : {0ull, 1ull, 77ull, ~0ull}) {
    SequenceSampler s(p, {}, seed, static_cast<int>(seed % 5));
    std::vector<float> row = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
    EXPECT_EQ(s.sample(row).id, 1);
  }
  const auto logits = random_logits(1000, 3);
  const auto best =
      static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SequenceSampler s(p, {}, 5);
  auto row = logits;
  EXPECT_EQ(s.sample(row).id, best);
}

TEST(SequenceSampler, GreedyTiesInALongRowGoToTheLowestId) {
  auto logits = random_logits(4000, 12);
  logits[2900] = 50.0f;
  logits[1234] = 50.0f;
  logits[3999] = 50.0f;
  SamplingParams p;
  p.temperature = 0.0f;
  SequenceSampler plain(p, {}, 1);
  auto row = logits;
  EXPECT_EQ(plain.sample(row).id, 1234);
  p.logit_bias = {{7, -1.0f}};  // a changed row takes the other path to the maximum
  SequenceSampler biased(p, {}, 1);
  row = logits;
  EXPECT_EQ(biased.sample(row).id, 1234);
}

TEST(SequenceSampler, TinyTemperatureApproachesGreedy) {
  for (float temperature : {1e-3f, 1e-20f, 1e-45f}) {  // the last is denormal: 1 / T is inf
    SamplingParams p;
    p.temperature = temperature;
    ASSERT_TRUE(validate(p, 5).ok());
    SequenceSampler s(p, {}, 3);
    std::vector<float> row = {0.5f, 2.0f, -1.0f, 1.99f, 1.9f};
    EXPECT_EQ(s.sample(row).id, 1) << temperature;
  }
}

// Pearson's chi-square over `draws` seeded draws against the reference distribution; tokens
// the reference excludes must never be drawn.
void expect_draws_match(const std::vector<float>& logits, const SamplingParams& p,
                        double critical) {
  const auto expected = reference::distribution(logits, p);
  SequenceSampler s(p, {}, 2024);
  std::map<std::int32_t, int> counts;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    auto row = logits;
    ++counts[s.sample(row).id];
  }
  double chi2 = 0.0;
  for (const auto& [id, prob] : expected) {
    const double e = prob * kDraws;
    const double o = counts.count(id) ? counts[id] : 0;
    chi2 += (o - e) * (o - e) / e;
  }
  for (const auto& [id, c] : counts) {
    EXPECT_TRUE(expected.count(id)) << "token " << id << " drawn " << c << " times";
  }
  EXPECT_LT(chi2, critical) << "degrees of freedom " << expected.size() - 1;
}

TEST(SequenceSampler, DrawsFollowTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.2f, 1.5f};
  SamplingParams p;
  p.temperature = 0.8f;
  expect_draws_match(logits, p, 24.32);  // df 7, p = 0.001
}

TEST(SequenceSampler, DrawsFollowTheTruncatedDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.2f, 1.5f};
  SamplingParams p;
  p.temperature = 1.2f;
  p.top_k = 6;
  p.top_p = 0.8f;
  const auto kept = reference::distribution(logits, p).size();
  ASSERT_GE(kept, 3u);
  ASSERT_LE(kept, 5u);
  expect_draws_match(logits, p, 18.47);  // df <= 4, p = 0.001
}

TEST(SequenceSampler, DrawsFromALargeVocabulary) {
  // The full-row path (no truncation) over 1000 tokens, binned by decile of probability.
  const auto logits = random_logits(1000, 11, 1.0f);
  SamplingParams p;
  const auto expected = reference::distribution(logits, p);
  SequenceSampler s(p, {}, 3);
  std::vector<double> bin_expected(10), bin_observed(10);
  std::vector<int> bin_of(1000);
  for (int i = 0; i < 1000; ++i) {
    bin_of[static_cast<std::size_t>(i)] = i / 100;
  }
  for (const auto& [id, prob] : expected) {
    bin_expected[static_cast<std::size_t>(bin_of[static_cast<std::size_t>(id)])] += prob * 20000;
  }
  for (int i = 0; i < 20000; ++i) {
    auto row = logits;
    ++bin_observed[static_cast<std::size_t>(bin_of[static_cast<std::size_t>(s.sample(row).id)])];
  }
  double chi2 = 0.0;
  for (std::size_t b = 0; b < 10; ++b) {
    chi2 +=
        (bin_observed[b] - bin_expected[b]) * (bin_observed[b] - bin_expected[b]) / bin_expected[b];
  }
  EXPECT_LT(chi2, 27.88);  // df 9, p = 0.001
}

TEST(SequenceSampler, BitmaskExcludesTokens) {
  const auto logits = random_logits(100, 8, 4.0f);
  std::vector<std::uint32_t> mask(4, 0u);
  for (const int id : {3, 40, 77, 99}) {
    mask[static_cast<std::size_t>(id / 32)] |= 1u << (id % 32);
  }
  SequenceSampler s(hot(), {}, 1);
  std::set<std::int32_t> drawn;
  for (int i = 0; i < 500; ++i) {
    auto row = logits;
    drawn.insert(s.sample(row, mask.data()).id);
  }
  for (const auto id : drawn) {
    EXPECT_TRUE(id == 3 || id == 40 || id == 77 || id == 99) << id;
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logit_bias = {{5, 100.0f}};  // a bias cannot bring back a masked token
  SequenceSampler g(greedy, {}, 1);
  auto row = logits;
  const auto id = g.sample(row, mask.data()).id;
  EXPECT_TRUE(id == 3 || id == 40 || id == 77 || id == 99) << id;
}

TEST(SequenceSampler, AllTokensMaskedIsAnErrorNotACrash) {
  std::vector<std::uint32_t> mask(4, 0u);
  mask[3] = 0xfffffff0u;  // bits for ids 100..127 only: beyond a 100-token row
  SequenceSampler s(hot(), {}, 1);
  auto row = random_logits(100, 1);
  auto r = s.try_sample(row, mask.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(r.error().what()).find("bitmask allows none"), std::string::npos)
      << r.error().what();
  EXPECT_EQ(s.generated(), 0);
  row = random_logits(100, 1);
  EXPECT_THROW(s.sample(row, mask.data()), Error);
}

TEST(SequenceSampler, NonFiniteAndEmptyRowsAreErrors) {
  SequenceSampler s(hot(), {}, 1);
  std::vector<float> nan_row = {0.0f, std::nanf(""), 1.0f};
  auto r = s.try_sample(nan_row);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInternal);
  EXPECT_NE(std::string(r.error().what()).find("token 1 is nan"), std::string::npos);
  std::vector<float> dead(40, -std::numeric_limits<float>::infinity());
  EXPECT_FALSE(s.try_sample(dead).ok());
  std::vector<float> empty;
  EXPECT_FALSE(s.try_sample(empty).ok());
  SamplingParams p = hot();
  p.logit_bias = {{50, 1.0f}};  // beyond this 3-token row: validate() was skipped
  SequenceSampler bad(p, {}, 1);
  std::vector<float> row = {0.0f, 1.0f, 2.0f};
  auto e = bad.try_sample(row);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.error().what()).find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(row, (std::vector<float>{0.0f, 1.0f, 2.0f}));
}

TEST(SequenceSampler, LogprobsAreRawSortedAndIncludeTheChosenToken) {
  const auto logits = random_logits(3000, 21);
  const auto expected = reference::log_softmax(logits);
  SamplingParams p;
  p.temperature = 0.6f;
  p.top_k = 20;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 1.0f;
  p.logit_bias = {{17, 30.0f}};  // 17 is chosen; its logprob stays the raw one
  p.logprobs = 20;
  SequenceSampler s(p, std::vector<std::int32_t>{1, 2, 3}, 4);
  auto row = logits;
  const auto t = s.sample(row);
  EXPECT_EQ(t.id, 17);
  EXPECT_NEAR(t.logprob, expected[17], 1e-4);
  ASSERT_EQ(t.top.size(), 20u);
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)];
  });
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(t.top[i].id, order[i]);
    EXPECT_NEAR(t.top[i].logprob, expected[static_cast<std::size_t>(order[i])], 1e-4);
    if (i > 0) {
      EXPECT_GE(t.top[i - 1].logprob, t.top[i].logprob);
    }
  }
  EXPECT_EQ(row, logits);  // the row is handed back raw
}

TEST(SequenceSampler, LogprobsAfterTheBitmaskAndAtEveryTemperature) {
  const auto logits = random_logits(200, 22);
  std::vector<bool> allowed(200, false);
  std::vector<std::uint32_t> mask(7, 0u);
  for (int i = 0; i < 200; i += 3) {
    allowed[static_cast<std::size_t>(i)] = true;
    mask[static_cast<std::size_t>(i / 32)] |= 1u << (i % 32);
  }
  const auto expected = reference::log_softmax(logits, &allowed);
  for (float temperature : {0.0f, 0.5f, 1.0f, 1.7f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.logprobs = 3;
    SequenceSampler s(p, {}, 8);
    auto row = logits;
    const auto t = s.sample(row, mask.data());
    EXPECT_EQ(t.id % 3, 0);
    EXPECT_NEAR(t.logprob, expected[static_cast<std::size_t>(t.id)], 1e-4) << temperature;
    ASSERT_EQ(t.top.size(), 3u);
    for (const auto& e : t.top) {
      EXPECT_EQ(e.id % 3, 0);
      EXPECT_NEAR(e.logprob, expected[static_cast<std::size_t>(e.id)], 1e-4);
    }
  }
}

TEST(SequenceSampler, TopLogprobsNeverListMaskedTokens) {
  std::vector<std::uint32_t> mask = {0b101u};
  SamplingParams p;
  p.logprobs = 5;
  SequenceSampler s(p, {}, 1);
  std::vector<float> row = {0.0f, 9.0f, 1.0f, 9.0f};
  const auto t = s.sample(row, mask.data());
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].id, 2);
  EXPECT_EQ(t.top[1].id, 0);
}

}  // namespace
}  // namespace weft::sampling
