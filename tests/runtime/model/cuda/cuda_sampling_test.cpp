// The GPU sampler (kernels/cuda/sampling.cu through CudaModel::launch/sample and
// SequenceSampler::device_row/finish_device) against the CPU sampler on the same logits: for
// every mode (greedy, full-vocabulary draw, top-k, the top-p/min-p floor, the host fallback
// for typical-p), with logit bias, penalties, bitmasks and logprobs, over many seeds. The
// two sum in different orders, so a draw whose uniform falls within rounding of a boundary
// may differ; the tests allow three such draws in 64 per case and require identical greedy
// tokens.
// Skips without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device_info.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#include "runtime/sampling/philox.hpp"
#include "runtime/sampling/sequence_sampler.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

using model::CudaModel;
using model::CudaModelOptions;
using model::StepBatch;
using sampling::SamplingParams;
using sampling::SequenceSampler;

struct Case {
  std::string name;
  SamplingParams params;
  bool history = false;  // sampled tokens recorded before the draw (penalties)
  int mask = 0;          // 0: none; 1: ~30% of tokens allowed; 2: one token; 3: none allowed
  // A distribution flat enough that the candidates overflow what the host is handed: top-p
  // runs on the device, drawing in id order (checked against the CPU's distribution; any
  // row of another case that takes that path is checked the same way).
  bool flat = false;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, auto set, bool history = false, int mask = 0) {
    Case k;
    k.name = std::move(name);
    set(k.params);
    k.history = history;
    k.mask = mask;
    c.push_back(std::move(k));
  };
  add("greedy", [](SamplingParams& p) { p.temperature = 0; });
  add("greedy+logprobs", [](SamplingParams& p) {
    p.temperature = 0;
    p.logprobs = 5;
  });
  add(
      "greedy+bias+penalties",
      [](SamplingParams& p) {
        p.temperature = 0;
        p.logit_bias = {{5, 4.0f}, {17, -100.0f}, {42, 2.5f}};
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.25f;
      },
      true);
  add("temperature 1", [](SamplingParams& p) { p.temperature = 1.0f; });
  add("temperature 0.7+logprobs", [](SamplingParams& p) {
    p.temperature = 0.7f;
    p.logprobs = 3;
  });
  add("top-k 5", [](SamplingParams& p) { p.top_k = 5; });
  add("top-k 50, T 1.3", [](SamplingParams& p) {
    p.top_k = 50;
    p.temperature = 1.3f;
  });
  add("top-p 0.9", [](SamplingParams& p) { p.top_p = 0.9f; });
  add("top-p 0.5, T 0.8", [](SamplingParams& p) {
    p.top_p = 0.5f;
    p.temperature = 0.8f;
  });
  add("min-p 0.05", [](SamplingParams& p) { p.min_p = 0.05f; });
  add("top-k 40 + top-p 0.95 + min-p 0.02", [](SamplingParams& p) {
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.02f;
  });
  add("typical-p 0.9 (host row)", [](SamplingParams& p) { p.typical_p = 0.9f; });
  add("top-k 1000 + top-p 0.97, T 2 (device top-k and top-p)", [](SamplingParams& p) {
    p.top_k = 1000;
    p.top_p = 0.97f;
    p.temperature = 2.0f;
  });
  c.back().flat = true;
  add(
      "penalties + top-p 0.9",
      [](SamplingParams& p) {
        p.top_p = 0.9f;
        p.repetition_penalty = 1.2f;
        p.presence_penalty = 0.4f;
        p.frequency_penalty = 0.3f;
        p.logit_bias = {{7, 3.0f}};
      },
      true);
  add(
      "mask + top-p 0.9", [](SamplingParams& p) { p.top_p = 0.9f; }, false, 1);
  add(
      "mask + temperature 1 + logprobs", [](SamplingParams& p) { p.logprobs = 4; }, false, 1);
  add(
      "mask of one token", [](SamplingParams& p) { p.top_k = 3; }, false, 2);
  add(
      "mask of no token", [](SamplingParams& p) { p.temperature = 0; }, false, 3);
  add("flat: T 3, top-p 0.98 (device top-p)", [](SamplingParams& p) {
    p.temperature = 3.0f;
    p.top_p = 0.98f;
  });
  c.back().flat = true;
  add("flat: T 3, top-p 0.9, min-p 0.001 (device top-p)", [](SamplingParams& p) {
    p.temperature = 3.0f;
    p.top_p = 0.9f;
    p.min_p = 0.001f;
  });
  c.back().flat = true;
  return c;
}

