#include "runtime/grammar/token_constraint.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime/grammar/constraint_compiler.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using namespace testing;

// byte_vocab plus a few multi-byte tokens; its eos is the second-to-last id.
ConstraintCompiler compiler_for(const TokenizerVocab& vocab) {
  return ConstraintCompiler([vocab]() -> Result<TokenizerVocab> { return vocab; }, vocab.eos_ids);
}

ResponseFormat format(ResponseFormat::Type type, std::string source) {
  ResponseFormat f;
  f.type = type;
  f.source = std::move(source);
  return f;
}

std::int32_t id_of(const TokenizerVocab& v, std::string_view text) {
  for (std::size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == text) return static_cast<std::int32_t>(i);
  ADD_FAILURE() << "no token '" << text << "'";
  return -1;
}

bool allowed(const std::vector<std::uint32_t>& mask, std::int32_t id) {
  return mask[static_cast<std::size_t>(id) / 32] >> (id % 32) & 1u;
}

TEST(TokenConstraint, CompleteWhenNothingButEosMayFollow) {
  TokenizerVocab vocab = byte_vocab({"ye", "yes", "no"});
  auto compiler = compiler_for(vocab);
  auto g = compiler.compile(format(ResponseFormat::Type::kRegex, "(yes|no)!?"));
  ASSERT_TRUE(g.ok()) << g.error().what();
  const int width = static_cast<int>(vocab.tokens.size()) + 7;  // a padded logits row
  TokenConstraint c(*g, width);
  const auto& first = c.next_mask();
  EXPECT_EQ(first.size(), (static_cast<std::size_t>(width) + 31) / 32);
  EXPECT_TRUE(allowed(first, id_of(vocab, "yes")));
  EXPECT_TRUE(allowed(first, id_of(vocab, "n")));
  EXPECT_FALSE(allowed(first, vocab.eos_ids[0]));
  EXPECT_FALSE(allowed(first, width - 1));  // past the vocabulary
  // "yes" may end or take a "!": not complete, eos now allowed.
  EXPECT_EQ(c.accept(id_of(vocab, "yes")), TokenConstraint::Verdict::kContinue);
  EXPECT_TRUE(allowed(c.next_mask(), vocab.eos_ids[0]));
  EXPECT_EQ(c.accept(id_of(vocab, "!")), TokenConstraint::Verdict::kComplete);
  EXPECT_FALSE(c.mask_ready());  // deciding "complete" computed no mask

  TokenConstraint d(*g, width);
  EXPECT_EQ(d.accept(id_of(vocab, "x")), TokenConstraint::Verdict::kRejected);
  EXPECT_EQ(d.accept(id_of(vocab, "no")), TokenConstraint::Verdict::kContinue);
  EXPECT_EQ(d.accept(vocab.eos_ids[0]), TokenConstraint::Verdict::kComplete);
  EXPECT_TRUE(d.is_terminated());
}

TEST(TokenConstraint, MaskIsCachedUntilTheStateChanges) {
  TokenizerVocab vocab = byte_vocab();
  auto compiler = compiler_for(vocab);
  auto g = compiler.compile(
      format(ResponseFormat::Type::kJsonSchema, R"({"type":"array","items":{"type":"integer"}})"));
  ASSERT_TRUE(g.ok()) << g.error().what();
  TokenConstraint c(*g, static_cast<int>(vocab.tokens.size()));
  EXPECT_FALSE(c.mask_ready());
  const auto before = c.next_mask();
  EXPECT_TRUE(c.mask_ready());
  EXPECT_TRUE(allowed(before, '['));
  EXPECT_EQ(c.accept('['), TokenConstraint::Verdict::kContinue);
  EXPECT_FALSE(c.mask_ready());
  EXPECT_TRUE(allowed(c.next_mask(), '1'));
  EXPECT_FALSE(allowed(c.next_mask(), '['));
}

std::string bytes_of(const TokenizerVocab& v, const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::int32_t id : ids)
    out += v.tokens[static_cast<std::size_t>(id)];
  return out;
}

TEST(TokenConstraint, JumpForwardSpellsTheOnlyContinuationInLongestTokens) {
  TokenizerVocab vocab =
      byte_vocab({"{\"", "kind", "\":\"", "wh", "whale", "\",\"", "size", "\":", "\": "});
  auto compiler = compiler_for(vocab);
  auto g = compiler.compile(
      format(ResponseFormat::Type::kJsonSchema,
             R"({"type":"object","properties":{"kind":{"const":"whale"},"size":{"type":"integer"}},
          "required":["kind","size"]})"));
  ASSERT_TRUE(g.ok()) << g.error().what();
  TokenConstraint c(*g, static_cast<int>(vocab.tokens.size()));
  ASSERT_EQ(c.accept('{'), TokenConstraint::Verdict::kContinue);
  auto forced = c.jump_forward(100);
  EXPECT_EQ(forced.verdict, TokenConstraint::Verdict::kContinue);
  ASSERT_FALSE(forced.tokens.empty());
  const std::string text = bytes_of(vocab, forced.tokens);
  // The forced bytes are a prefix of the only continuation, in the longest tokens; the
  // trailing "\":" is held back because "\": " starts with it.
  EXPECT_EQ(text.rfind("\"kind\":\"whale\",\"size", 0), 0u) << text;
  EXPECT_EQ(forced.tokens[1], id_of(vocab, "kind"));
  EXPECT_NE(std::find(forced.tokens.begin(), forced.tokens.end(), id_of(vocab, "whale")),
            forced.tokens.end());
  EXPECT_EQ(std::find(forced.tokens.begin(), forced.tokens.end(), id_of(vocab, "\":")),
            forced.tokens.end());
  // The matcher stands after them: the free part may start.
  EXPECT_TRUE(allowed(c.next_mask(), id_of(vocab, "\": ")) ||
              allowed(c.next_mask(), id_of(vocab, "\":")));
  // Nothing is forced while the integer may go on or end.
  for (char ch : std::string("\":7")) {
    ASSERT_EQ(c.accept(static_cast<unsigned char>(ch)), TokenConstraint::Verdict::kContinue);
  }
  EXPECT_TRUE(c.jump_forward(100).tokens.empty());
}

