// Constrained generation through the Engine's public API on weft-tiny: response formats are
// compiled at submit (bad ones fail it), every sample follows its grammar, a complete output
// finishes with `stop`, and the step loop reports the masks it computed under the forward
// pass.

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cstdio>

#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/pushdown.hpp"
#include "tests/actors/tiny_engine.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

namespace asio = boost::asio;

using test_support::tiny_config;

struct Sample {
  std::string text;
  FinishReason reason = FinishReason::kError;
  int tokens = 0;
};

std::vector<Sample> collect(std::shared_ptr<RequestStream> stream, int n) {
  std::vector<Sample> out(static_cast<std::size_t>(n));
  for (int finals = 0; finals < n;) {
    Event e = stream->next(asio::use_future).get();
    Sample& s = out[static_cast<std::size_t>(e.index)];
    if (e.kind == Event::Kind::kFinal) {
      s.reason = e.finish_reason;
      s.tokens = e.usage.completion_tokens;
      ++finals;
    } else {
      s.text += e.text;
    }
  }
  return out;
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

GenerateRequest request(ResponseFormat format, int n, std::uint64_t seed, int max_tokens) {
  GenerateRequest r;
  r.prompt = "The whale";
  r.sampling.temperature = 1.0f;
  r.sampling.n = n;
  r.sampling.seed = seed;
  r.sampling.max_tokens = max_tokens;
  r.response_format = std::move(format);
  return r;
}

class ConstraintEngineTest : public ::testing::Test {
 protected:
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
};

TEST_F(ConstraintEngineTest, JsonSchemaSamplesFollowTheSchemaAndStop) {
  Engine engine(runtime.executor(), tiny_config());
  ResponseFormat f;
  f.type = ResponseFormat::Type::kJsonSchema;
  f.source = R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},
    "age":{"type":"integer","minimum":0,"maximum":99},"kind":{"enum":["whale","ship"]}},
    "required":["name","age","kind"]})";
  auto stream = engine.submit(request(f, 8, 7, 80), asio::use_future).get();
  int stopped = 0;
  for (const Sample& s : collect(stream, 8)) {
    ASSERT_TRUE(s.reason == FinishReason::kStop || s.reason == FinishReason::kLength) << s.text;
    if (s.reason == FinishReason::kStop) {
      ++stopped;
      EXPECT_TRUE(matches(f, s.text)) << s.text;
      EXPECT_EQ(s.text.front(), '{');
      EXPECT_EQ(s.text.back(), '}');
    }
  }
  EXPECT_GT(stopped, 0);
  EngineMetrics m = engine.metrics(asio::use_future).get();
  EXPECT_GT(m.constrained_steps, 0u);
  EXPECT_GT(m.masks_computed, 0u);
  EXPECT_EQ(m.finished_error, 0u);
}

TEST_F(ConstraintEngineTest, ForcedOutputFinishesWithStopWithoutAnEos) {
  Engine engine(runtime.executor(), tiny_config());
  ResponseFormat f;
  f.type = ResponseFormat::Type::kRegex;
  f.source = "(yes|no)";
  auto stream = engine.submit(request(f, 4, 1, 50), asio::use_future).get();
  for (const Sample& s : collect(stream, 4)) {
    EXPECT_EQ(s.reason, FinishReason::kStop);
    EXPECT_TRUE(s.text == "yes" || s.text == "no") << s.text;
    EXPECT_LE(s.tokens, 3);
  }
}

TEST_F(ConstraintEngineTest, GrammarAndJsonObjectFormats) {
  Engine engine(runtime.executor(), tiny_config());
  ResponseFormat g;
  g.type = ResponseFormat::Type::kGrammar;
  g.source = "root ::= \"[\" num (\",\" num)* \"]\"\nnum ::= [1-9] [0-9]?\n";
  ResponseFormat o;
  o.type = ResponseFormat::Type::kJsonObject;
  auto gs = engine.submit(request(g, 4, 3, 60), asio::use_future).get();
  auto os = engine.submit(request(o, 4, 3, 60), asio::use_future).get();
  for (const Sample& s : collect(gs, 4)) {
    if (s.reason == FinishReason::kStop) {
      EXPECT_TRUE(matches(g, s.text)) << s.text;
    }
    EXPECT_EQ(s.text.front(), '[');
  }
  for (const Sample& s : collect(os, 4)) {
    if (s.reason == FinishReason::kStop) {
      EXPECT_TRUE(matches(o, s.text)) << s.text;
    }
    EXPECT_EQ(s.text.front(), '{');
  }
}