std::vector<std::uint32_t> make_mask(int kind, int vocab, unsigned seed) {
  std::vector<std::uint32_t> words((vocab + 31) / 32, 0u);
  std::mt19937 rng(seed);
  for (int i = 0; i < vocab; ++i) {
    const bool on = kind == 1 ? rng() % 10 < 3 : kind == 2 ? i == 123 : false;
    if (on) words[i / 32] |= 1u << (i % 32);
  }
  return words;
}

TEST(CudaSampler, MatchesTheCpuSamplerOnTheSameLogits) {
  const auto devices = cuda::visible_devices();
  if (devices.devices.empty()) {
    GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason
                 << "): GPU checks run on the device machine through scripts/gpu-check";
  }
  auto loaded = load_model(testing::source_dir() / "models/weft-tiny");
  ASSERT_TRUE(loaded) << loaded.error().what();
  const int vocab = loaded->model.spec().vocab_size;
  CudaModelOptions o;
  o.num_pages = 64;
  auto created = CudaModel::create(loaded->model, o);
  ASSERT_TRUE(created) << created.error().what();
  CudaModel& gpu = *created;

  // One step: four prompts of different lengths, one logit row each.
  constexpr int kRows = 4;
  StepBatch step;
  std::vector<std::vector<std::int32_t>> prompts;
  std::mt19937 rng(5);
  for (int r = 0; r < kRows; ++r) {
    std::vector<std::int32_t> prompt;
    for (int i = 0; i < 5 + 9 * r; ++i)
      prompt.push_back(static_cast<std::int32_t>(rng() % vocab));
    std::vector<std::int32_t> table;
    while (static_cast<int>(table.size()) < gpu.pages_for(static_cast<int>(prompt.size())))
      table.push_back(*gpu.allocate_page());
    model::SequenceSlice slice{static_cast<int>(step.tokens.size()),
                               static_cast<int>(prompt.size()), table, false};
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      step.tokens.push_back(prompt[i]);
      step.positions.push_back(static_cast<int>(i));
    }
    step.sequences.push_back(slice);
    prompts.push_back(std::move(prompt));
  }
  std::vector<float> host;
  ASSERT_TRUE(gpu.forward(step, host));
  ASSERT_EQ(host.size(), static_cast<std::size_t>(kRows) * vocab);

  constexpr int kSeeds = 64;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    // kSeeds draws in one device call, rows cycling over the step's four logit rows (the
    // rows sharing a logit row share its bitmask, so the in-place masking agrees).
    std::vector<SequenceSampler> on_cpu, on_gpu;
    std::vector<std::vector<std::uint32_t>> masks;
    for (int s = 0; s < kSeeds; ++s) {
      const int r = s % kRows;
      on_cpu.emplace_back(c.params, prompts[r], 1000 + s, s % 3);
      on_gpu.emplace_back(c.params, prompts[r], 1000 + s, s % 3);
      if (c.history) {
        for (std::int32_t t : {prompts[r][0], 7, 7, 42, 5}) {
          on_cpu.back().accept(t);
          on_gpu.back().accept(t);
        }
      }
      masks.push_back(c.mask ? make_mask(c.mask, vocab, 77 + r) : std::vector<std::uint32_t>{});
    }
    model::DeviceSamplingInput input;
    for (int s = 0; s < kSeeds; ++s) {
      auto row = on_gpu[s].device_row(vocab, input.edits);
      ASSERT_TRUE(row) << row.error().what();
      row->row = s % kRows;
      if (!masks[s].empty()) {
        row->mask_word_offset = static_cast<std::int32_t>(input.masks.size());
        input.masks.insert(input.masks.end(), masks[s].begin(), masks[s].end());
      }
      input.rows.push_back(*row);
    }
    ASSERT_TRUE(gpu.launch(step));
    model::DeviceSamplingOutput output;
    auto sampled = gpu.sample(input, output);
    ASSERT_TRUE(sampled) << sampled.error().what();
    ASSERT_EQ(output.results.size(), static_cast<std::size_t>(kSeeds));

    int mismatched = 0;
    int device_top_p = 0;  // rows of a flat case that took the device top-p path
    for (int s = 0; s < kSeeds; ++s) {
      const int r = s % kRows;
      std::vector<float> row(host.begin() + static_cast<std::ptrdiff_t>(r) * vocab,
                             host.begin() + static_cast<std::ptrdiff_t>(r + 1) * vocab);
      const bool truncating = input.rows[s].mode == sampling::DeviceSampleMode::kTopK ||
                              input.rows[s].mode == sampling::DeviceSampleMode::kFloor;
      if (truncating && output.results[s].status == sampling::DeviceSampleStatus::kOk &&
          output.results[s].candidates == 0) {
        ++device_top_p;
        // The device drew from the same survivors in id order: emulate that draw.
        auto dist = on_cpu[s].distribution(row, masks[s].empty() ? nullptr : masks[s].data());
        ASSERT_TRUE(dist) << dist.error().what();
        auto got = on_gpu[s].finish_device(
            output.results[s], output.candidates,
            std::span(output.top)
                .subspan(s * sampling::kDeviceTopEntries, sampling::kDeviceTopEntries),
            output.host_rows[s]);
        ASSERT_TRUE(got) << got.error().what();
        std::sort(dist->begin(), dist->end(),
                  [](const auto& a, const auto& b) { return a.id < b.id; });
        const double u = sampling::philox_uniform(1000 + s, s % 3, 0);
        double cumulative = 0.0;
        std::int32_t expected = dist->back().id;
        for (const auto& e : *dist) {
          cumulative += e.logprob;  // a probability here
          if (cumulative > u) {
            expected = e.id;
            break;
          }
        }
        if (expected != got->id) ++mismatched;
        // The reported logprob is the raw row's log-softmax at the chosen token.
        double max = -1e30, sum = 0.0;
        for (float v : row)
          max = std::max<double>(max, v);
        for (float v : row)
          sum += std::exp(static_cast<double>(v) - max);
        EXPECT_NEAR(got->logprob, row[got->id] - max - std::log(sum), 1e-3);
        continue;
      }
      auto want = on_cpu[s].try_sample(row, masks[s].empty() ? nullptr : masks[s].data());
      auto got = on_gpu[s].finish_device(
          output.results[s], output.candidates,
          std::span(output.top)
              .subspan(s * sampling::kDeviceTopEntries, sampling::kDeviceTopEntries),
          output.host_rows[s]);
      ASSERT_EQ(static_cast<bool>(want), static_cast<bool>(got))
          << "seed " << s << ": cpu " << (want ? "ok" : want.error().what()) << ", gpu "
          << (got ? "ok" : got.error().what());
      if (!want) continue;
      if (want->id != got->id) {
        ++mismatched;
        continue;
      }
      EXPECT_NEAR(want->logprob, got->logprob, 1e-3) << "seed " << s;
      ASSERT_EQ(want->top.size(), got->top.size()) << "seed " << s;
      for (std::size_t k = 0; k < want->top.size(); ++k) {
        EXPECT_EQ(want->top[k].id, got->top[k].id) << "seed " << s << " top " << k;
        EXPECT_NEAR(want->top[k].logprob, got->top[k].logprob, 1e-3);
      }
      if (c.mask == 2) {
        EXPECT_EQ(got->id, 123);
      }
    }
    if (c.flat) EXPECT_GT(device_top_p, kSeeds / 2);
    if (c.params.temperature == 0.0f || c.mask == 2) {
      EXPECT_EQ(mismatched, 0);
    } else {
      // Besides the summation order, the device's expf may differ from the host's by an ulp
      // or two, and cuBLAS may pick another algorithm (other last bits) in another process.
      EXPECT_LE(mismatched, 3);
    }
  }
}

