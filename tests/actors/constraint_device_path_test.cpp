// Constrained generation through the Engine on the path a GPU takes (sampling on the device,
// masks in the sampling input), with the simulated device of tests/actors/simulated_device.hpp
// standing in for the GPU: every output follows its grammar, a grammar completed by a sampled
// token (no forced tokens after it) ends the output with `stop` and flushes the text held back
// for a stop string, and stop strings found in forced tokens still end the output.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>

#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/pushdown.hpp"
#include "tests/actors/simulated_device.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

struct Output {
  std::string text;
  FinishReason reason = FinishReason::kError;
  int completion_tokens = 0;
  int streamed_tokens = 0;  // token ids the deltas carried
  std::string error;
};

Output collect(std::shared_ptr<RequestStream> stream) {
  Output out;
  for (;;) {
    Event e = stream->next(asio::use_future).get();
    if (e.kind == Event::Kind::kFinal) {
      out.reason = e.finish_reason;
      out.completion_tokens = e.usage.completion_tokens;
      out.error = e.error;
      return out;
    }
    out.text += e.text;
    out.streamed_tokens += static_cast<int>(e.token_ids.size());
  }
}

// Does the whole text match the format's grammar (straight on the pushdown automaton)?
bool matches(const ResponseFormat& format, std::string_view text) {
  auto g = grammar::grammar_for(format);
  if (!g) return false;
  auto flat = grammar::flatten_grammar(*g);
  if (!flat) return false;
  grammar::StackArena arena;
  grammar::Pushdown pda(*flat, arena);
  grammar::StackSet cur, next;
  pda.start(cur);
  for (char c : text) {
    pda.step(cur, static_cast<std::uint8_t>(c), next);
    std::swap(cur, next);
    if (cur.empty() && !cur.accepted) return false;
  }
  return cur.accepted;
}

EngineConfig simulated_config(bool jump_forward) {
  EngineConfig c = test_support::tiny_config();
  c.jump_forward = jump_forward;
  c.make_backend = [](const model::Model& model, int pages) {
    return std::unique_ptr<model::ForwardBackend>(std::make_unique<test_support::SimulatedDevice>(
        model, pages, std::chrono::microseconds(200)));
  };
  return c;
}

GenerateRequest request(ResponseFormat format, int max_tokens, int prompt_token) {
  GenerateRequest r;
  r.prompt_ids = {1, 2, prompt_token};
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  r.response_format = std::move(format);
  return r;
}

// Runs `requests` at once and returns their outputs.
std::vector<Output> run_all(Engine& engine, std::vector<GenerateRequest> requests) {
  std::vector<std::future<std::shared_ptr<RequestStream>>> submitted;
  for (auto& r : requests)
    submitted.push_back(engine.submit(std::move(r), asio::use_future));
  std::vector<Output> out;
  for (auto& s : submitted)
    out.push_back(collect(s.get()));
  return out;
}

class ConstraintDevicePathTest : public ::testing::TestWithParam<bool> {
 protected:
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
};

TEST_P(ConstraintDevicePathTest, JsonSchemaOutputsFollowTheSchema) {
  Engine engine(runtime.executor(), simulated_config(GetParam()));
  ResponseFormat f;
  f.type = ResponseFormat::Type::kJsonSchema;
  f.source = R"({"type":"object","properties":{"kind":{"const":"whale"},
    "size":{"type":"integer","minimum":0,"maximum":999},
    "mood":{"enum":["calm","curious","restless"]}},"required":["kind","size","mood"]})";
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 12; ++i)
    requests.push_back(request(f, 48, 100 + i));
  const std::vector<Output> outputs = run_all(engine, std::move(requests));
  int stopped = 0;
  long tokens = 0;
  for (const Output& o : outputs) {
    ASSERT_NE(o.reason, FinishReason::kError) << o.error;
    EXPECT_EQ(o.streamed_tokens, o.completion_tokens) << o.text;
    tokens += o.completion_tokens;
    if (o.reason == FinishReason::kStop) {
      ++stopped;
      EXPECT_TRUE(matches(f, o.text)) << o.text;
    } else {
      EXPECT_EQ(o.reason, FinishReason::kLength);
      EXPECT_EQ(o.completion_tokens, 48);
    }
  }
  // Short enum and integer values: most outputs finish well within 48 tokens.
  EXPECT_GT(stopped, 6);
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_EQ(m.finished_error, 0u);
  EXPECT_EQ(m.generated_tokens, static_cast<std::uint64_t>(tokens));
  if (GetParam()) {
    EXPECT_GT(m.jump_forward_tokens, 0u);
  } else {
    EXPECT_EQ(m.jump_forward_tokens, 0u);
  }
  engine.shutdown(asio::use_future).get();
}

// A regex completed by a sampled token: without jump-forward nothing is forced, so the output
// ends through the detokenizer's flush; the "c" a stop string "cX" held back still comes out.
TEST_P(ConstraintDevicePathTest, CompletedOutputsFlushHeldText) {
  Engine engine(runtime.executor(), simulated_config(GetParam()));
  ResponseFormat f;
  f.type = ResponseFormat::Type::kRegex;
  f.source = "(abc|abd)";
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = request(f, 16, 200 + i);
    r.sampling.stop = {"cX", "dX"};
    requests.push_back(std::move(r));
  }
  for (const Output& o : run_all(engine, std::move(requests))) {
    EXPECT_EQ(o.reason, FinishReason::kStop) << o.error;
    EXPECT_TRUE(o.text == "abc" || o.text == "abd") << "'" << o.text << "'";
    EXPECT_EQ(o.streamed_tokens, o.completion_tokens);
  }
  engine.shutdown(asio::use_future).get();
}

// A stop string inside the text the grammar forces ends the output there, with `stop`.
TEST(ConstraintDevicePathStopTest, StopStringInForcedTextEndsTheOutput) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  Engine engine(runtime.executor(), simulated_config(true));
  ResponseFormat f;
  f.type = ResponseFormat::Type::kJsonSchema;
  f.source = R"({"type":"object","properties":{"kind":{"const":"whale-of-a-time"}},
    "required":["kind"]})";
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 4; ++i) {
    GenerateRequest r = request(f, 32, 300 + i);
    r.sampling.stop = {"of-a"};
    requests.push_back(std::move(r));
  }
  for (const Output& o : run_all(engine, std::move(requests))) {
    EXPECT_EQ(o.reason, FinishReason::kStop) << o.error;
    EXPECT_EQ(o.text, R"({"kind":"whale-)");
  }
  const EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_GT(m.jump_forward_tokens, 0u);
  EXPECT_EQ(m.finished_error, 0u);
  engine.shutdown(asio::use_future).get();
}

INSTANTIATE_TEST_SUITE_P(JumpForward, ConstraintDevicePathTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "on" : "off"; });

}  // namespace
}  // namespace weft