TEST_F(ConstraintEngineTest, UnconstrainedNeighboursAreUnchanged) {
  Engine engine(runtime.executor(), tiny_config());
  GenerateRequest plain;
  plain.prompt = "Call me Ishmael.";
  plain.sampling.temperature = 0;
  plain.sampling.max_tokens = 16;
  plain.sampling.ignore_eos = true;
  auto alone = collect(engine.submit(plain, asio::use_future).get(), 1);
  ResponseFormat f;
  f.type = ResponseFormat::Type::kJsonObject;
  auto constrained = engine.submit(request(f, 8, 5, 40), asio::use_future).get();
  auto beside = collect(engine.submit(plain, asio::use_future).get(), 1);
  collect(constrained, 8);
  EXPECT_EQ(alone[0].text, beside[0].text);
}

// Jump-forward: the schema's fixed parts ("kind":"whale","size") are appended without
// sampling, so a request takes fewer steps than it has output tokens; turned off, every token
// is sampled. Either way every complete output follows the schema. (The two runs' texts are
// not compared: forced text is split into the longest tokens, which the model need not
// choose.)
struct JumpRun {
  int stopped = 0;
  EngineMetrics metrics;
};

JumpRun run_whale_schema(bool jump_forward, const ResponseFormat& f) {
  Runtime runtime{RuntimeOptions{.worker_threads = 2}};
  EngineConfig config = tiny_config();
  config.jump_forward = jump_forward;
  Engine engine(runtime.executor(), config);
  JumpRun out;
  // One sample at a time, so that each step samples exactly one token.
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    auto stream = engine.submit(request(f, 1, seed, 40), asio::use_future).get();
    const Sample s = collect(stream, 1)[0];
    EXPECT_TRUE(s.reason == FinishReason::kStop || s.reason == FinishReason::kLength) << s.text;
    if (s.reason == FinishReason::kStop) {
      ++out.stopped;
      EXPECT_TRUE(matches(f, s.text)) << s.text;
    } else {
      EXPECT_EQ(s.tokens, 40) << s.text;
    }
    EXPECT_EQ(s.text.rfind("{\"kind\":\"whale\",\"size\":", 0), 0u) << s.text;
  }
  out.metrics = engine.metrics(asio::use_future).get();
  EXPECT_EQ(out.metrics.finished_error, 0u);
  return out;
}

TEST(ConstraintJumpForwardTest, ForcedTokensSaveStepsAndKeepTheOutputValid) {
  ResponseFormat f;
  f.type = ResponseFormat::Type::kJsonSchema;
  f.source = R"({"type":"object","properties":{"kind":{"const":"whale"},
    "size":{"type":"integer","minimum":0,"maximum":999}},"required":["kind","size"]})";
  const JumpRun on = run_whale_schema(true, f);
  EXPECT_GT(on.stopped, 0);
  EXPECT_GT(on.metrics.jump_forward_tokens, 0u);
  EXPECT_EQ(on.metrics.steps + on.metrics.jump_forward_tokens, on.metrics.generated_tokens);
  EXPECT_LT(on.metrics.steps, on.metrics.generated_tokens);

  const JumpRun off = run_whale_schema(false, f);
  EXPECT_GT(off.stopped, 0);
  EXPECT_EQ(off.metrics.jump_forward_tokens, 0u);
  EXPECT_EQ(off.metrics.steps, off.metrics.generated_tokens);
  std::printf(
      "whale schema, 4 requests: jump-forward on: %llu steps for %llu tokens (%llu forced);"
      " off: %llu steps for %llu tokens\n",
      static_cast<unsigned long long>(on.metrics.steps),
      static_cast<unsigned long long>(on.metrics.generated_tokens),
      static_cast<unsigned long long>(on.metrics.jump_forward_tokens),
      static_cast<unsigned long long>(off.metrics.steps),
      static_cast<unsigned long long>(off.metrics.generated_tokens));
}

