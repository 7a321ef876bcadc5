// The forward pass with int8 and fp8 (e4m3) KV pages (kernels/kv_dtype.hpp): greedy decoding
// of every fixture model and of weft-tiny keeps the fp32-KV tokens until the first near tie,
// the logits stay close to fp32 KV's, and weft-tiny's held-out perplexity barely moves.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/paged_attention.hpp"
#include "loaders/mapped_file.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/tokenizer_json.hpp"
#include "runtime/model/perplexity.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

using model::KvCache;
using model::SequenceSlice;
using model::StepBatch;

const std::filesystem::path kTinyDir = std::filesystem::path(WEFT_SOURCE_DIR) / "models/weft-tiny";

int argmax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

// The gap between the largest logit and the runner-up.
float margin(const float* row, int n) {
  const int best = argmax(row, n);
  float second = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (i != best) second = std::max(second, row[i]);
  return row[best] - second;
}

// A greedy run: each step's logits (the last prompt row, then one row per decoded token).
struct Greedy {
  std::vector<int> tokens;
  std::vector<std::vector<float>> rows;
};

// Prefills `prompt` in one step, then decodes `steps` tokens greedily (feeding back its own
// choice, or `forced` tokens when given, so two runs can be compared step by step).
Greedy run_greedy(const model::Model& m, KvDtype dtype, const std::vector<int>& prompt, int steps,
                  const std::vector<int>& forced = {}) {
  cpu::ThreadPool pool(2);
  auto layout = m.kv_layout(4);
  layout.dtype = dtype;
  const int len = static_cast<int>(prompt.size());
  KvCache kv(layout, (len + steps + 3) / 4);
  StepBatch step;
  step.tokens = prompt;
  for (int i = 0; i < len; ++i)
    step.positions.push_back(i);
  SequenceSlice seq{0, len, {}, false};
  for (int p = 0; p < kv.num_pages(); ++p)
    seq.page_table.push_back(*kv.allocate_page());
  step.sequences.push_back(seq);
  const int vocab = m.spec().vocab_size;
  Greedy g;
  std::vector<float> logits;
  for (int k = 0; k < steps; ++k) {
    auto ok = m.forward(step, kv, logits, pool);
    EXPECT_TRUE(ok) << ok.error().what();
    if (!ok) return g;
    g.rows.push_back(logits);
    g.tokens.push_back(argmax(logits.data(), vocab));
    const int next =
        k < static_cast<int>(forced.size()) ? forced[static_cast<std::size_t>(k)] : g.tokens.back();
    step.tokens = {next};
    step.positions = {len + k};
    step.sequences[0].token_begin = 0;
    step.sequences[0].token_count = 1;
  }
  return g;
}

struct Comparison {
  int agreed = 0;         // tokens equal before the first near tie (or to the end)
  int first_tie = -1;     // the step of the first near tie, -1 when none
  float worst_error = 0;  // max |quantized - fp32| logit over the compared steps
  float logit_scale = 0;  // max |fp32 logit| there
};

// Runs fp32 KV greedily, then `dtype` KV forced along the same tokens, and compares them
// step by step until the first step whose fp32 margin is under `near_tie`.
Comparison compare(const model::Model& m, KvDtype dtype, const std::vector<int>& prompt, int steps,
                   float near_tie) {
  const Greedy want = run_greedy(m, KvDtype::kF32, prompt, steps);
  const Greedy got = run_greedy(m, dtype, prompt, steps, want.tokens);
  const int vocab = m.spec().vocab_size;
  Comparison c;
  for (std::size_t k = 0; k < want.rows.size() && k < got.rows.size(); ++k) {
    const auto& w = want.rows[k];
    for (int i = 0; i < vocab; ++i) {
      c.logit_scale = std::max(c.logit_scale, std::fabs(w[static_cast<std::size_t>(i)]));
      c.worst_error = std::max(c.worst_error, std::fabs(got.rows[k][static_cast<std::size_t>(i)] -
                                                        w[static_cast<std::size_t>(i)]));
    }
    if (margin(w.data(), vocab) < near_tie) {
      c.first_tie = static_cast<int>(k);
      break;
    }
    EXPECT_EQ(got.tokens[k], want.tokens[k]) << kv_dtype_name(dtype) << " step " << k
                                             << " (fp32 margin " << margin(w.data(), vocab) << ")";
    if (got.tokens[k] != want.tokens[k]) break;
    ++c.agreed;
  }
  return c;
}