TEST(TokenConstraint, JumpForwardRespectsTheBudgetAndCompletes) {
  TokenizerVocab vocab = byte_vocab({"abc"});
  auto compiler = compiler_for(vocab);
  auto g = compiler.compile(format(ResponseFormat::Type::kRegex, "x(abcabcd|y)"));
  ASSERT_TRUE(g.ok()) << g.error().what();
  TokenConstraint capped(*g, static_cast<int>(vocab.tokens.size()));
  ASSERT_EQ(capped.accept('x'), TokenConstraint::Verdict::kContinue);
  ASSERT_EQ(capped.accept('a'), TokenConstraint::Verdict::kContinue);
  auto one = capped.jump_forward(1);
  ASSERT_EQ(one.tokens.size(), 1u);
  EXPECT_EQ(vocab.tokens[static_cast<std::size_t>(one.tokens[0])], "b");
  EXPECT_EQ(one.verdict, TokenConstraint::Verdict::kContinue);
  auto rest = capped.jump_forward(10);
  EXPECT_EQ(bytes_of(vocab, rest.tokens), "cabcd");
  EXPECT_EQ(rest.tokens.size(), 3u);  // "c", "abc", "d"
  EXPECT_EQ(rest.verdict, TokenConstraint::Verdict::kComplete);
  EXPECT_EQ(capped.jump_forward(10).tokens.size(), 0u);
  EXPECT_EQ(capped.jump_forward(0).tokens.size(), 0u);
}

TEST(ConstraintCompiler, CachesBySourceAndReportsErrors) {
  TokenizerVocab vocab = byte_vocab();
  int loads = 0;
  ConstraintCompiler compiler(
      [&]() -> Result<TokenizerVocab> {
        ++loads;
        return vocab;
      },
      vocab.eos_ids, 2);
  auto a = compiler.compile(format(ResponseFormat::Type::kRegex, "a+"));
  auto b = compiler.compile(format(ResponseFormat::Type::kRegex, "a+"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(loads, 1);
  ResponseFormat object;
  object.type = ResponseFormat::Type::kJsonObject;
  auto compact = compiler.compile(object);
  object.flexible_whitespace = true;
  auto flexible = compiler.compile(object);
  ASSERT_TRUE(compact.ok() && flexible.ok());
  EXPECT_NE(compact->get(), flexible->get());

  auto bad = compiler.compile(format(ResponseFormat::Type::kGrammar, "root ::= \"a\" |\n  [b-\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.error().what()).find("line 2, column"), std::string::npos)
      << bad.error().what();
  auto schema = compiler.compile(
      format(ResponseFormat::Type::kJsonSchema, R"({"properties":{"a":{"not":{}}}})"));
  ASSERT_FALSE(schema.ok());
  EXPECT_NE(std::string(schema.error().what()).find("'#/properties/a': unsupported keyword 'not'"),
            std::string::npos)
      << schema.error().what();
}

// Requests racing on one schema share one compilation (the vocabulary load is slowed so they
// all arrive while it runs); different schemas each compile once, from parallel threads.
TEST(ConstraintCompiler, ConcurrentRequestsShareOneCompilationPerSchema) {
  TokenizerVocab vocab = byte_vocab();
  ConstraintCompiler compiler(
      [&]() -> Result<TokenizerVocab> {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return vocab;
      },
      vocab.eos_ids);
  const std::vector<std::string> sources = {"a+", "(ab)*c", "[0-9]{2,4}", "x|y|z"};
  std::vector<std::shared_ptr<const CompiledGrammar>> got(16);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      auto r = compiler.compile(format(ResponseFormat::Type::kRegex, sources[i % sources.size()]));
      if (r) got[i] = *r;
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(compiler.compile_count(), sources.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NE(got[i], nullptr) << i;
    EXPECT_EQ(got[i], got[i % sources.size()]) << i;
    if (i >= 1 && i < sources.size()) {
      EXPECT_NE(got[i], got[0]);
    }
  }
  // Later requests hit the cache.
  auto again = compiler.compile(format(ResponseFormat::Type::kRegex, "a+"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), got[0].get());
  EXPECT_EQ(compiler.compile_count(), sources.size());
}

}  // namespace
}  // namespace weft::grammar