// A row's draw depends on that row alone: the same descriptions sampled one at a time and
// all together give the same results.
TEST(CudaSampler, RowsDoNotDependOnTheirBatch) {
  const auto devices = cuda::visible_devices();
  if (devices.devices.empty())
    GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason << ")";
  auto loaded = load_model(testing::source_dir() / "models/weft-tiny");
  ASSERT_TRUE(loaded) << loaded.error().what();
  const int vocab = loaded->model.spec().vocab_size;
  CudaModelOptions o;
  o.num_pages = 16;
  auto created = CudaModel::create(loaded->model, o);
  ASSERT_TRUE(created) << created.error().what();
  CudaModel& gpu = *created;
  StepBatch step;
  std::vector<std::int32_t> table{*gpu.allocate_page()};
  step.tokens = {1, 2, 3, 4, 5, 6};
  step.positions = {0, 1, 2, 3, 4, 5};
  step.sequences.push_back({0, 6, table, false});
  std::vector<sampling::DeviceSampleRow> rows;
  model::DeviceSamplingInput all;
  for (int s = 0; s < 24; ++s) {
    SamplingParams p;
    p.temperature = 0.5f + 0.1f * (s % 7);
    p.top_p = s % 2 ? 0.9f : 1.0f;
    p.top_k = s % 3 == 0 ? 20 : 0;
    SequenceSampler sampler(p, step.tokens, 99 + s);
    auto row = sampler.device_row(vocab, all.edits);
    ASSERT_TRUE(row);
    all.rows.push_back(*row);
  }
  ASSERT_TRUE(gpu.launch(step));
  model::DeviceSamplingOutput together;
  ASSERT_TRUE(gpu.sample(all, together));
  for (std::size_t s = 0; s < all.rows.size(); ++s) {
    model::DeviceSamplingInput one;
    one.rows = {all.rows[s]};
    ASSERT_TRUE(gpu.launch(step));
    model::DeviceSamplingOutput alone;
    ASSERT_TRUE(gpu.sample(one, alone));
    const auto& a = alone.results[0];
    const auto& t = together.results[s];
    EXPECT_EQ(a.status, t.status) << s;
    EXPECT_EQ(a.token, t.token) << s;
    EXPECT_EQ(a.candidates, t.candidates) << s;
    EXPECT_EQ(a.total, t.total) << s;
    EXPECT_EQ(a.raw_sum, t.raw_sum) << s;
    if (a.status != sampling::DeviceSampleStatus::kOk || a.offset < 0 || t.offset < 0) continue;
    for (int k = 0; k < a.candidates; ++k) {
      EXPECT_EQ(alone.candidates[a.offset + k].id, together.candidates[t.offset + k].id);
      EXPECT_EQ(alone.candidates[a.offset + k].weight, together.candidates[t.offset + k].weight);
    }
  }
}

