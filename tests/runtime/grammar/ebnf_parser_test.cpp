#include "runtime/grammar/ebnf_parser.hpp"

#include "tests/runtime/grammar/grammar_test_util.hpp"

namespace weft::grammar {
namespace {

using testing::matches;

Grammar parse(std::string_view text) {
  auto g = parse_ebnf(text);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().what());
  return g.ok() ? std::move(*g) : Grammar{};
}

struct Case {
  const char* grammar;
  std::vector<const char*> accept, reject;
};

TEST(EbnfParser, AcceptsAndRejects) {
  const std::vector<Case> cases = {
      {R"(root ::= "abc")", {"abc"}, {"", "ab", "abcd", "abd"}},
      {R"(root ::= "a" | "bc" | "")", {"a", "bc", ""}, {"b", "abc"}},
      {R"(root ::= [a-c]+)", {"a", "abccba"}, {"", "d", "abd"}},
      {R"(root ::= [^a-c])", {"d", "\xC3\xA9", "\xF0\x9F\x98\x80"}, {"a", "", "dd", "\xC3"}},
      {R"(root ::= "x"{2,3})", {"xx", "xxx"}, {"x", "xxxx"}},
      {R"(root ::= "x"{2,})", {"xx", "xxxxxxx"}, {"x"}},
      {R"(root ::= "x"{2})", {"xx"}, {"x", "xxx"}},
      {R"(root ::= ("a" | "b")* "c"?)", {"", "abab", "abc", "c"}, {"ca", "cc"}},
      {"# comment\nroot ::= item (\",\" item)*\nitem ::= [0-9]+ # trailing\n",
       {"1", "12,3,45"},
       {"", "1,", ",1"}},
      {R"(root ::= "\x41\n\t\"\\" [\u00e9-\u00ea])",
       {"A\n\t\"\\\xC3\xA9", "A\n\t\"\\\xC3\xAA"},
       {"A\n\t\"\\e"}},
      {"root ::= \"(\" root \")\" | \"\"", {"", "()", "((()))"}, {"(", "(()", ")("}},
      {R"(root ::= . .)", {"ab", "\xE2\x82\xAC!"}, {"a", "abc"}},
      {R"(root ::= a b
a ::= "x"?
b ::= a "y")",
       {"y", "xy", "xxy"},
       {"x", "xxxy"}},
      {R"(root ::= [\x00-\x7F]+)", {"abc", "\x7f"}, {"\xC3\xA9"}},
  };
  for (const auto& c : cases) {
    Grammar g = parse(c.grammar);
    for (const char* s : c.accept)
      EXPECT_TRUE(matches(g, s)) << c.grammar << " should accept '" << s << "'";
    for (const char* s : c.reject)
      EXPECT_FALSE(matches(g, s)) << c.grammar << " should reject '" << s << "'";
  }
}

TEST(EbnfParser, ToStringRoundTrips) {
  Grammar g = parse(R"(root ::= "a" [b-d]* ("e" | f){1,3}
f ::= "ff")");
  Grammar again = parse(g.to_string());
  for (const char* s : {"ae",
                        "abdf"
                        "f",
                        "affeff", "abbbbeee"})
    EXPECT_EQ(matches(g, s), matches(again, s)) << s;
}

void expect_error(std::string_view text, std::string_view needle) {
  auto g = parse_ebnf(text);
  ASSERT_FALSE(g.ok()) << "expected an error for: " << text;
  EXPECT_NE(std::string(g.error().what()).find(needle), std::string::npos)
      << "error '" << g.error().what() << "' lacks '" << needle << "'";
}

TEST(EbnfParser, SyntaxErrorsHaveLineAndColumn) {
  expect_error("root ::= \"abc", "line 1, column 10: string literal is not closed");
  expect_error("root ::= \"a\"\n  other",
               "line 2, column 3: rule 'other' is used but never defined");
  expect_error("root ::= (\"a\" | \"b\"\n",
               "expected ')' to close the group opened at line 1, column 10");
  expect_error("root ::= [a-", "line 1, column 10: character class is not closed");
  expect_error("root ::= [z-a]", "range is reversed");
  expect_error("root ::= \"a\"{3,1}", "minimum above its maximum");
  expect_error("root ::= \"a\" @", "line 1, column 14: unexpected character '@'");
  expect_error("root = \"a\"", "expected '::=' after rule name 'root'");
  expect_error("item ::= \"a\"", "no rule named 'root'");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
  expect_error("root ::= \"\\q\"", "unknown escape");
  expect_error("root ::= \"\\x4\"", "hex digits");
}

TEST(EbnfParser, LeftRecursionIsAnErrorNotAStackOverflow) {
  expect_error("root ::= root \"a\" | \"a\"",
               "line 1, column 1: grammar rule 'root' is left-recursive");
  expect_error("root ::= x\nx ::= y \"b\"\ny ::= \"\" | x", "left-recursive");
  expect_error("root ::= a\na ::= \"a\" a", "can never finish");
}

TEST(EbnfParser, DeepNestingIsRefused) {
  std::string deep = "root ::= " + std::string(5000, '(') + "\"a\"" + std::string(5000, ')');
  expect_error(deep, "nested more than");
  expect_error("root ::= \"a\"" + std::string(100000, '?'), "too many repetition operators");
  // Deep but allowed.
  std::string ok = "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')');
  EXPECT_TRUE(matches(parse(ok), "a"));
}

TEST(EbnfParser, GarbageNeverCrashes) {
  std::mt19937 rng(7);
  const std::string alphabet = "root::=\"ab|()[]^-*+?{},0123 \n\\x#.";
  for (int i = 0; i < 3000; ++i) {
    std::string text = "root ::= ";
    for (int n = rng() % 40; n-- > 0;)
      text += alphabet[rng() % alphabet.size()];
    auto g = parse_ebnf(text);
    if (g.ok()) (void)matches(*g, "ab");
  }
}

}  // namespace
}  // namespace weft::grammar