void expect_submit_error(Engine& engine, ResponseFormat f, std::string_view needle) {
  try {
    engine.submit(request(std::move(f), 1, 1, 8), asio::use_future).get();
    ADD_FAILURE() << "expected submit to fail with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "'" << e.what() << "' lacks '" << needle << "'";
  }
}

TEST_F(ConstraintEngineTest, BadFormatsFailTheSubmit) {
  Engine engine(runtime.executor(), tiny_config());
  using T = ResponseFormat::Type;
  expect_submit_error(engine, {T::kJsonSchema, R"({"type":"number","multipleOf":3})", false},
                      "response_format: ");
  expect_submit_error(engine, {T::kJsonSchema, R"({"type":"number","multipleOf":3})", false},
                      "unsupported keyword 'multipleOf'");
  expect_submit_error(engine, {T::kJsonSchema, R"({"type":"object",)", false}, "not valid JSON");
  expect_submit_error(engine,
                      {T::kJsonSchema, R"({"type":"integer","minimum":5,"maximum":1})", false},
                      "no integer lies within the bounds");
  expect_submit_error(engine, {T::kRegex, "a(b", false}, "regex at offset");
  expect_submit_error(engine, {T::kGrammar, "root ::= \"a\" b\n", false}, "b");
  expect_submit_error(engine, {T::kGrammar, "root ::= \"a\n", false}, "line 1, column");
  // The engine still serves after refusing.
  ResponseFormat ok{T::kRegex, "[ab]{2}", false};
  auto s = collect(engine.submit(request(ok, 1, 1, 8), asio::use_future).get(), 1);
  EXPECT_EQ(s[0].reason, FinishReason::kStop);
  EXPECT_EQ(s[0].text.size(), 2u);
}

// A grammar whose stacks multiply with every byte (3 * 2^k after k bytes of "a", the first 15
// bytes forced to "a") passes the matcher's bound on live stacks (grammar::kMaxLiveStacks):
// that request finishes with an error naming the limit, while an ambiguous counted repetition
// beside it (merged, a few stacks) runs to its end as usual.
TEST_F(ConstraintEngineTest, TooAmbiguousGrammarFinishesWithAnErrorNamingTheLimit) {
  Engine engine(runtime.executor(), tiny_config());
  ResponseFormat bad;
  bad.type = ResponseFormat::Type::kGrammar;
  bad.source = "root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"a\"{15} \"d\"\n";
  ResponseFormat counted;
  counted.type = ResponseFormat::Type::kRegex;
  counted.source = "(a|ab|b){0,3000}";
  auto bad_stream = engine.submit(request(bad, 1, 7, 60), asio::use_future).get();
  auto counted_stream = engine.submit(request(counted, 2, 7, 60), asio::use_future).get();
  std::string text, error;
  FinishReason reason = FinishReason::kStop;
  for (;;) {
    Event e = bad_stream->next(asio::use_future).get();
    if (e.kind != Event::Kind::kFinal) {
      text += e.text;
      continue;
    }
    reason = e.finish_reason;
    error = e.error;
    break;
  }
  EXPECT_EQ(reason, FinishReason::kError) << text;
  EXPECT_NE(error.find("response_format: "), std::string::npos) << error;
  EXPECT_NE(error.find("more than " + std::to_string(grammar::kMaxLiveStacks)), std::string::npos)
      << error;
  EXPECT_NE(error.find("live stacks"), std::string::npos) << error;
  EXPECT_EQ(text.find_first_not_of('a'), std::string::npos) << text;
  for (const Sample& s : collect(counted_stream, 2)) {
    EXPECT_TRUE(s.reason == FinishReason::kStop || s.reason == FinishReason::kLength) << s.text;
    EXPECT_EQ(s.text.find_first_not_of("ab"), std::string::npos) << s.text;
    if (s.reason == FinishReason::kStop) {
      EXPECT_TRUE(matches(counted, s.text)) << s.text;
    }
  }
}

}  // namespace
}  // namespace weft
