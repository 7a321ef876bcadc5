// Per-request speculation (docs/speculative.md#per-request) on weft-tiny with prompt lookup:
// a request may turn speculation off or cap its draft tokens, keeping the plain greedy output;
// a method the engine was not started with, or an unknown one, is refused with the field named.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>

#include "tests/actors/collect_stream.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;
using test_support::collect;
using test_support::Collected;

const char* kPrompt =
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox";

GenerateRequest greedy(const std::string& speculate, int tokens) {
  GenerateRequest r;
  r.prompt = kPrompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 32;
  r.sampling.ignore_eos = true;
  r.sampling.speculate = speculate;
  r.sampling.spec_tokens = tokens;
  return r;
}

struct Delta {
  std::uint64_t verifications = 0, draft_tokens = 0;
};

class SpeculativeRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineConfig c = test_support::tiny_config();
    c.prefix_cache = false;
    c.speculate = "prompt-lookup";
    c.spec_tokens = 4;
    engine_ = std::make_unique<Engine>(runtime_.executor(), c);
  }
  void TearDown() override { engine_->shutdown(asio::use_future).get(); }

  // Runs one request alone; its output and the speculation counters it added.
  Collected run(GenerateRequest r, Delta& d) {
    const EngineMetrics before = engine_->metrics(asio::use_future).get();
    Collected out = collect(engine_->submit(std::move(r), asio::use_future).get());
    const EngineMetrics after = engine_->metrics(asio::use_future).get();
    d.verifications = after.speculative_verifications - before.speculative_verifications;
    d.draft_tokens = after.speculative_draft_tokens - before.speculative_draft_tokens;
    return out;
  }

  Runtime runtime_{RuntimeOptions{.worker_threads = 2}};
  std::unique_ptr<Engine> engine_;
};

TEST_F(SpeculativeRequestTest, OffAndCappedRequestsKeepThePlainOutput) {
  Delta off, capped, full, named;
  const Collected a = run(greedy("off", 0), off);
  const Collected b = run(greedy("", 1), capped);
  const Collected c = run(greedy("", 0), full);
  const Collected d = run(greedy("prompt-lookup", 0), named);
  for (const Collected* x : {&a, &b, &c, &d}) {
    EXPECT_EQ(x->reason, FinishReason::kLength) << x->error;
    EXPECT_EQ(x->ids.size(), 32u);
  }
  EXPECT_EQ(b.ids, a.ids);
  EXPECT_EQ(c.ids, a.ids);
  EXPECT_EQ(d.ids, a.ids);
  EXPECT_EQ(off.verifications, 0u) << "speculation off still verified drafts";
  ASSERT_GT(capped.verifications, 0u) << "the repetitive prompt gave prompt lookup nothing";
  EXPECT_EQ(capped.draft_tokens, capped.verifications) << "tokens 1: one draft token a tree";
  EXPECT_GT(full.draft_tokens, full.verifications) << "the engine's depth is 4";
  EXPECT_GT(named.verifications, 0u);
}

TEST_F(SpeculativeRequestTest, AnotherMethodOrABadValueIsRefused) {
  auto refused = [&](GenerateRequest r) -> std::string {
    try {
      collect(engine_->submit(std::move(r), asio::use_future).get());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(refused(greedy("draft", 0)).find("speculation.method: \"draft\""), std::string::npos);
  EXPECT_NE(refused(greedy("medusa", 0)).find("not one of off, prompt-lookup, draft"),
            std::string::npos);
  EXPECT_NE(refused(greedy("", 65)).find("speculation.tokens"), std::string::npos);
}

TEST(SpeculativeRequestPlainEngine, NamingAMethodNeedsASpeculator) {
  Runtime runtime{RuntimeOptions{.worker_threads = 1}};
  Engine engine(runtime.executor(), test_support::tiny_config());
  GenerateRequest r = greedy("prompt-lookup", 0);
  try {
    collect(engine.submit(std::move(r), asio::use_future).get());
    ADD_FAILURE() << "a plain engine accepted speculation.method prompt-lookup";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--speculate prompt-lookup"), std::string::npos)
        << e.what();
  }
  // "off" is always fine.
  const Collected out = collect(engine.submit(greedy("off", 0), asio::use_future).get());
  EXPECT_EQ(out.reason, FinishReason::kLength) << out.error;
  engine.shutdown(asio::use_future).get();
}

}  // namespace
}  // namespace weft
