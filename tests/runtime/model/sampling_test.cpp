#include "runtime/model/sampling.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace weft::model {
namespace {

TEST(ChooseToken, GreedyPicksTheLowestIdAmongTiesAndReportsLogprobs) {
  const float logits[4] = {1.0f, 3.0f, 3.0f, -1.0f};
  std::mt19937_64 rng(1);
  const auto c = choose_token(logits, 4, 0.0f, 3, rng);
  EXPECT_EQ(c.id, 1);
  const double norm = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-1.0));
  EXPECT_NEAR(c.logprob, 3.0 - norm, 1e-6);
  ASSERT_EQ(c.top.size(), 3u);
  EXPECT_EQ(c.top[0].id, 1);
  EXPECT_EQ(c.top[1].id, 2);
  EXPECT_EQ(c.top[2].id, 0);
  EXPECT_NEAR(c.top[2].logprob, 1.0 - norm, 1e-6);
}

// Frequencies of sampled ids follow softmax(logits / T) (a 4-sigma bound for 20000 draws).
TEST(ChooseToken, TemperatureSamplingFollowsTheScaledDistribution) {
  const float logits[3] = {0.0f, 1.0f, 2.0f};
  const float temperature = 2.0f;
  double p[3], sum = 0;
  for (int i = 0; i < 3; ++i)
    sum += (p[i] = std::exp(logits[i] / temperature));
  std::mt19937_64 rng(123);
  int counts[3] = {0, 0, 0};
  const int draws = 20000;
  for (int i = 0; i < draws; ++i)
    ++counts[choose_token(logits, 3, temperature, 0, rng).id];
  for (int i = 0; i < 3; ++i) {
    const double expected = p[i] / sum;
    const double sigma = std::sqrt(expected * (1 - expected) / draws);
    EXPECT_NEAR(counts[i] / double(draws), expected, 4 * sigma) << i;
  }
}

}  // namespace
}  // namespace weft::model
