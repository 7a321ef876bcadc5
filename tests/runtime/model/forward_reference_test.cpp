// The CPU forward pass against transformers' logits for every fixture model (made by
// tests/fixtures/make_models.py): prefill and cached decode, both kernel paths, several
// sequences in one flat batch, chunked prefill and awkward page sizes.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loaders/model_loader.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

using model::KvCache;
using model::SequenceSlice;
using model::StepBatch;
using testing::ReferencePrompt;

constexpr double kRelativeTolerance = 1e-4;

// |got - want| <= 1e-4 * max|want| over one row set, as the acceptance asks.
void expect_close(const float* got, const float* want, std::size_t n, const std::string& what) {
  float max_ref = 0.0f, max_err = 0.0f;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_ref = std::max(max_ref, std::fabs(want[i]));
    const float err = std::fabs(got[i] - want[i]);
    if (err > max_err) {
      max_err = err;
      worst = i;
    }
  }
  EXPECT_LE(max_err, kRelativeTolerance * max_ref)
      << what << ": worst element " << worst << " got " << got[worst] << " want " << want[worst]
      << " (max |ref| " << max_ref << ")";
}

int argmax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

// Grows a sequence's page table to cover `length` positions.
void reserve(KvCache& kv, std::vector<std::int32_t>& table, int length) {
  while (static_cast<int>(table.size()) < kv.pages_for(length)) {
    auto page = kv.allocate_page();
    ASSERT_TRUE(page.has_value()) << "fixture test ran out of KV pages";
    table.push_back(*page);
  }
}

struct Fixture {
  LoadedModel loaded;
  std::vector<ReferencePrompt> prompts;
  int vocab = 0;
};

Fixture load(const std::string& name) {
  const auto dir = testing::fixture_dir(name);
  auto loaded = load_model(dir);
  if (!loaded) throw loaded.error();
  Fixture f{std::move(loaded.value()), testing::read_reference(dir), 0};
  f.vocab = f.loaded.model.spec().vocab_size;
  return f;
}

// Prefills one prompt in one step, then decodes the reference's greedy tokens one by one.
void check_prompt(const Fixture& f, const ReferencePrompt& ref, int page_size, cpu::KernelPath path,
                  const std::string& what) {
  const auto& model = f.loaded.model;
  cpu::ThreadPool pool(2);
  KvCache kv(model.kv_layout(page_size), 64);
  const int len = static_cast<int>(ref.prompt_ids.size());
  StepBatch step;
  step.tokens.assign(ref.prompt_ids.begin(), ref.prompt_ids.end());
  for (int i = 0; i < len; ++i)
    step.positions.push_back(i);
  SequenceSlice seq{0, len, {}, true};
  reserve(kv, seq.page_table, len);
  step.sequences.push_back(seq);
  std::vector<float> logits;
  auto ok = model.forward(step, kv, logits, pool, path);
  ASSERT_TRUE(ok) << ok.error().what();
  ASSERT_EQ(logits.size(), ref.prefill.size());
  for (int t = 0; t < len; ++t) {
    expect_close(logits.data() + t * f.vocab, ref.prefill.data() + t * f.vocab, f.vocab,
                 what + " prefill row " + std::to_string(t));
  }
  int next = argmax(logits.data() + (len - 1) * f.vocab, f.vocab);
  const float max_logit = *std::max_element(ref.prefill.begin(), ref.prefill.end());
  for (std::size_t k = 0; k < ref.greedy_ids.size(); ++k) {
    // A clear margin is one the allowed error cannot flip.
    if (ref.greedy_margins[k] > 20 * kRelativeTolerance * std::fabs(max_logit)) {
      EXPECT_EQ(next, ref.greedy_ids[k]) << what << " greedy token " << k;
    }
    if (k + 1 == ref.greedy_ids.size()) break;
    // Feed the reference's token so later steps compare like with like.
    const int pos = len + static_cast<int>(k);
    step.tokens = {ref.greedy_ids[k]};
    step.positions = {pos};
    reserve(kv, step.sequences[0].page_table, pos + 1);
    step.sequences[0].token_count = 1;
    step.sequences[0].all_logits = false;
    ok = model.forward(step, kv, logits, pool, path);
    ASSERT_TRUE(ok) << ok.error().what();
    expect_close(logits.data(), ref.decode.data() + k * f.vocab, f.vocab,
                 what + " decode step " + std::to_string(k));
    next = argmax(logits.data(), f.vocab);
  }
}

class ForwardReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardReference, PrefillAndDecodeMatchTransformersOnBothKernelPaths) {
  const Fixture f = load(GetParam());
  for (std::size_t p = 0; p < f.prompts.size(); ++p) {
    const std::string what = GetParam() + " prompt " + std::to_string(p);
    check_prompt(f, f.prompts[p], 16, cpu::KernelPath::kScalar, what + " scalar");
    if (cpu::avx2_available())
      check_prompt(f, f.prompts[p], 16, cpu::KernelPath::kAvx2, what + " avx2");
  }
}

TEST_P(ForwardReference, PageSizeOneAndThreeGiveTheSameLogits) {
  const Fixture f = load(GetParam());
  for (int page_size : {1, 3}) {
    check_prompt(f, f.prompts.back(), page_size, cpu::KernelPath::kAuto,
                 GetParam() + " page_size " + std::to_string(page_size));
  }
}

// All prompts prefill together in one flat batch, then decode together, one token each.
TEST_P(ForwardReference, SequencesShareOneStep) {
  const Fixture f = load(GetParam());
  const auto& model = f.loaded.model;
  cpu::ThreadPool pool(2);
  KvCache kv(model.kv_layout(4), 64);
  StepBatch step;
  for (const auto& ref : f.prompts) {
    SequenceSlice seq{
        static_cast<int>(step.tokens.size()), static_cast<int>(ref.prompt_ids.size()), {}, true};
    for (std::size_t i = 0; i < ref.prompt_ids.size(); ++i) {
      step.tokens.push_back(ref.prompt_ids[i]);
      step.positions.push_back(static_cast<int>(i));
    }
    reserve(kv, seq.page_table, seq.token_count);
    step.sequences.push_back(seq);
  }
  std::vector<float> logits;
  auto ok = model.forward(step, kv, logits, pool);
  ASSERT_TRUE(ok) << ok.error().what();
  std::size_t row = 0;
  for (std::size_t p = 0; p < f.prompts.size(); ++p) {
    const auto& ref = f.prompts[p];
    for (std::size_t t = 0; t < ref.prompt_ids.size(); ++t, ++row) {
      expect_close(logits.data() + row * f.vocab, ref.prefill.data() + t * f.vocab, f.vocab,
                   GetParam() + " batched prompt " + std::to_string(p));
    }
  }
  for (std::size_t k = 0; k + 1 < f.prompts[0].greedy_ids.size(); ++k) {
    StepBatch decode;
    for (std::size_t p = 0; p < f.prompts.size(); ++p) {
      const auto& ref = f.prompts[p];
      const int pos = static_cast<int>(ref.prompt_ids.size() + k);
      auto seq = step.sequences[p];
      seq.token_begin = static_cast<int>(p);
      seq.token_count = 1;
      seq.all_logits = false;
      reserve(kv, seq.page_table, pos + 1);
      step.sequences[p].page_table = seq.page_table;
      decode.tokens.push_back(ref.greedy_ids[k]);
      decode.positions.push_back(pos);
      decode.sequences.push_back(seq);
    }
    ok = model.forward(decode, kv, logits, pool);
    ASSERT_TRUE(ok) << ok.error().what();
    for (std::size_t p = 0; p < f.prompts.size(); ++p) {
      expect_close(logits.data() + p * f.vocab, f.prompts[p].decode.data() + k * f.vocab, f.vocab,
                   GetParam() + " batched decode prompt " + std::to_string(p) + " step " +
                       std::to_string(k));
    }
  }
}

