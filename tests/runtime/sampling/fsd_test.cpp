// FSD and randomized FSD (runtime/sampling/fsd.hpp) against cases worked by hand and against
// a reference written out here (Inferflow's n-gram anti-LM recounted from the whole sequence
// on every call, the pool sorted whole, double precision).

#include "runtime/sampling/fsd.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "runtime/sampling/sequence_sampler.hpp"
#include "runtime/sampling/truncation.hpp"

namespace weft::sampling {
namespace {

SamplingParams fsd_params(float alpha, int k, int pool) {
  SamplingParams p;
  p.fsd = Fsd::kFsd;
  p.fsd_alpha = alpha;
  p.fsd_k = k;
  p.fsd_pool_size = pool;
  return p;
}

// P_omega recomputed from scratch, as Inferflow's NGram defines it.
double reference_penalty(const std::vector<std::int32_t>& seq, int n, double beta, std::int32_t y) {
  if (static_cast<int>(seq.size()) < n - 1) return 0.0;
  double score = 0.0, remaining = 1.0;
  for (int i = n - 1; i >= 0; --i) {
    const std::vector<std::int32_t> ctx(seq.end() - i, seq.end());
    int total = 0, count = 0;
    for (std::size_t s = 0; s + static_cast<std::size_t>(i) < seq.size(); ++s) {
      if (!std::equal(ctx.begin(), ctx.end(), seq.begin() + static_cast<std::ptrdiff_t>(s))) {
        continue;
      }
      const std::int32_t next = seq[s + static_cast<std::size_t>(i)];
      ++total;
      if (next == y) ++count;
    }
    if (count == 0) continue;
    score += i == 0 ? remaining * count / total : remaining * beta * count / (total + 1);
    remaining -= remaining * beta;
  }
  return score;
}

TEST(AntiLm, PenaltiesWorkedByHand) {
  // Sequence 1 2 3 1 2, n = 3, beta = 0.9. For token 3: [1 2] was followed once, by 3:
  // 0.9 * 1/2 = 0.45, remaining 0.1; [2] once, by 3: 0.1 * 0.9 * 1/2 = 0.045, remaining 0.01;
  // unigram 1/5: 0.002. Token 1 follows neither [1 2] nor [2] (those orders add nothing and
  // keep remaining = 1): 2/5. Token 4 never appeared: 0.
  const std::vector<std::int32_t> seq = {1, 2, 3, 1, 2};
  AntiLm lm(3, 0.9f, seq);
  EXPECT_NEAR(lm.penalty(3), 0.497, 1e-7);
  EXPECT_NEAR(lm.penalty(1), 0.4, 1e-7);
  EXPECT_NEAR(lm.penalty(2), 0.4, 1e-12);  // follows neither [1 2] nor [2]: unigram 2/5
  EXPECT_EQ(lm.penalty(4), 0.0);
  // Shorter than n - 1 tokens: nothing is penalized.
  AntiLm short_lm(3, 0.9f, std::vector<std::int32_t>{7});
  EXPECT_FALSE(short_lm.active());
  EXPECT_EQ(short_lm.penalty(7), 0.0);
}

TEST(AntiLm, MatchesTheReferenceAsTheSequenceGrows) {
  std::mt19937 rng(5);
  for (int n = 1; n <= 4; ++n) {
    std::vector<std::int32_t> seq = {0, 1};
    AntiLm lm(n, 0.7f, seq);
    for (int step = 0; step < 60; ++step) {
      for (std::int32_t y = 0; y < 5; ++y) {
        ASSERT_NEAR(lm.penalty(y), reference_penalty(seq, n, 0.7f, y), 1e-9)
            << "n " << n << " step " << step << " token " << y;
      }
      const auto t = static_cast<std::int32_t>(rng() % 5);
      seq.push_back(t);
      lm.push(t);
    }
  }
}

TEST(Fsd, ChoiceWorkedByHand) {
  // Prompt 1 2 3 1 2 (P_omega: 3 -> 0.497, 1 -> 0.4, 4 -> 0, as above). The pool of 3 holds
  // tokens 3, 1, 4 with P_theta 0.5, 0.3, 0.2 (the rest are far below and outside the pool).
  const std::vector<std::int32_t> prompt = {1, 2, 3, 1, 2};
  std::vector<float> row(6, -100.0f);
  row[3] = std::log(0.5f);
  row[1] = std::log(0.3f);
  row[4] = std::log(0.2f);
  // alpha 0.5: 3 -> 0.25 - 0.2485 = 0.0015; 1 -> 0.15 - 0.2 = -0.05; 4 -> 0.1: token 4.
  SequenceSampler a(fsd_params(0.5f, 3, 3), prompt, 1);
  auto row_a = row;
  EXPECT_EQ(a.sample(row_a).id, 4);
  // alpha 0.1: 3 -> 0.45 - 0.0497 = 0.4003; 1 -> 0.27 - 0.04; 4 -> 0.18: token 3.
  SequenceSampler b(fsd_params(0.1f, 3, 3), prompt, 1);
  auto row_b = row;
  EXPECT_EQ(b.sample(row_b).id, 3);
  // k = 2 scores only 3 and 1: at alpha 0.5, token 3.
  SequenceSampler c(fsd_params(0.5f, 2, 3), prompt, 1);
  auto row_c = row;
  EXPECT_EQ(c.sample(row_c).id, 3);
  // The scores themselves.
  std::vector<Candidate> cands = {{0, 0.5f, 3}, {0, 0.3f, 1}, {0, 0.2f, 4}};
  AntiLm lm(3, 0.9f, prompt);
  const auto scores = fsd_scores(cands, lm, fsd_params(0.5f, 3, 3));
  ASSERT_EQ(scores.size(), 3u);
  EXPECT_EQ(scores[0].id, 3);
  EXPECT_NEAR(scores[0].score, 0.5 * 0.5 - 0.5 * 0.497, 1e-6);
  EXPECT_NEAR(scores[1].score, 0.5 * 0.3 - 0.5 * 0.4, 1e-6);
  EXPECT_NEAR(scores[2].score, 0.5 * 0.2, 1e-6);
  // The chosen token is recorded: after it the anti-LM knows [1 2] -> 4 too.
  auto again = row;
  const std::int32_t next = a.sample(again).id;  // sequence 1 2 3 1 2 4
  // P_omega now: 3 -> [2 4] unseen, [4] unseen, unigram 1/6; 4 -> unigram 1/6; 1 -> 2/6.
  // Scores at alpha 0.5: 3 -> 0.25 - 1/12; 1 -> 0.15 - 1/6; 4 -> 0.1 - 1/12: token 3.
  EXPECT_EQ(next, 3);
}

TEST(Fsd, MatchesTheReferenceOverRandomRowsAndSteps) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 20; ++trial) {
    SamplingParams p = fsd_params(0.2f + 0.03f * trial, 1 + trial % 6, 8 + trial % 5);
    p.fsd_n = 1 + trial % 4;
    p.temperature = 0.5f + 0.1f * trial;
    std::vector<std::int32_t> seq = {1, 2, 1, 2, 3};
    SequenceSampler sampler(p, seq, 3);
    for (int step = 0; step < 25; ++step) {
      std::vector<float> row(40);
      for (auto& x : row)
        x = normal(rng);
      // Reference: sort the whole row, pool, softmax at T, top k, score, argmax.
      std::vector<std::pair<float, std::int32_t>> order;
      for (std::size_t i = 0; i < row.size(); ++i)
        order.emplace_back(row[i], static_cast<std::int32_t>(i));
      std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      order.resize(static_cast<std::size_t>(p.fsd_pool_size));
      double z = 0.0;
      for (const auto& [x, id] : order)
        z += std::exp((static_cast<double>(x) - order[0].first) / p.temperature);
      const bool active = static_cast<int>(seq.size()) >= p.fsd_n - 1;
      double best = -INFINITY;
      std::map<std::int32_t, double> score_of;
      for (int i = 0; i < p.fsd_k; ++i) {
        const auto [x, id] = order[static_cast<std::size_t>(i)];
        const double pt = std::exp((static_cast<double>(x) - order[0].first) / p.temperature) / z;
        const double s = active ? (1.0 - p.fsd_alpha) * pt -
                                      p.fsd_alpha * reference_penalty(seq, p.fsd_n, p.fsd_beta, id)
                                : pt;
        score_of[id] = s;
        best = std::max(best, s);
      }
      auto r = row;
      const std::int32_t got = sampler.sample(r).id;
      // The best score (a near-tie within float rounding may go either way).
      ASSERT_TRUE(score_of.count(got)) << "trial " << trial << " step " << step;
      ASSERT_GE(score_of[got], best - 1e-5) << "trial " << trial << " step " << step;
      seq.push_back(got);
    }
  }
}

