// Tail-free sampling and mirostat (versions 1 and 2) against reference computations written
// out here the obvious way (sort the whole row, double precision), and against small cases
// worked by hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/sampling/sequence_sampler.hpp"

namespace weft::sampling {
namespace {

// Logits whose softmax is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> x;
  for (const double p : probs) {
    x.push_back(static_cast<float>(std::log(p)));
  }
  return x;
}

std::map<std::int32_t, double> distribution_of(SequenceSampler& sampler, std::vector<float> row) {
  auto got = sampler.distribution(row);
  EXPECT_TRUE(got.ok()) << got.error().what();
  std::map<std::int32_t, double> out;
  if (got.ok()) {
    for (const auto& t : *got) {
      out[t.id] = t.logprob;  // distribution() reports probabilities in this field
    }
  }
  return out;
}

void expect_same(const std::map<std::int32_t, double>& got,
                 const std::map<std::int32_t, double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, p] : want) {
    ASSERT_TRUE(got.count(id)) << "token " << id << " missing";
    EXPECT_NEAR(got.at(id), p, 1e-5) << "token " << id;
  }
}

// (id, probability) sorted most likely first, lower id on ties; temperature 1.
std::vector<std::pair<std::int32_t, double>> sorted_probs(const std::vector<float>& logits) {
  double max = -INFINITY;
  for (const float x : logits)
    max = std::max(max, static_cast<double>(x));
  std::vector<std::pair<std::int32_t, double>> out;
  double sum = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double w = std::exp(logits[i] - max);
    out.emplace_back(static_cast<std::int32_t>(i), w);
    sum += w;
  }
  for (auto& e : out)
    e.second /= sum;
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::map<std::int32_t, double> renormalised(std::vector<std::pair<std::int32_t, double>> kept) {
  double sum = 0.0;
  for (const auto& e : kept)
    sum += e.second;
  std::map<std::int32_t, double> out;
  for (const auto& e : kept)
    out[e.first] = e.second / sum;
  return out;
}

// Tail-free sampling as Phillips describes it and llama.cpp computes it.
std::map<std::int32_t, double> reference_tfs(const std::vector<float>& logits, double z) {
  auto p = sorted_probs(logits);
  const std::size_t n = p.size();
  std::vector<double> d2;
  for (std::size_t i = 0; i + 2 < n; ++i) {
    d2.push_back(std::abs((p[i].second - p[i + 1].second) - (p[i + 1].second - p[i + 2].second)));
  }
  const double sum = std::accumulate(d2.begin(), d2.end(), 0.0);
  std::size_t keep = n;
  double running = 0.0;
  for (std::size_t i = 0; i < d2.size(); ++i) {
    running += sum > 1e-6 ? d2[i] / sum : d2[i];
    if (running > z && i >= 1) {
      keep = i;
      break;
    }
  }
  p.resize(keep);
  return renormalised(p);
}

// Mirostat's truncation at target mu (bits) over a vocabulary of p.size() tokens.
std::map<std::int32_t, double> reference_mirostat(const std::vector<float>& logits, int mode,
                                                  double mu) {
  auto p = sorted_probs(logits);
  std::size_t keep = 1;
  if (mode == 2) {
    while (keep < p.size() && -std::log2(p[keep].second) <= mu)
      ++keep;
  } else {
    double num = 0.0, den = 0.0;
    for (std::size_t i = 0; i + 1 < std::min<std::size_t>(100, p.size()); ++i) {
      const double t = std::log((i + 2.0) / (i + 1.0));
      num += t * std::log(p[i].second / p[i + 1].second);
      den += t * t;
    }
    const double s = num / den, e = s - 1.0;
    const double k = std::pow(
        e * std::pow(2.0, mu) / (1.0 - std::pow(static_cast<double>(p.size()), -e)), 1.0 / s);
    keep = std::isfinite(k) && k >= 0.0 && k < static_cast<double>(p.size())
               ? std::max<std::size_t>(1, static_cast<std::size_t>(k))
               : p.size();
  }
  p.resize(keep);
  return renormalised(p);
}