// The fixture models are random (their logits are small and close together), so "near" is
// relative to the step's largest logit: a margin under 1% of it for int8 (whose logit error
// stays under 0.7% of it here), 5% for fp8 (under 3%).
class KvQuantFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(KvQuantFixtures, Int8GreedyMatchesFp32UntilTheFirstNearTie) {
  const auto dir = testing::fixture_dir(GetParam());
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  const auto refs = testing::read_reference(dir);
  for (std::size_t p = 0; p < refs.size(); ++p) {
    const int steps = static_cast<int>(refs[p].greedy_ids.size());
    const auto& m = loaded->model;
    const Greedy f32 = run_greedy(m, KvDtype::kF32, refs[p].prompt_ids, 1);
    float range = 0;
    for (float x : f32.rows[0])
      range = std::max(range, std::fabs(x));
    for (auto dtype : {KvDtype::kInt8, KvDtype::kFp8E4M3}) {
      const float near_tie = (dtype == KvDtype::kInt8 ? 0.01f : 0.05f) * range;
      const Comparison c = compare(m, dtype, refs[p].prompt_ids, steps, near_tie);
      std::cout << "[ measured ] " << GetParam() << " prompt " << p << " " << kv_dtype_name(dtype)
                << ": " << c.agreed << " of " << steps << " greedy tokens before "
                << (c.first_tie < 0 ? "the end" : "a near tie") << ", max |logit error| "
                << c.worst_error << " (max |logit| " << c.logit_scale << ")\n";
      // int8 rounds each element to 1/254 of its row's range; fp8 to 1/16 of each value.
      const float tolerance = dtype == KvDtype::kInt8 ? 0.03f : 0.1f;
      EXPECT_LE(c.worst_error, tolerance * c.logit_scale) << kv_dtype_name(dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvQuantFixtures, ::testing::ValuesIn(testing::fixture_models()),
                         [](const auto& info) { return info.param; });

// weft-tiny is trained: its logits have real margins. Greedy continuations of held-out text
// with int8 KV keep fp32 KV's tokens until the first step whose margin is under 0.15 (about
// twice the largest logit error int8 KV makes there, 0.03-0.06).
TEST(KvQuantWeftTiny, Int8GreedyMatchesFp32UntilTheFirstNearTie) {
  auto loaded = load_model(kTinyDir);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  auto tokenizer = loaders::load_tokenizer(kTinyDir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().what();
  auto text = MappedFile::open(kTinyDir / "heldout-head.txt");
  ASSERT_TRUE(text.ok());
  const std::string_view all = text->text();
  int agreed = 0;
  for (std::size_t start : {0u, 3000u, 9000u}) {
    auto ids = tokenizer->tokenizer->encode(all.substr(start, 600), true);
    ASSERT_TRUE(ids.ok());
    const std::vector<int> prompt(ids->begin(), ids->end());
    const Comparison c = compare(loaded->model, KvDtype::kInt8, prompt, 32, 0.15f);
    std::cout << "[ measured ] weft-tiny text at " << start << " (" << prompt.size()
              << " tokens) int8: " << c.agreed << " of 32 greedy tokens before "
              << (c.first_tie < 0 ? "the end" : "a near tie") << ", max |logit error| "
              << c.worst_error << " (max |logit| " << c.logit_scale << ")\n";
    EXPECT_LE(c.worst_error, 0.01f * c.logit_scale);
    agreed += c.agreed;
  }
  EXPECT_GT(agreed, 0) << "every run hit a near tie at once: the test compared nothing";
}

// Held-out perplexity with quantized KV stays within 1% (int8) and 3% (fp8) of fp32 KV's.
TEST(KvQuantWeftTiny, HeldOutPerplexityBarelyMoves) {
  auto loaded = load_model(kTinyDir);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  auto tokenizer = loaders::load_tokenizer(kTinyDir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().what();
  auto text = MappedFile::open(kTinyDir / "heldout-head.txt");
  ASSERT_TRUE(text.ok());
  auto ids = tokenizer->tokenizer->encode(text->text().substr(0, 4000), true);
  ASSERT_TRUE(ids.ok());
  cpu::ThreadPool pool(2);
  model::PerplexityOptions options;
  options.window = 512;
  options.stride = 256;
  double base = 0;
  for (auto dtype : {KvDtype::kF32, KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    options.kv_dtype = dtype;
    auto result = model::sliding_window_perplexity(loaded->model, *ids, options, pool);
    ASSERT_TRUE(result.ok()) << result.error().what();
    std::cout << "[ measured ] weft-tiny held-out perplexity (" << ids->size() << " tokens), "
              << kv_dtype_name(dtype) << " KV: " << result->perplexity << "\n";
    if (dtype == KvDtype::kF32) {
      base = result->perplexity;
      continue;
    }
    EXPECT_NE(result->perplexity, base) << kv_dtype_name(dtype) << " KV changed nothing?";
    EXPECT_NEAR(result->perplexity, base, (dtype == KvDtype::kInt8 ? 0.01 : 0.03) * base)
        << kv_dtype_name(dtype);
  }
}

// A cache's page layout: the quantized types add a scale per (token, kv head) row after the
// elements, and take about half the bytes of bf16 (a quarter of f32).
TEST(KvQuantLayout, QuantizedPagesHoldAboutTwiceTheTokensOfBf16) {
  model::KvLayout layout{32, 8, 128, 16, KvDtype::kBF16};  // Llama-3-8B's KV shape
  const std::size_t bf16 = layout.bytes_per_page();
  EXPECT_EQ(bf16, 32u * 2 * 8 * 16 * 128 * 2);
  layout.dtype = KvDtype::kInt8;
  const std::size_t int8 = layout.bytes_per_page();
  EXPECT_EQ(int8, 32u * (2 * 8 * 16 * 128 + 2 * 8 * 16 * 4));
  EXPECT_NEAR(static_cast<double>(bf16) / static_cast<double>(int8), 256.0 / 132.0, 1e-9);
  layout.dtype = KvDtype::kFp8E4M3;
  EXPECT_EQ(layout.bytes_per_page(), int8);
  layout.dtype = KvDtype::kF32;
  EXPECT_EQ(layout.bytes_per_page(), 2 * bf16);
  // Odd shapes keep the scales 16-byte aligned.
  model::KvLayout odd{3, 1, 6, 3, KvDtype::kInt8};
  EXPECT_EQ(odd.scales_offset(), 48u);  // 36 bytes of elements, aligned
  EXPECT_EQ(odd.bytes_per_layer_block(), 80u);
}

// KvCache stores a token's rows where PagedKv reads them, with the row's scale.
TEST(KvQuantLayout, StoreTokenWritesQuantizedRowsAndScales) {
  model::KvLayout layout{2, 2, 4, 3, KvDtype::kInt8};
  KvCache kv(layout, 2);
  const float k[8] = {1, -2, 4, 0.5f, 0, 0, 0, 0};
  const float v[8] = {8, 8, -8, 1, 0.25f, 0.5f, -1, 0};
  kv.store_token(1, 1, 2, k, v);
  const void* pages[] = {kv.layer_bytes(1, 1)};
  const cpu::PagedKv view{pages, 3, 2, 4, KvDtype::kInt8, layout.scales_offset()};
  EXPECT_FLOAT_EQ(view.key_scale(2, 0), 4.0f / 127);
  EXPECT_EQ(view.key_scale(2, 1), 0.0f);  // a row of zeros
  EXPECT_FLOAT_EQ(view.value_scale(2, 0), 8.0f / 127);
  EXPECT_FLOAT_EQ(view.value_scale(2, 1), 1.0f / 127);
  const auto* key = static_cast<const std::int8_t*>(view.key(2, 0));
  EXPECT_EQ(key[0], 32);  // 1 * 127 / 4 = 31.75
  EXPECT_EQ(key[1], -64);
  EXPECT_EQ(key[2], 127);
  const auto* value = static_cast<const std::int8_t*>(view.value(2, 1));
  EXPECT_EQ(value[2], -127);
  EXPECT_EQ(value[1], 64);  // 0.5 * 127 = 63.5, to even
  // Nothing else of the cache was written.
  EXPECT_EQ(view.key_scale(0, 0), 0.0f);
  EXPECT_EQ(static_cast<const std::int8_t*>(view.key(1, 0))[0], 0);
}

}  // namespace
}  // namespace weft