// A sequence's logits keep their bits whatever else is in its step: each prompt prefilled and
// decoded alone, then all of them in one flat batch. Seeded sampling gives a request the same
// tokens alone or batched only if they do (docs/reliability.md).
TEST_P(ForwardReference, LogitsKeepTheirBitsAloneOrBatched) {
  const Fixture f = load(GetParam());
  const auto& model = f.loaded.model;
  cpu::ThreadPool pool(2);
  const std::size_t vocab = static_cast<std::size_t>(f.vocab);
  // Prefill then one decode step of the reference's first greedy token, for the prompts in
  // `which` together; returns each prompt's prefill rows followed by its decode row.
  auto run = [&](const std::vector<std::size_t>& which) {
    KvCache kv(model.kv_layout(4), 64);
    StepBatch step;
    for (auto p : which) {
      const auto& ids = f.prompts[p].prompt_ids;
      SequenceSlice seq{
          static_cast<int>(step.tokens.size()), static_cast<int>(ids.size()), {}, true};
      for (std::size_t i = 0; i < ids.size(); ++i) {
        step.tokens.push_back(ids[i]);
        step.positions.push_back(static_cast<int>(i));
      }
      reserve(kv, seq.page_table, seq.token_count + 1);
      step.sequences.push_back(seq);
    }
    std::vector<std::vector<float>> out(which.size());
    std::vector<float> logits;
    auto ok = model.forward(step, kv, logits, pool);
    EXPECT_TRUE(ok) << ok.error().what();
    std::size_t row = 0;
    for (std::size_t i = 0; i < which.size(); ++i) {
      const std::size_t n = f.prompts[which[i]].prompt_ids.size() * vocab;
      out[i].assign(logits.begin() + static_cast<std::ptrdiff_t>(row),
                    logits.begin() + static_cast<std::ptrdiff_t>(row + n));
      row += n;
    }
    StepBatch decode;
    for (std::size_t i = 0; i < which.size(); ++i) {
      const auto& ref = f.prompts[which[i]];
      auto seq = step.sequences[i];
      seq.token_begin = static_cast<int>(i);
      seq.token_count = 1;
      seq.all_logits = false;
      decode.tokens.push_back(ref.greedy_ids[0]);
      decode.positions.push_back(static_cast<int>(ref.prompt_ids.size()));
      decode.sequences.push_back(seq);
    }
    ok = model.forward(decode, kv, logits, pool);
    EXPECT_TRUE(ok) << ok.error().what();
    for (std::size_t i = 0; i < which.size(); ++i)
      out[i].insert(out[i].end(), logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                    logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    return out;
  };
  std::vector<std::size_t> all;
  for (std::size_t p = 0; p < f.prompts.size(); ++p)
    all.push_back(p);
  const auto together = run(all);
  for (std::size_t p = 0; p < f.prompts.size(); ++p) {
    const auto alone = run({p});
    ASSERT_EQ(alone[0].size(), together[p].size());
    for (std::size_t i = 0; i < alone[0].size(); ++i) {
      ASSERT_EQ(alone[0][i], together[p][i])
          << GetParam() << " prompt " << p << " of " << f.prompts.size() << ", row " << i / vocab
          << " (the last is the decode step), token " << i % vocab;
    }
  }
}

// A prompt prefilled in two chunks sees the first chunk through the KV pages. Dynamic NTK
// rope is excluded: its frequencies depend on the length at each step, so chunking changes
// the result in transformers too.
TEST_P(ForwardReference, ChunkedPrefillMatchesOneStep) {
  const Fixture f = load(GetParam());
  if (f.loaded.model.spec().rope.scaling == model::RopeScaling::kDynamic) {
    GTEST_SKIP() << "dynamic NTK rope scales by the length at each step: chunking changes "
                    "the logits in transformers too";
  }
  const auto& ref = f.prompts.back();
  const auto& model = f.loaded.model;
  cpu::ThreadPool pool(2);
  KvCache kv(model.kv_layout(5), 16);
  const int len = static_cast<int>(ref.prompt_ids.size());
  const int split = len / 2;
  std::vector<std::int32_t> table;
  reserve(kv, table, len);
  for (auto [begin, end] : {std::pair{0, split}, std::pair{split, len}}) {
    StepBatch step;
    for (int i = begin; i < end; ++i) {
      step.tokens.push_back(ref.prompt_ids[static_cast<std::size_t>(i)]);
      step.positions.push_back(i);
    }
    step.sequences.push_back({0, end - begin, table, true});
    std::vector<float> logits;
    auto ok = model.forward(step, kv, logits, pool);
    ASSERT_TRUE(ok) << ok.error().what();
    for (int i = begin; i < end; ++i) {
      expect_close(logits.data() + (i - begin) * f.vocab, ref.prefill.data() + i * f.vocab, f.vocab,
                   GetParam() + " chunked row " + std::to_string(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForwardReference, ::testing::ValuesIn(testing::fixture_models()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace weft