TEST(TailFree, HandWorkedCase) {
  // p = 1/2, 1/4, 1/8, 1/16, 1/16: first differences 1/4, 1/8, 1/16, 0; second differences
  // 1/8, 1/16, 1/16, normalised 1/2, 1/4, 1/4, running sums 0.5, 0.75, 1.
  const auto logits = logits_of({0.5, 0.25, 0.125, 0.0625, 0.0625});
  SamplingParams p;
  p.tfs_z = 0.8f;  // first i >= 1 with running sum > 0.8: i = 2, keep 2 tokens
  SequenceSampler two(p, {}, 1);
  expect_same(distribution_of(two, logits), {{0, 2.0 / 3.0}, {1, 1.0 / 3.0}});
  p.tfs_z = 0.6f;  // i = 1: keep 1 token
  SequenceSampler one(p, {}, 1);
  expect_same(distribution_of(one, logits), {{0, 1.0}});
}

TEST(TailFree, MatchesReferenceOnRandomRows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  for (const float z : {0.3f, 0.7f, 0.95f, 0.99f}) {
    for (int row = 0; row < 5; ++row) {
      std::vector<float> logits(500);
      for (auto& x : logits)
        x = normal(rng);
      SamplingParams p;
      p.tfs_z = z;
      SequenceSampler sampler(p, {}, 1);
      expect_same(distribution_of(sampler, logits), reference_tfs(logits, z));
    }
  }
}

TEST(TailFree, RunsBeforeTopP) {
  // tfs keeps {0, 1} (2/3, 1/3); top-p 0.6 then keeps token 0 alone (mass before token 1 is
  // 2/3 >= 0.6). Without tfs, top-p 0.6 would keep {0, 1} (0.5 < 0.6).
  const auto logits = logits_of({0.5, 0.25, 0.125, 0.0625, 0.0625});
  SamplingParams p;
  p.tfs_z = 0.8f;
  p.top_p = 0.6f;
  SequenceSampler sampler(p, {}, 1);
  expect_same(distribution_of(sampler, logits), {{0, 1.0}});
}

TEST(Mirostat2, StartsAtTwiceTauAndFollowsTheSurprise) {
  // tau = 1: mu starts at 2 bits, so tokens with p >= 1/4 stay: {0: 2/3, 1: 1/3}.
  const auto logits = logits_of({0.5, 0.25, 0.125, 0.0625, 0.0625});
  SamplingParams p;
  p.temperature = 1.0f;
  p.mirostat = 2;
  p.mirostat_tau = 1.0f;
  p.mirostat_eta = 0.1f;
  bool saw_one = false, saw_zero = false;
  for (std::uint64_t seed = 0; seed < 64 && !(saw_one && saw_zero); ++seed) {
    SequenceSampler sampler(p, {}, seed);
    expect_same(distribution_of(sampler, logits), {{0, 2.0 / 3.0}, {1, 1.0 / 3.0}});
    std::vector<float> row = logits;
    const auto token = sampler.sample(row).id;
    ASSERT_TRUE(token == 0 || token == 1) << token;
    if (token == 1) {
      // surprise log2(3) = 1.585 bits: mu = 2 - 0.1 * 0.585 = 1.9415, so p >= 0.2604 stays:
      // token 1 (0.25) drops out.
      saw_one = true;
      expect_same(distribution_of(sampler, logits), {{0, 1.0}});
    } else {
      // surprise log2(1.5) = 0.585 bits: mu = 2.0415, the same two tokens stay.
      saw_zero = true;
      expect_same(distribution_of(sampler, logits), {{0, 2.0 / 3.0}, {1, 1.0 / 3.0}});
    }
  }
  EXPECT_TRUE(saw_one && saw_zero);
}

// Runs `steps` draws and checks every step's distribution against the reference at the mu
// the reference itself tracks from the drawn tokens.
void check_mirostat_run(int mode, float tau, float eta, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.mirostat = mode;
  p.mirostat_tau = tau;
  p.mirostat_eta = eta;
  SequenceSampler sampler(p, {}, seed);
  double mu = 2.0 * tau;
  for (int step = 0; step < 20; ++step) {
    std::vector<float> logits(300);
    for (auto& x : logits)
      x = normal(rng);
    const auto want = reference_mirostat(logits, mode, mu);
    expect_same(distribution_of(sampler, logits), want);
    std::vector<float> row = logits;
    const auto token = sampler.sample(row).id;
    ASSERT_TRUE(want.count(token)) << "step " << step << " drew " << token;
    mu -= eta * (-std::log2(want.at(token)) - tau);
  }
}

TEST(Mirostat2, MatchesReferenceOverARun) {
  check_mirostat_run(2, 3.0f, 0.1f, 11);
  check_mirostat_run(2, 5.0f, 0.5f, 12);
}

