#include "runtime/grammar/regex_to_grammar.hpp"

#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using testing::matches;

struct Case {
  const char* regex;
  std::vector<const char*> accept, reject;
};

TEST(RegexToGrammar, AcceptsAndRejects) {
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"ab", "abcd", ""}},
      {"a|bc|", {"a", "bc", ""}, {"abc"}},
      {"\\d+", {"0", "123"}, {"", "a", "1a"}},
      {"\\w\\W\\s\\S", {"a! x", "_\xC3\xA9\tz"}, {"aa x", "a!xx"}},
      {"[a-c]*x?", {"", "abcx", "x"}, {"xx", "d"}},
      {"[^0-9]", {"a", "\xE4\xB8\xAD"}, {"5", ""}},
      {"[\\d_]{2,4}", {"1_", "____"}, {"1", "12345", "a1"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaa"}, {"a"}},
      {"(ab)+", {"ab", "abab"}, {"aba", ""}},
      {"(?:x|y)z", {"xz", "yz"}, {"z"}},
      {"(?<year>\\d{4})-\\d\\d", {"2024-01"}, {"24-01"}},
      {"^ab$", {"ab"}, {"abab"}},
      {"a.c",
       {"abc",
        "a\xC3\xA9"
        "c"},
       {"a\nc", "ac"}},
      {"\\.\\*\\x41\\u00e9\\n", {".*A\xC3\xA9\n"}, {"x*A\xC3\xA9\n"}},
      {"a+?b*?", {"a", "aabb"}, {"b"}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"[a\\-z]", {"-", "a", "z"}, {"b"}},
      {"[\\]]", {"]"}, {"["}},
  };
  for (const auto& c : cases) {
    auto g = regex_to_grammar(c.regex);
    ASSERT_TRUE(g.ok()) << c.regex << ": " << g.error().what();
    for (const char* s : c.accept)
      EXPECT_TRUE(matches(*g, s)) << "/" << c.regex << "/ should accept '" << s << "'";
    for (const char* s : c.reject)
      EXPECT_FALSE(matches(*g, s)) << "/" << c.regex << "/ should reject '" << s << "'";
  }
}

Grammar json_string_grammar(const char* regex, bool search) {
  Grammar g;
  RuleId root = g.add_rule("root");
  RegexOptions o;
  o.json_string = true;
  o.search = search;
  auto e = regex_to_expr(g, regex, o);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().what());
  g.set_body(root, e.ok() ? *e : g.empty());
  return g;
}

TEST(RegexToGrammar, SearchModeAndJsonEscaping) {
  Grammar g = json_string_grammar("ab", true);  // JSON Schema: unanchored
  EXPECT_TRUE(matches(g, "xxabyy"));
  EXPECT_FALSE(matches(g, "xxa"));
  Grammar anchored = json_string_grammar("^ab", true);
  EXPECT_TRUE(matches(anchored, "abyy"));
  EXPECT_FALSE(matches(anchored, "xab"));
  Grammar quote = json_string_grammar("^\"\\\\\\n$", true);  // the characters " \ newline
  EXPECT_TRUE(matches(quote, "\\\"\\\\\\n"));
  EXPECT_FALSE(matches(quote, "\"\\\n"));
  Grammar any = json_string_grammar("^.$", true);
  EXPECT_TRUE(matches(any, "\\\""));
  EXPECT_TRUE(matches(any, "\\u001f"));
  EXPECT_FALSE(matches(any, "\""));
}

void expect_error(const char* regex, std::string_view needle) {
  auto g = regex_to_grammar(regex);
  ASSERT_FALSE(g.ok()) << "expected an error for /" << regex << "/";
  EXPECT_NE(std::string(g.error().what()).find(needle), std::string::npos)
      << "error '" << g.error().what() << "' lacks '" << needle << "'";
}

TEST(RegexToGrammar, ErrorsHaveTheOffset) {
  expect_error("ab(c", "offset 2: group is not closed");
  expect_error("ab)c", "offset 2: unmatched ')'");
  expect_error("a**", "offset 2: nothing to repeat");
  expect_error("*a", "offset 0: nothing to repeat");
  expect_error("[abc", "offset 0: character class is not closed");
  expect_error("[z-a]", "offset 2: range out of order");
  expect_error("a{3,1}", "offset 1: quantifier {3,1} has its minimum above its maximum");
  expect_error("(a)\\1", "offset 3: backreferences are not supported");
  expect_error("a(?=b)", "offset 1: lookaround groups are not supported");
  expect_error("\\bword", "offset 0: word boundary");
  expect_error("a^b", "offset 1: anchors are supported only at the ends");
  expect_error("a$b", "offset 1: anchor '$'");
  expect_error("abc\\", "offset 3: pattern ends with a backslash");
  expect_error("\\q", "unknown escape");
}

TEST(RegexToGrammar, GarbageNeverCrashes) {
  std::mt19937 rng(11);
  const std::string alphabet = "ab()[]^$-*+?{},0123|\\dws.:<>=!";
  for (int i = 0; i < 5000; ++i) {
    std::string re;
    for (int n = rng() % 20; n-- > 0;)
      re += alphabet[rng() % alphabet.size()];
    auto g = regex_to_grammar(re);
    if (g.ok()) (void)flatten_grammar(*g);
  }
}

}  // namespace
}  // namespace weft::grammar
