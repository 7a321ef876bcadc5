// Speculative decoding end to end on weft-tiny (docs/speculative.md): greedy output equals plain
// greedy decoding token for token, with prompt lookup and with a draft model (weft-tiny drafting
// for itself), as chains and as token trees; batched requests with different trees; every KV
// page comes back; sampled requests finish with the right length.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <filesystem>

#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::collect;
using test_support::Collected;

// Summary-like: the continuation tends to repeat phrases of the prompt.
const char* kPrompts[] = {
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
    "in my purse, I thought I would sail about. Call me Ishmael. Some years ago",
    "It is a way I have of driving off the spleen. It is a way"};

GenerateRequest greedy(const std::string& prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = 2;
  return r;
}

struct SpecRun {
  std::vector<Collected> outputs;
  EngineMetrics metrics;
};

// Every prompt at once (one batch), greedy.
SpecRun run_all(EngineConfig config, int max_tokens) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), std::move(config));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const char* p : kPrompts)
    streams.push_back(engine.submit(greedy(p, max_tokens), asio::use_future).get());
  SpecRun run;
  for (auto& s : streams)
    run.outputs.push_back(collect(s));
  run.metrics = engine.metrics(asio::use_future).get();
  engine.shutdown(asio::use_future).get();
  return run;
}

EngineConfig speculative(const std::string& how, int tokens, int width) {
  EngineConfig c = test_support::tiny_config();
  c.prefix_cache = false;  // pages in use must fall to 0, none kept
  c.speculate = how;
  if (how == "draft") c.draft_model_dir = c.model_dir;
  c.spec_tokens = tokens;
  c.spec_width = width;
  return c;
}

class SpeculativeEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineConfig plain = test_support::tiny_config();
    plain.prefix_cache = false;
    plain_ = new SpecRun(run_all(plain, kTokens));
  }
  static void TearDownTestSuite() { delete plain_; }

  void expect_same_as_plain(const SpecRun& run, const std::string& what) {
    ASSERT_EQ(run.outputs.size(), plain_->outputs.size());
    for (std::size_t i = 0; i < run.outputs.size(); ++i) {
      const Collected& a = plain_->outputs[i];
      const Collected& b = run.outputs[i];
      EXPECT_EQ(b.reason, FinishReason::kLength) << what << " request " << i << ": " << b.error;
      EXPECT_EQ(b.ids, a.ids) << what << ": request " << i << " differs from plain greedy";
      EXPECT_EQ(b.text, a.text) << what << " request " << i;
      ASSERT_EQ(b.logprobs.size(), a.logprobs.size());
      for (std::size_t t = 0; t < a.logprobs.size(); ++t) {
        EXPECT_NEAR(b.logprobs[t].logprob, a.logprobs[t].logprob, 1e-3) << what << " token " << t;
        ASSERT_EQ(b.logprobs[t].top.size(), 2u);
        EXPECT_EQ(b.logprobs[t].top[0].id, a.logprobs[t].top[0].id);
      }
    }
    EXPECT_EQ(run.metrics.kv_pages_used, 0) << what << ": pages not given back";
    EXPECT_GT(run.metrics.speculative_verifications, 0u) << what << ": never speculated";
  }

  static constexpr int kTokens = 40;
  static SpecRun* plain_;
};
SpecRun* SpeculativeEngineTest::plain_ = nullptr;

TEST_F(SpeculativeEngineTest, PromptLookupChainGivesPlainGreedyOutput) {
  const SpecRun run = run_all(speculative("prompt-lookup", 4, 1), kTokens);
  expect_same_as_plain(run, "prompt lookup");
  EXPECT_GT(run.metrics.speculative_accepted_tokens, 0u);
  EXPECT_LT(run.metrics.steps, plain_->metrics.steps) << "speculation saved no step";
}

TEST_F(SpeculativeEngineTest, PromptLookupTreeGivesPlainGreedyOutput) {
  expect_same_as_plain(run_all(speculative("prompt-lookup", 4, 3), kTokens), "prompt lookup tree");
}

TEST_F(SpeculativeEngineTest, SelfDraftAcceptsEverythingAndGivesPlainGreedyOutput) {
  const SpecRun run = run_all(speculative("draft", 4, 1), kTokens);
  expect_same_as_plain(run, "draft chain");
  // weft-tiny drafting for itself proposes exactly what it verifies: the upper bound.
  EXPECT_EQ(run.metrics.speculative_accepted_tokens, run.metrics.speculative_draft_tokens);
  EXPECT_LE(run.metrics.steps, plain_->metrics.steps / 3);
}