TEST(Mirostat1, MatchesReferenceOverARun) {
  check_mirostat_run(1, 3.0f, 0.1f, 21);
  check_mirostat_run(1, 5.0f, 0.3f, 22);
}

TEST(Mirostat1, ZipfRowKeepsTheFormulasK) {
  // p_i proportional to 1 / (i + 1)^1.5 over 1,000 tokens: s is estimated as 1.5 exactly, so
  // k = (0.5 * 2^mu / (1 - 1000^-0.5))^(1 / 1.5); mu = 2 * tau = 6: k = 10.30 -> 10 tokens.
  std::vector<double> probs(1000);
  double sum = 0.0;
  for (std::size_t i = 0; i < probs.size(); ++i)
    sum += probs[i] = std::pow(i + 1.0, -1.5);
  for (auto& v : probs)
    v /= sum;
  SamplingParams p;
  p.mirostat = 1;
  p.mirostat_tau = 3.0f;
  SequenceSampler sampler(p, {}, 1);
  const auto got = distribution_of(sampler, logits_of(probs));
  const double k = std::pow(0.5 * 64.0 / (1.0 - std::pow(1000.0, -0.5)), 1.0 / 1.5);
  EXPECT_EQ(got.size(), static_cast<std::size_t>(k));
  EXPECT_EQ(got.size(), 10u);
}

TEST(Mirostat, GreedyIgnoresIt) {
  const auto logits = logits_of({0.2, 0.5, 0.3});
  SamplingParams p;
  p.temperature = 0.0f;
  p.mirostat = 2;
  SequenceSampler sampler(p, {}, 1);
  std::vector<float> row = logits;
  EXPECT_EQ(sampler.sample(row).id, 1);
}

TEST(Mirostat, SeededRunsRepeat) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.mirostat = 2;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(30, std::vector<float>(200));
  for (auto& r : rows)
    for (auto& x : r)
      x = normal(rng);
  auto run = [&](std::uint64_t seed) {
    SequenceSampler sampler(p, {}, seed);
    std::vector<std::int32_t> out;
    for (auto r : rows)
      out.push_back(sampler.sample(r).id);
    return out;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

TEST(DecodingStrategies, DeviceRowsAskTheHostToFinish) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.tfs_z = 0.9f;
  p.top_p = 0.8f;
  SequenceSampler tfs(p, {}, 1);
  std::vector<DeviceSampleEdit> edits;
  auto row = tfs.device_row(1000, edits);
  ASSERT_TRUE(row.ok());
  EXPECT_NE(row->flags & kHostFinish, 0);
  EXPECT_EQ(row->top_p, 1.0f);  // no top-p floor: tail-free sampling needs the whole row
  SamplingParams m;
  m.temperature = 1.0f;
  m.mirostat = 1;
  SequenceSampler miro(m, {}, 1);
  row = miro.device_row(1000, edits);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->mode, DeviceSampleMode::kFloor);
  EXPECT_NE(row->flags & kHostFinish, 0);
}

TEST(DecodingStrategies, ValidationNamesTheField) {
  SamplingParams p;
  p.tfs_z = 0.0f;
  EXPECT_STREQ(validate(p, 10).error().what(), "tfs_z: 0 is outside (0, 1]");
  p = {};
  p.mirostat = 3;
  EXPECT_STREQ(validate(p, 10).error().what(), "mirostat: 3 is outside {0, 1, 2} (0 is off)");
  p = {};
  p.mirostat = 2;
  p.mirostat_tau = -1.0f;
  EXPECT_STREQ(validate(p, 10).error().what(), "mirostat_tau: -1 is outside (0, 100]");
  p = {};
  p.mirostat = 2;
  p.mirostat_eta = 2.0f;
  EXPECT_STREQ(validate(p, 10).error().what(), "mirostat_eta: 2 is outside (0, 1]");
  p = {};
  p.mirostat = 1;
  p.top_p = 0.9f;
  EXPECT_STREQ(validate(p, 10).error().what(),
               "mirostat: cannot be combined with top_p (mirostat sets its own truncation; turn "
               "top_p off)");
  p = {};
  p.tfs_z = 0.95f;
  p.top_k = 40;
  EXPECT_TRUE(validate(p, 10).ok());
}

}  // namespace
}  // namespace weft::sampling
