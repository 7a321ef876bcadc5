// The flattened grammar's size: an expression used at many places (a pattern's `.`) lowers to
// one shared helper rule outside inlined repetition copies, not a copy per use. The fuzzed
// schemas of docs/reliability.md ("Fuzz target speed") flattened to ~250,000 elements.
#include <gtest/gtest.h>

#include <string>

#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

std::size_t element_count(const FlatGrammar& g) {
  std::size_t n = 0;
  for (const auto& r : g.rules)
    for (const auto& a : r.alts)
      n += a.size();
  return n;
}

// `^ab|c|d|...` inside a JSON Schema string: every unanchored alternative is wrapped in `.*`,
// where `.` is a JSON string character (its UTF-8 ranges and escapes, ~50 alternatives).
std::string many_alternatives(int n) {
  std::string p = "^ab";
  for (int i = 0; i < n; ++i) {
    p += '|';
    p += static_cast<char>('c' + i % 20);
  }
  return p + "|z$";
}

TEST(FlattenSize, ARepeatedDotIsOneHelper) {
  const std::string schema = R"({"type":"string","pattern":")" + many_alternatives(40) + R"("})";
  auto g = json_schema_to_grammar(schema, {});
  ASSERT_TRUE(g) << g.error().what();
  auto flat = flatten_grammar(*g);
  ASSERT_TRUE(flat) << flat.error().what();
  // One copy of the JSON string character and a few elements per alternative; a copy per use
  // made 17,594 elements in 248 rules.
  EXPECT_LT(element_count(*flat), 2000u);
  EXPECT_LT(flat->rules.size(), 150u);
  using testing::matches;
  EXPECT_TRUE(matches(*flat, "\"abc\""));
  EXPECT_TRUE(matches(*flat, "\"x\\u0001y\\\"c\\t\""));
  EXPECT_TRUE(matches(*flat, "\"\xC3\xA9z\""));
  EXPECT_TRUE(matches(*flat, "\"ab\""));
  EXPECT_FALSE(matches(*flat, "\"xab\""));  // `^ab` is anchored, `z$` too
  EXPECT_FALSE(matches(*flat, "\"zy\""));
  EXPECT_FALSE(matches(*flat, "\"q\\x\""));  // not a JSON escape
}

TEST(FlattenSize, RegexDotsShareTheirHelper) {
  // 300 uses of `.` (a choice of UTF-8 ranges) in one pattern.
  std::string p;
  for (int i = 0; i < 300; ++i)
    p += ".a";
  auto g = regex_to_grammar(p);
  ASSERT_TRUE(g) << g.error().what();
  auto flat = flatten_grammar(*g);
  ASSERT_TRUE(flat) << flat.error().what();
  EXPECT_LT(flat->rules.size(), 40u);
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += i % 2 ? "\xE2\x82\xAC"
                    "a"
                  : "xa";
  EXPECT_TRUE(testing::matches(*flat, text));
  text.back() = 'b';
  EXPECT_FALSE(testing::matches(*flat, text));
  EXPECT_FALSE(testing::matches(*flat, text.substr(0, text.size() - 2)));
}

// Bounded repetitions inline a small rule into each copy; those copies keep helpers of their
// own (the matcher pairs them up by position), so the repetition's size still grows with it.
TEST(FlattenSize, InlinedCopiesKeepTheirOwnHelpers) {
  Grammar g;
  const RuleId item = g.add_rule("item");
  g.set_body(item, g.choice({g.literal("ab"),
                             g.sequence({g.byte('c'), g.choice({g.byte('d'), g.literal("ee")})})}));
  const RuleId root = g.add_rule("root", g.repeat(g.ref(item), 0, 6));
  g.set_root(root);
  auto flat = flatten_grammar(g);
  ASSERT_TRUE(flat) << flat.error().what();
  // Six copies, each with the helper of (d | ee) of its own, beside item's own.
  std::size_t helpers = 0;
  for (const auto& r : flat->rules)
    for (const auto& a : r.alts)
      if (a.size() == 1 && !a[0].is_rule && a[0].index < flat->byte_sets.size() &&
          flat->byte_sets[a[0].index].test('d'))
        ++helpers;
  EXPECT_EQ(helpers, 6u + 1u);
  EXPECT_TRUE(testing::matches(*flat, "abceecdab"));
  EXPECT_FALSE(testing::matches(*flat, "abababababababab"));
}

}  // namespace
}  // namespace weft::grammar
