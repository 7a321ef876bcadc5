// Counted repetition (Element::min/max, Frame::count): large bounds of regex {m,n}, string
// lengths and array sizes compile to one element instead of max copies, accept exactly n and
// refuse n + 1, and masks over them equal brute force, near the bounds included.

#include <chrono>

#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using namespace testing;

std::size_t flat_rules(const Grammar& g) {
  auto flat = flatten_grammar(g);
  EXPECT_TRUE(flat.ok()) << flat.error().what();
  return flat.ok() ? flat->rules.size() : 0;
}

std::string repeated(std::string_view unit, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i)
    s += unit;
  return s;
}

TEST(CountedRepeat, RegexBoundsAreExact) {
  auto g = regex_to_grammar("a{300,500}b");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_LT(flat_rules(*g), 20u);  // spelt out, it would be ~500 rules
  EXPECT_FALSE(matches(*g, repeated("a", 299) + "b"));
  EXPECT_TRUE(matches(*g, repeated("a", 300) + "b"));
  EXPECT_TRUE(matches(*g, repeated("a", 417) + "b"));
  EXPECT_TRUE(matches(*g, repeated("a", 500) + "b"));
  EXPECT_FALSE(matches(*g, repeated("a", 501) + "b"));
  auto open = regex_to_grammar("(?:xy){1000,}");
  ASSERT_TRUE(open.ok());
  EXPECT_FALSE(matches(*open, repeated("xy", 999)));
  EXPECT_TRUE(matches(*open, repeated("xy", 1000)));
  EXPECT_TRUE(matches(*open, repeated("xy", 1003)));
  EXPECT_FALSE(matches(*open, repeated("xy", 1000) + "x"));
}

TEST(CountedRepeat, StringLengthsCountCharactersAndEscapes) {
  auto g = json_schema_to_grammar(R"({"type":"string","minLength":100,"maxLength":912})");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_LT(flat_rules(*g), 100u);
  EXPECT_FALSE(matches(*g, "\"" + repeated("a", 99) + "\""));
  EXPECT_TRUE(matches(*g, "\"" + repeated("a", 100) + "\""));
  EXPECT_TRUE(matches(*g, "\"" + repeated("a", 912) + "\""));
  EXPECT_FALSE(matches(*g, "\"" + repeated("a", 913) + "\""));
  // A multi-byte character and an escape are one character each.
  EXPECT_TRUE(matches(*g, "\"" + repeated("\xc3\xa9", 456) + repeated("\\n", 456) + "\""));
  EXPECT_FALSE(matches(*g, "\"" + repeated("\xc3\xa9", 456) + repeated("\\n", 457) + "\""));
  EXPECT_TRUE(matches(*g, "\"" + repeated("\\u00e9", 912) + "\""));
  EXPECT_FALSE(matches(*g, "\"" + repeated("\\u00e9", 913) + "\""));
}

// docs/reliability.md's slow fuzz schema: an untyped property with a large maxLength was
// spelt out as 912 optional characters (~0.17 s to compile in a release build).
TEST(CountedRepeat, UntypedPropertyWithLargeMaxLengthCompilesSmall) {
  auto g = json_schema_to_grammar(
      R"({"type":"object","properties":{"p":{"maxLength":912}},"required":["p"]})");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_LT(flat_rules(*g), 400u);
  EXPECT_TRUE(matches(*g, "{\"p\":\"" + repeated("z", 912) + "\"}"));
  EXPECT_FALSE(matches(*g, "{\"p\":\"" + repeated("z", 913) + "\"}"));
}

TEST(CountedRepeat, ArraySizesAreExact) {
  auto g = json_schema_to_grammar(
      R"({"type":"array","items":{"type":"integer"},"minItems":40,"maxItems":300})");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_LT(flat_rules(*g), 100u);
  auto array = [](std::size_t n) {
    std::string s = "[";
    for (std::size_t i = 0; i < n; ++i)
      s += (i ? ",7" : "7");
    return s + "]";
  };
  EXPECT_FALSE(matches(*g, array(39)));
  EXPECT_TRUE(matches(*g, array(40)));
  EXPECT_TRUE(matches(*g, array(300)));
  EXPECT_FALSE(matches(*g, array(301)));
  // prefixItems stay spelt out in front of the counted rest.
  auto p = json_schema_to_grammar(
      R"({"type":"array","prefixItems":[{"const":"a"},{"const":"b"}],"items":{"type":"integer"},"minItems":3,"maxItems":200})");
  ASSERT_TRUE(p.ok()) << p.error().what();
  std::string rest;
  for (int i = 0; i < 198; ++i)
    rest += ",1";
  EXPECT_FALSE(matches(*p, R"(["a","b"])"));
  EXPECT_TRUE(matches(*p, R"(["a","b",1])"));
  EXPECT_TRUE(matches(*p, "[\"a\",\"b\"" + rest + "]"));
  EXPECT_FALSE(matches(*p, "[\"a\",\"b\"" + rest + ",1]"));
  EXPECT_FALSE(matches(*p, R"(["b","a",1])"));
}