// sample() without a launched step, or with a row outside it, is an error, not a crash.
TEST(CudaSampler, RejectsSamplingWithoutAStepOrOutsideIt) {
  const auto devices = cuda::visible_devices();
  if (devices.devices.empty())
    GTEST_SKIP() << "no GPU visible (" << devices.unavailable_reason << ")";
  auto loaded = load_model(testing::source_dir() / "models/weft-tiny");
  ASSERT_TRUE(loaded) << loaded.error().what();
  CudaModelOptions o;
  o.num_pages = 4;
  auto created = CudaModel::create(loaded->model, o);
  ASSERT_TRUE(created);
  CudaModel& gpu = *created;
  model::DeviceSamplingInput input;
  input.rows.resize(1);
  model::DeviceSamplingOutput out;
  EXPECT_FALSE(gpu.sample(input, out));
  StepBatch step;
  std::vector<std::int32_t> table{*gpu.allocate_page()};
  step.tokens = {1, 2};
  step.positions = {0, 1};
  step.sequences.push_back({0, 2, table, false});
  ASSERT_TRUE(gpu.launch(step));
  input.rows[0].row = 1;  // the step has one logit row
  auto bad = gpu.sample(input, out);
  ASSERT_FALSE(bad);
  EXPECT_NE(std::string(bad.error().what()).find("invalid description"), std::string::npos);
  ASSERT_TRUE(gpu.launch(step));
  input.rows[0].row = 0;
  EXPECT_TRUE(gpu.sample(input, out));
}

}  // namespace
}  // namespace weft