TEST(Fsd, RandomizedSamplesOnlyInItsFirstSteps) {
  // Greedy sampling picks token 3 (the argmax); FSD at alpha 0.5 picks 4 (worked above).
  const std::vector<std::int32_t> prompt = {1, 2, 3, 1, 2};
  std::vector<float> row(6, -100.0f);
  row[3] = std::log(0.5f);
  row[1] = std::log(0.3f);
  row[4] = std::log(0.2f);
  SamplingParams p = fsd_params(0.5f, 3, 3);
  p.fsd = Fsd::kRandomized;
  p.temperature = 0.0f;  // the sampling steps are greedy; FSD's temperature is then 0.001
  p.fsd_random_prob = 1.0f;
  p.fsd_random_steps = 4;
  SequenceSampler always(p, prompt, 9);
  for (int step = 0; step < 4; ++step) {
    auto r = row;
    EXPECT_EQ(always.sample(r).id, 3) << "step " << step << " samples";
  }
  // From step 4 on, FSD. At T = 0.001, P_theta is ~(1, 0, 0), so FSD's choice is 3 unless
  // alpha * P_omega(3) outweighs (1 - alpha); with the sequence 1 2 3 1 2 3 3 3 3 it does not.
  auto r = row;
  EXPECT_EQ(always.sample(r).id, 3);
  // Probability 0: plain FSD from the first step. At temperature 1 (P_theta 0.5/0.3/0.2): 4.
  p.fsd_random_prob = 0.0f;
  p.temperature = 1.0f;
  SequenceSampler never(p, prompt, 9);
  auto r2 = row;
  EXPECT_EQ(never.sample(r2).id, 4);
  // The coin: about fsd_random_prob of the first steps sample, none after.
  p.fsd_random_prob = 0.3f;
  p.fsd_random_steps = 10;
  int sampled = 0, draws = 0;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    for (int step = 0; step < 12; ++step) {
      const bool s = fsd_samples_at(p, seed, 0, step);
      if (step >= 10) {
        ASSERT_FALSE(s);
        continue;
      }
      sampled += s ? 1 : 0;
      ++draws;
    }
  }
  // 20000 draws at 0.3: standard deviation ~65, so +-400 is ~6 sigma.
  EXPECT_NEAR(sampled, 0.3 * draws, 400);
  p.fsd = Fsd::kFsd;
  EXPECT_FALSE(fsd_samples_at(p, 1, 0, 0));
}