// Masks equal brute force all the way through a bounded string, with tokens long enough to
// cross the bound (so the per-count masks near it differ from the ones far from it).
TEST(CountedRepeat, MasksEqualBruteForceAcrossTheBound) {
  std::vector<std::string> extra = {
      "aaaa", "aaaaaaaa", "aaaaaaaaaaaaaaaa", "a\"",      "aa\"}", "\"}",
      "\\n",  "a\\n",     "\xc3\xa9",         "a\xc3\xa9"};
  auto vocab = byte_vocab(extra);
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  for (
      const char* schema :
      {R"({"type":"object","properties":{"s":{"type":"string","minLength":37,"maxLength":45}},"required":["s"]})",
       R"({"type":"array","items":{"type":"string","maxLength":40},"minItems":35,"maxItems":36})"}) {
    auto g = json_schema_to_grammar(schema);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto cg = CompiledGrammar::compile(*g, *trie);
    ASSERT_TRUE(cg.ok()) << cg.error().what();
    // Greedy longest tokens through a document at the upper bounds.
    const bool object = std::string_view(schema).find("object") != std::string_view::npos;
    std::string doc;
    if (object) {
      doc = "{\"s\":\"" + repeated("a", 44) + "\xc3\xa9\"}";
    } else {
      doc = "[";
      for (int i = 0; i < 36; ++i)
        doc += (i ? ",\"" : "\"") + repeated("a", i % 3 == 0 ? 40 : 3) + "\"";
      doc += "]";
    }
    GrammarMatcher m(*cg);
    std::size_t step = 0;
    for (std::size_t i = 0; i < doc.size(); ++step) {
      auto [id, len] = (*trie)->longest_prefix(std::string_view(doc).substr(i));
      ASSERT_GE(id, 0);
      auto fast = fast_mask(m);
      ASSERT_TRUE(same_mask(fast, brute_mask(m, vocab.tokens.size()), vocab))
          << schema << " at byte " << i;
      ASSERT_TRUE(fast[id / 32] >> (id % 32) & 1) << "token '" << vocab.tokens[id] << "' at " << i;
      ASSERT_TRUE(m.accept_token(id));
      i += len;
    }
    EXPECT_TRUE(m.can_terminate());
    // One more character, one more element: refused.
    GrammarMatcher over(*cg);
    std::string longer =
        object ? "{\"s\":\"" + repeated("a", 46) : doc.substr(0, doc.size() - 1) + ",\"\"";
    EXPECT_FALSE(over.accept_bytes(longer)) << schema;
  }
}

// Random walks (each step a token drawn among the allowed ones, so counts jump by several
// characters at once) through bounded strings and arrays: every mask equals brute force.
TEST(CountedRepeat, RandomWalkMasksEqualBruteForce) {
  std::vector<std::string> extra = {"aa",
                                    "aaa",
                                    "aaaaa",
                                    "aaaaaaaaaaa",
                                    "a\"",
                                    "aaa\"",
                                    "\",\"",
                                    "\"]",
                                    "\"}",
                                    "\\n",
                                    "\xc3\xa9",
                                    "\xe6\x97\xa5"
                                    "a",
                                    "a\xf0\x9f\x98"};
  auto vocab = byte_vocab(extra);
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  std::mt19937 rng(7);
  for (
      const char* schema :
      {R"({"type":"string","minLength":34,"maxLength":41})", R"({"type":"string","maxLength":50})",
       R"({"type":"array","items":{"type":"string","minLength":1,"maxLength":35},"minItems":2,"maxItems":40})"}) {
    auto g = json_schema_to_grammar(schema);
    ASSERT_TRUE(g.ok()) << g.error().what();
    auto cg = CompiledGrammar::compile(*g, *trie);
    ASSERT_TRUE(cg.ok()) << cg.error().what();
    for (int walk = 0; walk < 6; ++walk) {
      GrammarMatcher m(*cg);
      std::string text;
      for (int step = 0; step < 120 && !m.is_terminated(); ++step) {
        auto fast = fast_mask(m);
        ASSERT_TRUE(same_mask(fast, brute_mask(m, vocab.tokens.size()), vocab))
            << schema << " after '" << text << "'";
        std::vector<std::int32_t> allowed;
        for (std::size_t t = 0; t < vocab.tokens.size(); ++t)
          if (fast[t / 32] >> (t % 32) & 1) allowed.push_back(static_cast<std::int32_t>(t));
        ASSERT_FALSE(allowed.empty()) << schema << " after '" << text << "'";
        // Prefer the long 'a' runs half of the time, so the walks reach the bounds.
        std::int32_t next =
            allowed[std::uniform_int_distribution<std::size_t>(0, allowed.size() - 1)(rng)];
        for (std::int32_t t : allowed)
          if (rng() % 2 && vocab.tokens[t].size() >= 3 && vocab.tokens[t][0] == 'a') next = t;
        ASSERT_TRUE(m.accept_token(next));
        if (!m.is_terminated()) text += vocab.tokens[next];
      }
    }
  }
}

TEST(CountedRepeat, LargeBoundsCompileFast) {
  auto g = json_schema_to_grammar(
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":5000},"b":{"type":"array","items":{"type":"string","minLength":200,"maxLength":3000},"maxItems":1000},"c":{"maxLength":912}},"required":["a","b","c"]})");
  ASSERT_TRUE(g.ok()) << g.error().what();
  EXPECT_LT(flat_rules(*g), 600u);
  auto vocab = byte_vocab({"abcd", "\"]", "\"}"});
  auto trie = TokenTrie::build(vocab);
  ASSERT_TRUE(trie.ok());
  auto cg = CompiledGrammar::compile(*g, *trie);
  ASSERT_TRUE(cg.ok()) << cg.error().what();
  GrammarMatcher m(*cg);
  std::string doc = "{\"a\":\"" + repeated("abcd", 1250) + "\",\"b\":[\"" + repeated("x", 200) +
                    "\"],\"c\":\"" + repeated("y", 912) + "\"}";
  ASSERT_TRUE(m.accept_bytes(doc));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_LE(m.stack_count(), 4u);
}

}  // namespace
}  // namespace weft::grammar