TEST_F(SpeculativeEngineTest, DraftTreeGivesPlainGreedyOutput) {
  const SpecRun run = run_all(speculative("draft", 3, 3), kTokens);
  expect_same_as_plain(run, "draft tree");
  EXPECT_GT(run.metrics.speculative_draft_tokens, run.metrics.speculative_accepted_tokens)
      << "a tree of width 3 proposes siblings that are rejected";
}

// weft-tiny-draft (a smaller model, trained to agree with weft-tiny), every sequence's
// proposals made together: plain greedy output, and some of its drafts accepted.
TEST_F(SpeculativeEngineTest, WeftTinyDraftGivesPlainGreedyOutput) {
  EngineConfig c = speculative("draft", 4, 1);
  c.draft_model_dir = std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny-draft";
  if (!std::filesystem::exists(c.draft_model_dir + "/model.safetensors")) {
    GTEST_SKIP() << c.draft_model_dir << " has no weights";
  }
  const SpecRun run = run_all(c, kTokens);
  expect_same_as_plain(run, "weft-tiny-draft");
  EXPECT_GT(run.metrics.speculative_accepted_tokens, 0u);
}

TEST_F(SpeculativeEngineTest, ALargeBatchTurnsSpeculationOff) {
  EngineConfig c = speculative("prompt-lookup", 4, 1);
  c.spec_step_budget = 2;  // fewer draft tokens than the three sequences decoding together
  const SpecRun run = run_all(c, kTokens);
  for (std::size_t i = 0; i < run.outputs.size(); ++i)
    EXPECT_EQ(run.outputs[i].ids, plain_->outputs[i].ids);
  // Only the tail, when fewer than three sequences decode, may speculate.
  EXPECT_LT(run.metrics.speculative_verifications, plain_->metrics.steps / 4);
}

TEST_F(SpeculativeEngineTest, SampledRequestsWithADraftTreeFinish) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  EngineConfig c = speculative("draft", 3, 2);
  Engine engine(runtime.executor(), c);
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    GenerateRequest r = greedy(kPrompts[0], 30);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    const Collected out = collect(engine.submit(std::move(r), asio::use_future).get());
    EXPECT_EQ(out.reason, FinishReason::kLength) << out.error;
    EXPECT_EQ(out.ids.size(), 30u);
  }
  // The same seed gives the same output again.
  GenerateRequest again = greedy(kPrompts[0], 30);
  again.sampling.temperature = 0.9f;
  again.sampling.top_p = 0.95f;
  again.sampling.seed = 1;
  GenerateRequest again2 = again;
  const Collected x = collect(engine.submit(std::move(again), asio::use_future).get());
  const Collected y = collect(engine.submit(std::move(again2), asio::use_future).get());
  EXPECT_EQ(x.ids, y.ids);
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.kv_pages_used, 0);
  EXPECT_GT(m.speculative_accepted_tokens, 0u);
  engine.shutdown(asio::use_future).get();
}

TEST(SpeculativeEngineConfig, BadSpeculationSettingsAreNamed) {
  Runtime runtime{RuntimeOptions{.worker_threads = 1}};
  EngineConfig c = test_support::tiny_config();
  c.speculate = "medusa";
  EXPECT_NE(std::string(c.validate().error().what()).find("speculate"), std::string::npos);
  c.speculate = "draft";
  EXPECT_NE(std::string(c.validate().error().what()).find("draft_model_dir"), std::string::npos);
  c.draft_model_dir = "/nonexistent/draft";
  try {
    Engine engine(runtime.executor(), c);
    FAIL() << "a missing draft model must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft_model_dir"), std::string::npos) << e.what();
  }
  c.draft_device = "gpu";
  EXPECT_NE(std::string(c.validate().error().what()).find("draft_device"), std::string::npos);
  c.draft_device = "cpu";
  c.speculate = "prompt-lookup";
  c.spec_width = 0;
  EXPECT_NE(std::string(c.validate().error().what()).find("spec_width"), std::string::npos);
}

}  // namespace
}  // namespace weft