TEST(Fsd, ParametersAreValidated) {
  SamplingParams p = fsd_params(0.5f, 6, 50);
  EXPECT_TRUE(validate(p, 100).ok());
  p.fsd_k = 51;
  EXPECT_NE(std::string(validate(p, 100).error().what()).find("fsd_k"), std::string::npos);
  p = fsd_params(1.5f, 6, 50);
  EXPECT_NE(std::string(validate(p, 100).error().what()).find("fsd_alpha"), std::string::npos);
  p = fsd_params(0.5f, 6, 50);
  p.top_p = 0.9f;
  EXPECT_NE(std::string(validate(p, 100).error().what()).find("fsd: cannot be combined with top_p"),
            std::string::npos);
  p.fsd = Fsd::kRandomized;  // its sampling steps use top_p
  EXPECT_TRUE(validate(p, 100).ok());
  p.mirostat = 2;
  p.top_p = 1.0f;
  EXPECT_FALSE(validate(p, 100).ok());
  p = fsd_params(0.5f, 6, 50);
  p.fsd_n = 0;
  EXPECT_NE(std::string(validate(p, 100).error().what()).find("fsd_n"), std::string::npos);
}

}  // namespace
}  // namespace weft::sampling

namespace weft::sampling {
namespace {

// What kernels/cuda/sampling.cu returns for a kTopK/kFloor row with kHostFinish when the
// candidates fit: every token at or above the threshold with exp((x - max) / T).
struct SimulatedDevice {
  std::vector<DeviceCandidate> candidates;
  DeviceSampleResult result;
};
SimulatedDevice simulate(const std::vector<float>& row, const DeviceSampleRow& r) {
  SimulatedDevice d;
  const float max = *std::max_element(row.begin(), row.end());
  float threshold = -INFINITY;
  if (r.mode == DeviceSampleMode::kTopK) {
    std::vector<float> sorted = row;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    threshold = sorted[static_cast<std::size_t>(r.top_k - 1)];
  }
  double raw_sum = 0.0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    raw_sum += std::exp(row[i] - max);
    const float w = std::exp((row[i] - max) / r.temperature);
    if (row[i] >= threshold && w > 0.0f) {
      d.candidates.push_back({static_cast<std::int32_t>(i), w, row[i]});
      d.result.total += w;
    }
  }
  d.result.candidates = static_cast<std::int32_t>(d.candidates.size());
  d.result.offset = 0;
  d.result.raw_max = max;
  d.result.raw_sum = raw_sum;
  return d;
}

TEST(FsdOnADevice, TheHostFinishGivesTheCpuPathsTokens) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  SamplingParams p = fsd_params(0.5f, 4, 7);
  p.temperature = 0.8f;
  const std::vector<std::int32_t> prompt = {1, 2, 3, 1, 2};
  SequenceSampler cpu(p, prompt, 1), device(p, prompt, 1), fallback(p, prompt, 1);
  for (int step = 0; step < 30; ++step) {
    std::vector<float> row(40);
    for (auto& x : row)
      x = normal(rng);
    std::vector<DeviceSampleEdit> edits;
    auto r = device.device_row(40, edits);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->mode, DeviceSampleMode::kTopK);
    EXPECT_EQ(r->top_k, 7);
    EXPECT_EQ(r->flags, kHostFinish);
    SimulatedDevice d = simulate(row, *r);
    auto a = row;
    const std::int32_t want = cpu.sample(a).id;
    auto got = device.finish_device(d.result, d.candidates, {}, {});
    ASSERT_TRUE(got.ok()) << got.error().what();
    EXPECT_EQ(got->id, want) << "step " << step;
    // A pool too wide for the candidate buffer comes back as the raw row.
    DeviceSampleResult host;
    host.status = DeviceSampleStatus::kHostRow;
    auto raw = row;
    auto viahost = fallback.finish_device(host, {}, {}, raw);
    ASSERT_TRUE(viahost.ok());
    EXPECT_EQ(viahost->id, want);
  }
}

TEST(BeamRowsOnADevice, TheHostFinishGivesTheCpuPathsCandidates) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  SamplingParams p;
  p.beam_width = 3;
  SequenceSampler sampler(p, std::vector<std::int32_t>{1, 2}, 1);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<float> row(50);
    for (auto& x : row)
      x = normal(rng);
    std::vector<DeviceSampleEdit> edits;
    auto r = sampler.beam_device_row(50, edits);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->mode, DeviceSampleMode::kFloor);
    EXPECT_EQ(r->flags, kHostFinish);
    SimulatedDevice d = simulate(row, *r);
    auto a = row;
    auto want = sampler.beam_candidates(a, nullptr, 5);
    auto got = sampler.finish_beam_device(d.result, d.candidates, {}, 5);
    ASSERT_TRUE(want.ok() && got.ok());
    ASSERT_EQ(want->size(), 5u);
    ASSERT_EQ(got->size(), 5u);
    for (std::size_t i = 0; i < 5; ++i) {
      EXPECT_EQ((*got)[i].id, (*want)[i].id);
      EXPECT_NEAR((*got)[i].logprob, (*want)[i].logprob, 1e-5);
    }
    // The log-softmax itself, written out.
    double z = 0.0;
    for (float x : row)
      z += std::exp(static_cast<double>(x));
    const auto best = std::max_element(row.begin(), row.end());
    EXPECT_EQ((*want)[0].id, best - row.begin());
    EXPECT_NEAR((*want)[0].logprob, *best - std::log(z), 1e-5);
  }
}

}  // namespace
}  // namespace weft::sampling
